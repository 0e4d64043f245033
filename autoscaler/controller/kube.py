"""The Kubernetes API client, and the few helpers every actuator shares.

- ``connect``: an ``ApiClient`` from ``--kubeconfig``, else ``$KUBECONFIG``, else the pod's service account
  (in cluster), else ``~/.kube/config``; a clear ``KubeConfigError`` when none is usable.
- ``translate`` / ``call``: the server's ``Status`` errors as typed exceptions (``Conflict``, ``Forbidden``,
  ``NotFound``, ``Gone``, ``ServerError``...), each one line with the server's own message.
- ``RetryPolicy`` / ``retrying``: bounded, jittered retries (tenacity) of a read-modify-write *attempt*, for
  conflicts and server errors only; a 403 or 404 is never retried.
- ``Refusal``: "this is not ours to change" (another autoscaler owns the target, a Workload we could not
  find again); the loop reports it as a Warning Event and does not retry.
- ``request_json`` / ``get_json``: a call answered as plain JSON (dicts), skipping the client's typed models:
  their deserialisation (dateutil timestamps, one object per field) cost more CPU than everything else a tick
  does.
- ``parse_quantity``: Kubernetes quantities ("6", "6000m", "1Gi") as numbers.
- ``with_deadlines``: the one place every API call gets its deadline (see ``DeadlineRest``); ``Backoff``:
  exponential backoff with full jitter for the watches and the lease campaign.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import aiohttp.helpers
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)
from yarl import URL

from autoscaler.controller.logs import get_logger
from autoscaler.policyfile import files

T = TypeVar("T")

#: Default budget of one API call (seconds); an estimate: far above a healthy server's milliseconds, far
#: below the controller's liveness threshold, so a black-holed request fails its evaluation, not the process.
DEFAULT_DEADLINE_S = 10.0
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"


class KubeConfigError(Exception):
    """No usable way to reach the API server."""


class Refusal(Exception):
    """The controller will not make this change: it is not (or no longer provably) its to make."""


class KubeError(Exception):
    """An API call failed with a Kubernetes ``Status``; ``str()`` is one line with the server's message."""

    retryable = False

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class BadRequest(KubeError):
    """400, 415, 422: the request itself is wrong (a bug here, or an API the server does not have)."""


class Forbidden(KubeError):
    """403: RBAC denies it. Fix the ClusterRole; retrying does not help."""


class NotFound(KubeError):
    """404: the object, or the API (a CRD not installed, a version not served)."""


class Conflict(KubeError):
    """409: the object changed since it was read (or already exists). Re-read and try again."""

    retryable = True


class Gone(KubeError):
    """410: a resourceVersion too old to watch or list from. Relist."""


class ServerError(KubeError):
    """429 and 5xx: the server is overloaded or failing. Retry within a bound, not sooner than the server's
    ``Retry-After`` (``retry_after_s``) when it sent one."""

    retryable = True

    #: The server's ``Retry-After`` in seconds (None: it sent none).
    retry_after_s: float | None = None


class BadAnswer(KubeError):
    """A success status whose body is no Kubernetes object: JSON nested deeper than Python's decoder recurses
    (the client's ``json.loads`` raises RecursionError), or, for ``request_json``, text or a JSON array. A proxy
    or a broken server, never the API server: not retried, the call fails as any read does."""


def translate(exc: ApiException) -> KubeError:
    """The typed error for a failed API call, with the message of the server's ``Status`` when it sent one."""
    status = int(exc.status or 0)
    reason, message = str(exc.reason or ""), ""
    body: Any = None
    if exc.body:
        try:
            body = json.loads(exc.body)
        except (TypeError, ValueError, RecursionError):
            # Not a Status: the max-in-flight and priority-and-fairness filters answer 429 with Go's http.Error
            # plain text ("Too many requests, please try again later.\n"); a proxy may answer with HTML. One line.
            # A body nested deeper than Python's decoder recurses (RecursionError) is no Status either.
            text = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body)
            message = " ".join(text.split())[:300]
    if isinstance(body, dict):
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or message)
    if not message:
        message = reason or "no message"
    kind: type[KubeError]
    if status == 403:
        kind = Forbidden
    elif status == 404:
        kind = NotFound
    elif status == 409:
        kind = Conflict
    elif status == 410:
        kind = Gone
    elif status == 429 or status >= 500 or status == 0:
        kind = ServerError
    elif 400 <= status < 500:
        kind = BadRequest
    else:
        kind = KubeError
    error = kind(status, reason, message)
    if isinstance(error, ServerError):
        error.retry_after_s = retry_after(exc, body)
    return error


