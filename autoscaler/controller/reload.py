"""Policy hot reload: the policies directory is re-read when a file changes; a bad file never takes effect.

The directory is normally a mounted ConfigMap. The kubelet updates such a mount by writing a new
``..<timestamp>`` directory and swapping the ``..data`` symlink, so files change atomically but their
mtimes do not reliably change: changes are detected by **content hash**, per file, on a poll
(``reloadPollSeconds``), not by inotify (which misses symlink swaps) nor mtime.

Per changed file:
1. parse and validate it (``autoscaler.policyfile.loader``) and compile every policy (``core.engine``);
2. reject it when that fails, or when it defines a policy name another file already defines;
3. a rejected file keeps its **last good** policies in force; the rejection is reported (``Rejection``)
   so the caller emits a Warning Event, a log line and the ``autoscaler_policy_file_invalid`` metric;
4. a removed file removes its policies;
4a. a policy whose definition is the same as before (by content, wherever it moved) keeps its compiled object:
   a reload then evaluates at once only the policies it added or changed (``renewed``), not every policy of
   the set (one edited file of 5,000 policies was a full pass of 5,000);
5. one owner per target, by ``validate``'s own rule (``loader.owner_conflicts``) over every policy in force,
   in sorted file order then document order: the first policy naming a target runs; a later one naming the
   same target is **held** (not evaluated) and reported (``conflicts``: an ``OwnershipConflict`` Warning
   Event and condition), on every load and reload alike. So every replica, and a restart, pick the same
   owner whatever order the files arrived in; a held policy runs as soon as the other is removed or retargeted.

``ScalingPolicy`` objects the controller watches (``controller.objects``) go through the same steps: each is
one more "file", named ``ScalingPolicy <namespace>/<name>``, whose text is the object as YAML (``objects``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import yaml

from autoscaler.core.engine import CompiledPolicy, compile_policy
from autoscaler.policyfile import loader

POLICY_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Rejection:
    """A file that was not (re)loaded, why, and the policies that stay in force in its place."""

    file: str
    problems: tuple[str, ...]
    kept: tuple[CompiledPolicy, ...]

    @property
    def message(self) -> str:
        first = self.problems[0] if self.problems else "invalid"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        kept = f"; keeping the last good version ({len(self.kept)} policies)" if self.kept else ""
        return f"rejected policy file {Path(self.file).name}: {first}{more}{kept}"


@dataclass(frozen=True)
class Conflict:
    """A policy held because an earlier one (by ``validate``'s order) already scales its target."""

    policy: CompiledPolicy
    file: str
    line: int
    message: str


class _Loaded(NamedTuple):
    """One file read: its compiled policies, the problems that reject it (none: it loads), where each came from."""

    compiled: tuple[CompiledPolicy, ...]
    problems: list[str]
    where: tuple[loader.LoadedPolicy, ...]


class _Settled(NamedTuple):
    """What one settling of the ownership rule changed: the policies newly held, and the names released."""

    held: tuple[Conflict, ...]
    released: tuple[str, ...]


@dataclass(frozen=True)
class ReloadResult:
    changed: bool
    loaded: tuple[str, ...] = ()  # files (re)loaded successfully
    removed: tuple[str, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    #: Policies newly held by the one-owner-per-target rule, and names no longer held.
    held: tuple[Conflict, ...] = ()
    released: tuple[str, ...] = ()


@dataclass
class PolicyStore:
    """The policies in force, by name, and per file the hash and policies of its last good version."""

    directory: Path
    _hashes: dict[str, str] = field(default_factory=dict)  # file -> hash of the content last looked at
    _good: dict[str, tuple[CompiledPolicy, ...]] = field(default_factory=dict)  # file -> last good
    #: ScalingPolicy objects read from the API server: source name -> the object as YAML text.
    objects: dict[str, str] = field(default_factory=dict)
    #: Files and objects whose latest version was rejected -> the first problem (cleared when one loads).
    rejections: dict[str, str] = field(default_factory=dict)
    _where: dict[str, tuple[loader.LoadedPolicy, ...]] = field(default_factory=dict)  # file -> their origins
    _in_force: dict[str, CompiledPolicy] = field(default_factory=dict)
    #: Policies held by the one-owner-per-target rule, by name.
    conflicts: dict[str, Conflict] = field(default_factory=dict)

    def good(self) -> dict[str, tuple[CompiledPolicy, ...]]:
        """Per file or object, the policies of its last good version."""
        return dict(self._good)

    @property
    def policies(self) -> dict[str, CompiledPolicy]:
        """The policies that run: every good policy but those held by an ownership conflict."""
        return self._in_force

    def _settle(self) -> _Settled:
        """Recompute the policies in force and the conflicts; return the newly held and the released."""
        ordered: list[tuple[CompiledPolicy, loader.LoadedPolicy]] = []
        names: set[str] = set()
        for file in sorted(self._good):
            for cp, lp in zip(self._good[file], self._where.get(file, ()), strict=False):
                if cp.name not in names:
                    names.add(cp.name)
                    ordered.append((cp, lp))
        by_origin = {(lp.file, lp.line): cp for cp, lp in ordered}
        conflicts: dict[str, Conflict] = {}
        # validate's own rule, over the union: the first policy (sorted files, document order) owns a target.
        for problem in loader.owner_conflicts([lp for _, lp in ordered]):
            later = by_origin.get((problem.file, problem.line))
            if later is not None and problem.path == "spec.target":
                conflicts[later.name] = Conflict(later, problem.file, problem.line, problem.message)
        held = tuple(c for n, c in conflicts.items() if n not in self.conflicts)
        released = tuple(n for n in self.conflicts if n not in conflicts)
        self.conflicts = conflicts
        self._in_force = {cp.name: cp for cp, _ in ordered if cp.name not in conflicts}
        return _Settled(held, released)

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        # Skip the kubelet's ``..data``/``..2026_..`` entries and editor dotfiles; follow the symlinks.
        return sorted(
            p for p in self.directory.iterdir()
            if not p.name.startswith(".") and p.suffix in POLICY_SUFFIXES and p.is_file()
        )

    def reload(self) -> ReloadResult:
        """Look at every file once; apply what changed."""
        seen: dict[str, str] = {}
        contents: dict[str, bytes] = {}
        for p in self.files():
            try:
                data = p.read_bytes()
            except OSError:
                continue  # vanished between listing and reading (symlink swap); next poll sees it
            seen[str(p)] = hashlib.sha256(data).hexdigest()
            contents[str(p)] = data
        for source, text in self.objects.items():
            seen[source] = hashlib.sha256(text.encode()).hexdigest()
        removed = tuple(sorted(set(self._hashes) - set(seen)))
        # Every policy of the last good versions, before this reload replaces any: an unchanged one is kept.
        previous = {cp.name: cp for cps in self._good.values() for cp in cps}
        for f in removed:
            self._hashes.pop(f, None)
            self._good.pop(f, None)
            self.rejections.pop(f, None)
            self._where.pop(f, None)
        changed = [f for f in sorted(seen) if self._hashes.get(f) != seen[f]]
        if not removed and not changed:
            # Nothing to settle: the policy set stays the same object (the loop's indexes key on it), and
            # the ownership rule is not re-run over every policy every poll (0.2 s at 1,000 policies).
            return ReloadResult(False, (), (), (), (), ())
        loaded: list[str] = []
        rejected: list[Rejection] = []
        for f in changed:
            self._hashes[f] = seen[f]
            got = self._load(f, others=self._names_except(f), text=self.objects.get(f))
            compiled, problems, where = got.compiled, got.problems, got.where
            if problems:
                rejected.append(Rejection(f, tuple(problems), self._good.get(f, ())))
                self.rejections[f] = problems[0]
            else:
                self._good[f] = tuple(_unchanged(cp, previous) for cp in compiled)
                self.rejections.pop(f, None)
                self._where[f] = where
                loaded.append(f)
        settled = self._settle()
        return ReloadResult(bool(removed or changed), tuple(loaded), removed, tuple(rejected), settled.held,
                            settled.released)

    def _names_except(self, file: str) -> set[str]:
        return {cp.name for f, cps in self._good.items() if f != file for cp in cps}

    @staticmethod
    def _load(
        file: str, *, others: Iterable[str], text: str | None = None
    ) -> _Loaded:
        try:
            loaded = loader.load_paths([file]) if text is None else loader.load_text(text, file)
        except loader.PolicyFileError as exc:
            return _Loaded((), [str(p) for p in exc.problems] or [str(exc)], ())
        except (OSError, ValueError, yaml.YAMLError) as exc:  # pydantic's errors are ValueErrors
            return _Loaded((), [f"{file}: {_one_line(exc)}"], ())
        taken = set(others)
        compiled: list[CompiledPolicy] = []
        problems: list[str] = []
        for lp in loaded:
            name = lp.policy.metadata.name
            if name in taken:
                problems.append(f"{lp.file}:{lp.line}: policy {name!r} is already defined in another file")
                continue
            taken.add(name)
            try:
                compiled.append(compile_policy(lp.policy))
            except Exception as exc:  # a policy type that cannot build is a bad policy, not a crash
                problems.append(f"{lp.file}:{lp.line}: policy {name!r} does not compile: {_one_line(exc)}")
        return _Loaded(tuple(compiled), problems, tuple(loaded))


def _unchanged(cp: CompiledPolicy, previous: Mapping[str, CompiledPolicy]) -> CompiledPolicy:
    """The compiled policy of the last good version when its definition is the same (``ScalingPolicy``
    equality: every field of metadata and spec), else ``cp``: so an object that is not the one in force before
    is a policy added or changed (``renewed``)."""
    before = previous.get(cp.name)
    return before if before is not None and before.policy == cp.policy else cp


def renewed(before: Mapping[str, CompiledPolicy], after: Mapping[str, CompiledPolicy]) -> list[str]:
    """The policies a reload evaluates at once (``Runtime.reload``), in ``after``'s order: each one added (a new
    name, or one released from an ownership conflict) or changed (a new compiled object: ``PolicyStore`` keeps
    the object of a policy defined as before); and, when a policy with a ``capacity`` block was added, changed,
    held or removed, every policy with one: they arbitrate together (a ClusterQueue's pass ledger, the
    cohorts learned from the cluster), so the others' decisions may move with it. A policy defined as before
    waits for its own period, probes or watches, as it would have without the reload."""
    fresh = [n for n, cp in after.items() if before.get(n) is not cp]
    gone = [cp for n, cp in before.items() if n not in after]
    if any(after[n].policy.spec.capacity is not None for n in fresh) or any(
            cp.policy.spec.capacity is not None for cp in gone):
        return [n for n, cp in after.items() if n in fresh or cp.policy.spec.capacity is not None]
    return fresh


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
