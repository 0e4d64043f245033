"""An HTTP-level emulation of the Kubernetes API server for tests (``emulator``), its pytest fixtures
(``fixtures``), object builders (``objects``) and an explicit, test-driven stand-in for Kueue's
admission (``kueue``).

The code under test talks to the emulator through the real ``kubernetes_asyncio`` client over HTTP, so
content types, resourceVersions, conflicts, RBAC denials and watch semantics are exercised on the wire.
It is not a controller: nothing happens in the emulated cluster unless a test (or the code under test)
writes it.
"""
