"""Shared test configuration. Area-specific fixtures live in each test package's conftest.

Property tests run derandomized (examples derived from each test's name, no example database), so the suite
is deterministic: the same commit passes or fails the same way in CI and on a laptop. To hunt for new
counterexamples locally, run with ``HYPOTHESIS_PROFILE=explore`` (random seeds, more examples); whatever it finds
becomes an explicit case in the test module.

No property test has a deadline: Hypothesis's default (200 ms per example) is a timed assertion, and on a loaded
2-core CI machine a correct example can take longer (test_disaggregated's unknown-data property failed that way).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
