"""Structured JSON logs (structlog): one object per line, the decision's reason and message as fields.

``configure`` is called once by ``autoscaler run``; library code only calls ``get_logger``. Log lines carry
``event`` (what happened), ``policy``, ``target`` and for decisions ``reason`` (the core's Reason value) and
``message`` (the decision's one sentence), so ``jq 'select(.reason=="ScaleUp")'`` answers "why did it scale?".
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _Stderr:
    """Whatever ``sys.stderr`` is at write time (test runners swap it; a bound stream would go stale)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """JSON lines to ``stream`` (stderr by default) at ``level``, with ISO UTC timestamps."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or _Stderr()),  # type: ignore[arg-type]
        # Tests reconfigure with a different stream; caching would pin the first one.
        cache_logger_on_first_use=False,
    )


def get_logger(**bound: Any) -> Any:
    """A logger with ``bound`` fields on every line (``component="leader"``...)."""
    return structlog.get_logger("autoscaler").bind(**bound)
