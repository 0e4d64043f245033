"""The ``autoscaler`` command: one sub-command per capability, each defined beside the code it drives."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from autoscaler import __version__
from autoscaler.policyfile import files

#: Every sub-command and the module that defines it, in the order `autoscaler --help` lists them. A command's
#: module is imported only when that command is named (or when none is, for the overall help): start-up then
#: costs one command's imports, and `validate`, `replay` and `simulate` never load an HTTP or Kubernetes
#: client (tests/test_startup.py checks it).
COMMANDS: dict[str, str] = {
    "calibrate": "autoscaler.calibrate",
    "observe": "autoscaler.commands.observe",
    "record": "autoscaler.commands.record",
    "replay": "autoscaler.replay.command",
    "run": "autoscaler.controller.command",
    "simulate": "autoscaler.sim.command",
    "validate": "autoscaler.policyfile.command",
}


def _named(argv: Sequence[str]) -> str | None:
    """The sub-command ``argv`` names: its first word that is not an option (no top-level option takes a value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (``autoscaler simulate: argument --seed: invalid int value: 'x';
    see autoscaler simulate --help``), exit 2; sub-command parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {' '.join(message.split())}; see {self.prog} --help\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autoscaler",
        description="Autoscaling and preemption for LLM serving and training on shared accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"autoscaler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = _named(sys.argv[1:] if argv is None else argv)
    for name, module_name in COMMANDS.items():
        if named is None or name == named:
            importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run the sub-command, and be the one error boundary of every command.

    Whatever a command lets escape becomes one line on stderr, ``autoscaler <command>: what is wrong``, and
    exit status 1 (2 stays argparse's, for usage errors); never a traceback:

    - ``BrokenPipeError`` (``autoscaler ... | head -1``): stdout is pointed at /dev/null so that the
      interpreter's final flush cannot fail again, and the command stops;
    - ``files.InputError`` (a FIFO, a device, a file over its limit) and any other ``OSError``: the message;
    - ``MemoryError``, ``RecursionError`` and any other exception: an internal error, named, to be reported.
    """
    prog = "autoscaler"
    try:
        # Inside the boundary: `autoscaler --help | head -1` fails in argparse's own print.
        args = build_parser(argv).parse_args(argv)
        prog = f"autoscaler {args.command}"
        code: int = args.func(args)
        sys.stdout.flush()
    except SystemExit:
        # argparse's --help and usage errors exit from inside parse_args; their output must reach a closed pipe
        # quietly too (the interpreter flushes stdout once more at exit).
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
            _fail(prog, "output closed early (broken pipe); stopped")
        raise
    except KeyboardInterrupt:
        return _fail(prog, "interrupted", 130)
    except BrokenPipeError:
        _silence_stdout()
        return _fail(prog, "output closed early (broken pipe); stopped")
    except files.InputError as exc:
        return _fail(prog, str(exc))
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(prog, f"{where}{exc.strerror or exc}")
    except MemoryError:
        return _fail(prog, "out of memory; the input is too large for this machine")
    except Exception as exc:  # the last resort: every known failure is reported by the command itself
        text = " ".join(str(exc).split())[:300]
        return _fail(prog, f"internal error: {type(exc).__name__}: {text}; please report it")
    return code


def _fail(prog: str, message: str, code: int = 1) -> int:
    first, *rest = message.strip().splitlines() or [""]
    more = f" (and {len(rest)} more lines)" if rest else ""
    with contextlib.suppress(OSError):  # stderr itself is gone: the exit status still says it
        print(f"{prog}: {first}{more}", file=sys.stderr, flush=True)
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null: Python flushes it again at exit, which would print a second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # no real file descriptor (tests capture stdout): nothing will flush it at exit


if __name__ == "__main__":
    sys.exit(main())
