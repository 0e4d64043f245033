"""Count the fault suite's scenarios by kind: ``python -m tests.faults`` (the README's figure).

Collects ``tests/faults`` with pytest (nothing runs) and counts the items marked ``@pytest.mark.fault(kind)``;
a parametrized scenario counts once per case. Exit 1 when a test in the directory carries no ``fault`` mark.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter
from pathlib import Path

import pytest


class _Count:
    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.unmarked: list[str] = []

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker("fault")
            if mark is None or not mark.args:
                self.unmarked.append(item.nodeid)
            else:
                self.kinds[str(mark.args[0])] += 1


def main() -> int:
    here = Path(__file__).resolve().parent
    counter = _Count()
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", str(here)], plugins=[counter])
    if code not in (0, 5):
        print(quiet.getvalue())
        return int(code)
    for kind, n in sorted(counter.kinds.items()):
        print(f"{kind:36} {n}")
    total = sum(counter.kinds.values())
    print(f"{'total':36} {total} scenarios in {len(counter.kinds)} kinds")
    if counter.unmarked:
        print("not marked with @pytest.mark.fault:", *counter.unmarked, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
