"""Shared test configuration. Area-specific fixtures live in each test package's conftest.

Property tests run derandomized (examples derived from each test's name, no example database), so the suite
is deterministic: the same commit passes or fails the same way in CI and on a laptop. To hunt for new
counterexamples locally, run with ``HYPOTHESIS_PROFILE=explore`` (random seeds, more examples); whatever it finds
becomes an explicit case in the test module.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