def retry_after(exc: ApiException, body: object) -> float | None:
    """The seconds a 429 or 5xx asks the client to wait: its ``Retry-After`` header (whole seconds, as the API
    server's max-in-flight and priority-and-fairness filters send it), else the Status's
    ``details.retryAfterSeconds``; None when neither says, or says nonsense."""
    headers = getattr(exc, "headers", None) or {}
    value: object = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None and isinstance(body, dict):
        value = (body.get("details") or {}).get("retryAfterSeconds")
    try:
        seconds = float(str(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: not what the API server sends; the jittered wait stands
    return seconds if seconds is not None and 0 < seconds < math.inf else None


async def call(awaitable: Awaitable[T]) -> T:
    """Await an API call, raising the typed ``KubeError`` instead of ``ApiException`` (and ``BadAnswer`` instead
    of the RecursionError the client's decoder raises on a body nested too deeply)."""
    try:
        return await awaitable
    except ApiException as exc:
        raise translate(exc) from None
    except RecursionError:
        raise BadAnswer(200, "BadAnswer", "the answer is JSON nested too deeply to read") from None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries with full jitter: at most ``attempts`` tries, waits up to ``max_wait_s``."""

    attempts: int = 5
    base_s: float = 0.1
    max_wait_s: float = 2.0


DEFAULT_RETRY = RetryPolicy()
#: The longest ``Retry-After`` honoured before a retry (seconds; an estimate): the API server asks for 1 s; a
#: larger ask is cut so that one call's retries stay within a pass, not hold its policy for minutes.
RETRY_AFTER_MAX_S = 5.0


def _wait(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    """Full jitter (``wait_random_exponential``), but never sooner than the failed call's ``Retry-After``: client-go
    waits it out before retrying a 429 or 5xx (k8s.io/client-go rest/request.go, ``checkWait``); retrying sooner
    only meets the priority-and-fairness filter's next 429."""
    jitter = wait_random_exponential(multiplier=policy.base_s, max=policy.max_wait_s)

    def wait(state: RetryCallState) -> float:
        base = float(jitter(state))
        failed = state.outcome.exception() if state.outcome is not None else None
        after = failed.retry_after_s if isinstance(failed, ServerError) else None
        return max(base, min(after, RETRY_AFTER_MAX_S)) if after else base

    return wait


async def retrying(policy: RetryPolicy, attempt: Callable[[], Awaitable[T]]) -> T:
    """Run ``attempt`` (which must re-read what it writes) again on ``Conflict`` or ``ServerError``.

    Jitter spreads the retries of controller replicas or policies that collided; a server's ``Retry-After`` is
    waited out (``_wait``); the last error is raised as is once the attempts are spent.
    """
    retryer = AsyncRetrying(
        stop=stop_after_attempt(policy.attempts),
        wait=_wait(policy),
        retry=retry_if_exception_type((Conflict, ServerError)),
        reraise=True,
    )
    async for trial in retryer:
        with trial:
            return await attempt()
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


JsonObj = dict[str, Any]


async def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    body: object = None,
    content_type: str | None = None,
    query: Mapping[str, str | int] | None = None,
) -> JsonObj:
    """One API call answered as plain JSON (dicts), untyped: ``path`` is ``/api/v1/...`` or ``/apis/...``, sent
    through ``api`` (its auth, host and connection pool); a Status error raises the typed ``KubeError`` (as
    ``call`` does). Every read and every scale write goes through here, so a per-call deadline has one home."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    result: JsonObj = await call(
        api.call_api(
            path, method,
            query_params=[(k, v) for k, v in (query or {}).items() if v not in (None, "")],
            header_params=headers,
            body=body,
            response_types_map={200: "object", 201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
    )
    if not isinstance(result, dict):  # the client hands back text it cannot decode, and any JSON as is
        shown = " ".join(str(result).split())[:100]
        raise BadAnswer(200, "BadAnswer", f"the answer to {method} {path} is not a JSON object: {shown!r}")
    return result


async def get_json(
    api: client.ApiClient, path: str, *, query: Mapping[str, str | int] | None = None
) -> JsonObj:
    """GET ``path`` as plain JSON (see ``request_json``)."""
    return await request_json(api, "GET", path, query=query)


_SUFFIXES = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]{0,2})$")


def parse_quantity(value: object) -> float:
    """``"6"`` → 6.0, ``"6000m"`` → 6.0, ``"1Gi"`` → 1073741824.0; numbers pass through."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


async def configuration(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    home_fallback: bool = True,
) -> client.Configuration:
    """Where to reach the API server and how to authenticate, in the order ``kubectl`` users expect:
    ``kubeconfig`` (``--kubeconfig``), ``$KUBECONFIG``, the in-cluster service account, then ``~/.kube/config``
    unless ``home_fallback`` is false (the controller: a process that writes must never act on whatever
    cluster the home kubeconfig happens to point at)."""
    env = dict(os.environ if environ is None else environ)
    conf = client.Configuration()
    explicit = kubeconfig or env.get("KUBECONFIG")
    if explicit:
        _check_kubeconfig_files(explicit)
    try:
        if explicit:
            # $KUBECONFIG may list several files; the client merges them as kubectl does.
            await config.load_kube_config(config_file=explicit, context=context, client_configuration=conf)
            return conf
        if env.get("KUBERNETES_SERVICE_HOST"):
            loader = config.incluster_config.InClusterConfigLoader(
                token_filename=str(service_account_dir / "token"),
                cert_filename=str(service_account_dir / "ca.crt"),
                environ=env,
            )
            loader.load_and_set(conf)
            return conf
        home = Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"
        if home_fallback and home.is_file():
            await config.load_kube_config(config_file=str(home), context=context, client_configuration=conf)
            return conf
    except (ConfigException, OSError, ValueError, yaml.YAMLError, TypeError, AttributeError, KeyError) as exc:
        # The client parses the file itself: broken YAML (yaml.YAMLError) or a document of the wrong shape (a list,
        # ``clusters: 5``: TypeError, AttributeError) ended ``run`` and ``observe`` with "internal error".
        in_cluster = env.get("KUBERNETES_SERVICE_HOST")
        where = explicit or ("the in-cluster service account" if in_cluster else "~/.kube/config")
        why = str(exc) if isinstance(exc, ConfigException | OSError | ValueError) else (
            f"not a kubeconfig ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
        raise KubeConfigError(f"cannot load Kubernetes credentials from {where}: {why}") from None
    raise KubeConfigError(
        "no Kubernetes credentials: pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account"
    )


def _check_kubeconfig_files(paths: str) -> None:
    """Refuse, in one line, what the client would only log ("Config not found: ...", no command prefix) or block
    on (a FIFO): a list in which no file exists, and any listed path that is not a regular file."""
    listed = [p for p in paths.split(os.pathsep) if p]
    existing = [p for p in listed if os.path.exists(p)]
    if not existing:
        raise KubeConfigError(f"cannot load Kubernetes credentials from {paths}: no such file")
    for p in existing:
        try:
            files.check_regular(p, what="kubeconfig")
        except files.InputError as exc:
            raise KubeConfigError(f"cannot load Kubernetes credentials from {p}: {exc.reason}") from None


async def connect(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    home_fallback: bool = True,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> client.ApiClient:
    """An ``ApiClient`` for the cluster (see ``configuration``) whose every call has a deadline
    (``with_deadlines``); close it with ``await api.close()``."""
    conf = await configuration(
        kubeconfig, context=context, environ=environ, service_account_dir=service_account_dir,
        home_fallback=home_fallback,
    )
    return with_deadlines(client.ApiClient(conf), deadline_s)


# --- deadlines and backoff ------------------------------------------------------------------------------


class DeadlineRest:
    """The client's REST layer with a deadline on every request that does not bring its own.

    Every call of ``kubernetes_asyncio`` (typed API methods, ``call_api``, ``get_json``, watches) ends in
    ``ApiClient.rest_client.request``; wrapping it there is the one place that bounds them all (the client's
    own default is no timeout at all: one black-holed GET used to stop every policy).

    - a request: ``aiohttp.ClientTimeout(total=deadline)``, which covers connecting, sending and reading
      the body (also a body read later, as with ``_preload_content=False``);
    - a watch (``watch=true``): the stream lives as long as its ``timeoutSeconds``, so the bound is on
      connecting (``deadline``) and on the silence between two reads (``timeoutSeconds + deadline``): a
      stream the server stopped feeding without closing it fails instead of hanging forever.

    The timers are the event loop's, so tests on virtual time (looptime) see virtual deadlines.
    """

    def __init__(self, inner: Any, deadline_s: float) -> None:
        self.inner = inner
        self.deadline_s = deadline_s
        #: The server's ``Warning`` headers logged so far (each text once: see ``warned``).
        self.warnings_seen: set[str] = set()

    def timeout_for(self, query_params: Any) -> aiohttp.ClientTimeout:
        query = dict(query_params or [])
        if str(query.get("watch", "")).lower() in ("true", "1"):
            server_s = float(query.get("timeoutSeconds") or 0) or 300.0
            return aiohttp.ClientTimeout(sock_connect=self.deadline_s, sock_read=server_s + self.deadline_s)
        return aiohttp.ClientTimeout(total=self.deadline_s)

    async def request(
        self, method: str, url: str, query_params: Any = None, headers: Any = None, body: Any = None,
        post_params: Any = None, _preload_content: bool = True, _request_timeout: Any = None,
    ) -> Any:
        try:
            response = await self.inner.request(
                method, url, query_params=query_params, headers=headers, body=body, post_params=post_params,
                _preload_content=_preload_content,
                _request_timeout=_request_timeout or self.timeout_for(query_params),
            )
        except ApiException as exc:
            self.warned(method, url, getattr(exc, "headers", None))
            raise
        answered = response.getheaders() if hasattr(response, "getheaders") else getattr(response, "headers", None)
        self.warned(method, url, answered)
        return response

    def warned(self, method: str, url: str, headers: Any) -> None:
        """Log the server's ``Warning`` headers (RFC 7234 ``299 - "text"``), each distinct text once per process.

        The API server warns where it still answers: a deprecated API version (``<group>/<version> <Kind> is
        deprecated; use ...``), a field it dropped from what we wrote (``unknown field "spec.x"``, under
        ``fieldValidation`` Warn, the default), an admission webhook's warnings. kubernetes_asyncio drops them;
        client-go logs them (``rest.WarningLogger``). A dropped field is a write that silently did less than we
        meant, and a deprecated version is one the next upgrade removes: an operator must be able to see both.
        Once per text (as client-go's deduplicating ``WarningWriter``): watches are re-opened every few minutes
        and each re-open repeats a deprecation warning."""
        values = headers.getall("Warning", []) if hasattr(headers, "getall") else []
        for value in values:
            text = warning_text(str(value))
            if text in self.warnings_seen or len(self.warnings_seen) >= WARNINGS_REMEMBERED:
                continue
            self.warnings_seen.add(text)
            get_logger(component="kube").warning("api_warning", warning=text, method=method,
                                                 path=URL(url).path)

    # The REST client's per-verb entry points (``ApiClient.request`` calls these), all through ``request``.
    async def GET(self, url: str, **kwargs: Any) -> Any:
        return await self.request("GET", url, **kwargs)

    async def HEAD(self, url: str, **kwargs: Any) -> Any:
        return await self.request("HEAD", url, **kwargs)

    async def OPTIONS(self, url: str, **kwargs: Any) -> Any:
        return await self.request("OPTIONS", url, **kwargs)

    async def POST(self, url: str, **kwargs: Any) -> Any:
        return await self.request("POST", url, **kwargs)

    async def PUT(self, url: str, **kwargs: Any) -> Any:
        return await self.request("PUT", url, **kwargs)

    async def PATCH(self, url: str, **kwargs: Any) -> Any:
        return await self.request("PATCH", url, **kwargs)

    async def DELETE(self, url: str, **kwargs: Any) -> Any:
        return await self.request("DELETE", url, **kwargs)

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:  # pool_manager and the rest of the REST client
        return getattr(self.inner, name)


#: How many distinct ``Warning`` texts one client logs (an estimate: a handful in practice; past this, none more,
#: so a server that puts a changing value in its warnings cannot grow the set without bound).
WARNINGS_REMEMBERED = 256
_WARNING = re.compile(r'^\s*\d{3}\s+\S+\s+"((?:[^"\\]|\\.)*)"')


def warning_text(value: str) -> str:
    """The text of one ``Warning`` header value (``299 - "text"``, quotes and backslashes escaped); the value as
    it is when it does not have that form."""
    match = _WARNING.match(value)
    return re.sub(r"\\(.)", r"\1", match.group(1)) if match else value.strip()


def with_deadlines(api: client.ApiClient, deadline_s: float = DEFAULT_DEADLINE_S) -> client.ApiClient:
    """Give every call made through ``api`` a deadline (see ``DeadlineRest``), and read the environment's proxy
    for the API server once (``environment_once``); idempotent (a second call only changes the deadline).
    Returns ``api``."""
    rest: Any = api.rest_client
    if isinstance(rest, DeadlineRest):
        rest.deadline_s = deadline_s
    else:
        environment_once(api)
        # Replacing the attribute (composition, not a subclass): tests and callers may hand over any ApiClient.
        setattr(api, "rest_client", DeadlineRest(rest, deadline_s))  # noqa: B010 (the stub types it narrowly)
    return api


def environment_once(api: client.ApiClient) -> None:
    """Resolve the proxy the environment gives for the API server (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY``)
    once, here, and stop the client's session from consulting the environment on every request.

    Why: ``kubernetes_asyncio`` opens its aiohttp session with ``trust_env=True``, and aiohttp (3.10+) then runs,
    **per request**, two jobs on the default thread pool: reading ``~/.netrc`` (a file open and parse, for HTTP
    basic auth) and parsing the proxy variables. Each is a hand-off to a thread and back, contending for the GIL
    with the event loop: under load (2026-12-02 01:35 UTC, load 5, 5,000 policies, py-spy) these came to about
    a tenth of the controller's samples, and an escalated evaluation makes four API calls before its write.
    All requests of one ``ApiClient`` go to one host, so the answer is the same every time; client-go too
    reads the proxy variables once per process (``http.ProxyFromEnvironment``), and reads no ``.netrc`` (the
    API server authenticates by token or certificate, which the configuration carries). An explicit
    ``configuration.proxy`` is kept as it is. A process whose proxy variables change after start keeps the
    first answer, as client-go does."""
    rest: Any = api.rest_client
    session = getattr(rest, "pool_manager", None)
    if not isinstance(session, aiohttp.ClientSession) or not session.trust_env:
        return
    if not getattr(rest, "proxy", None):
        try:
            proxy, auth = aiohttp.helpers.get_env_proxy_for_url(URL(api.configuration.host or ""))
        except LookupError:  # none set, or NO_PROXY names the server
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(getattr(rest, "proxy_headers", None) or {}),
                                      "Proxy-Authorization": auth.encode()}
    # aiohttp has no public setter; the attribute is what ``trust_env`` reads (tests/controller/test_kube.py
    # fails should aiohttp rename it: it counts the environment look-ups of a request).
    session._trust_env = False


def reserve_watch_connections(api: client.ApiClient, watches: int) -> None:
    """Size ``api``'s connection pool to its configuration's ``connection_pool_maxsize`` (kubernetes_asyncio: 100)
    **plus** ``watches``, the watches open on it.

    Why: each watch holds one HTTP/1.1 connection for as long as it runs (aiohttp speaks no HTTP/2; client-go
    multiplexes every watch over one HTTP/2 connection, so a Go controller never meets this). With the pool shared,
    100 watches (50 namespaces with targets: a target watch and a pod watch each) left no connection for a read or
    a write, and every call waited for one until its deadline: against the emulator with a pool of 4 and 4
    watches, a read failed with ``TimeoutError`` at its 2 s deadline (tests/actions/test_kube.py). The runtime
    calls this whenever its set of watches changes. aiohttp has no public setter: the attribute is the one its
    connector reads (the test fails should aiohttp rename it)."""
    rest: Any = api.rest_client
    inner = rest.inner if isinstance(rest, DeadlineRest) else rest
    session = getattr(inner, "pool_manager", None)
    connector = getattr(session, "connector", None)
    if not isinstance(connector, aiohttp.BaseConnector) or not connector.limit:
        return  # not an aiohttp pool, or an unlimited one
    requests = int(api.configuration.connection_pool_maxsize or 0)
    connector._limit = requests + max(0, watches) if requests else 0


def deadline_of(api: client.ApiClient) -> float | None:
    """The per-call deadline ``with_deadlines`` gave ``api`` (None: none)."""
    rest: Any = api.rest_client
    return rest.deadline_s if isinstance(rest, DeadlineRest) else None


@dataclass
class Backoff:
    """Exponential backoff with full jitter (the AWS architecture blog's "full jitter"; client-go's reflector
    backs off its watches the same way, 0.8 s doubling to 30 s): the n-th consecutive failure waits a
    uniform random time in ``[0, min(cap, base × 2ⁿ)]``, at least ``floor_s``; ``reset`` after a success.

    Jitter keeps N replicas (or N watches) that failed together from retrying in lockstep.
    """

    base_s: float = 0.8
    cap_s: float = 30.0
    floor_s: float = 0.1
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next(self) -> float:
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return max(self.floor_s, self.rng.uniform(0.0, ceiling))

    def reset(self) -> None:
        self.failures = 0
