"""Client construction (kubeconfig, $KUBECONFIG, service account) and typed API errors, over real HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp.helpers
import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy
from structlog.testing import capture_logs

from autoscaler import cli
from autoscaler.controller import kube as kubemod
from autoscaler.controller.kube import (
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    KubeConfigError,
    KubeError,
    NotFound,
    ServerError,
    call,
    parse_quantity,
)
from autoscaler.controller.observer import Watcher, WatchSpec
from tests.kube import objects
from tests.kube.emulator import Emulator


def _kubeconfig(path: Path, server: str, token: str = "t0ken") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emu",
        "clusters": [{"name": "emu", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": token}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "me"}}],
    }))
    return path


@pytest.mark.parametrize(
    "how",
    [pytest.param("flag", id="--kubeconfig"), pytest.param("env", id="KUBECONFIG")],
)
async def test_connect_with_a_kubeconfig(kube: Emulator, tmp_path: Path, how: str) -> None:
    kube.add(objects.deployment())
    path = _kubeconfig(tmp_path / "config", kube.url)
    env = {"KUBECONFIG": str(path)} if how == "env" else {}
    api = await kubemod.connect(str(path) if how == "flag" else None, environ=env)
    try:
        dep = await client.AppsV1Api(api).read_namespaced_deployment("tgi-gemma-deployment", "llm")
    finally:
        await api.close()
    assert dep.spec.replicas == 1


async def test_in_cluster_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", "HOME": str(tmp_path)}
    conf = await kubemod.configuration(environ=env, service_account_dir=tmp_path)
    assert conf.host == "https://10.0.0.1:443"
    assert conf.api_key["BearerToken"] == "Bearer sa-token"
    assert conf.ssl_ca_cert == str(tmp_path / "ca.crt")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({}, "no Kubernetes credentials: pass --kubeconfig", id="nothing"),
        pytest.param({"KUBECONFIG": "/nonexistent/config"}, "cannot load Kubernetes credentials from", id="bad-path"),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
            "in-cluster service account", id="in-cluster-without-token",
        ),
    ],
)
async def test_no_usable_credentials_is_one_clear_error(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(KubeConfigError, match=message):
        await kubemod.configuration(environ={"HOME": str(tmp_path), **env}, service_account_dir=tmp_path / "none")


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        pytest.param(400, BadRequest, False, id="400"),
        pytest.param(403, Forbidden, False, id="403"),
        pytest.param(404, NotFound, False, id="404"),
        pytest.param(409, Conflict, True, id="409"),
        pytest.param(410, Gone, False, id="410"),
        pytest.param(422, BadRequest, False, id="422"),
        pytest.param(429, ServerError, True, id="429"),
        pytest.param(500, ServerError, True, id="500"),
        pytest.param(503, ServerError, True, id="503"),
    ],
)
async def test_status_errors_become_typed(
    kube: Emulator, kube_client: client.ApiClient, code: int, kind: type[KubeError], retryable: bool
) -> None:
    kube.add(objects.deployment())
    kube.inject(code, "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment", message=f"boom {code}")
    with pytest.raises(kind) as err:
        await call(client.AppsV1Api(kube_client).read_namespaced_deployment("tgi-gemma-deployment", "llm"))
    assert err.value.status == code
    assert err.value.retryable is retryable
    assert "\n" not in str(err.value)


async def test_the_filters_429_is_plain_text_and_reads_as_one_line(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    """The max-in-flight and priority-and-fairness filters answer 429 before any handler: Go's ``http.Error`` plain
    text with a newline, no Status, ``Retry-After: 1``. The error is one line and keeps the wait."""
    kube.add(objects.deployment())
    kube.inject(429, "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment")
    with pytest.raises(ServerError) as err:
        await call(client.AppsV1Api(kube_client).read_namespaced_deployment("tgi-gemma-deployment", "llm"))
    assert str(err.value) == "429 Too Many Requests: Too many requests, please try again later."
    assert err.value.retry_after_s == 1.0


async def test_a_429_is_retried_no_sooner_than_its_retry_after(kube: Emulator, kube_client: client.ApiClient) -> None:
    """The API server's priority-and-fairness filter answers 429 with ``Retry-After: 1``; client-go waits it out
    before retrying (rest/request.go). ``retrying`` does too, whatever its own jitter (here none)."""
    kube.add(objects.deployment())
    path = "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment"
    kube.inject(429, path, retry_after=1, message="Too many requests, please try again later.")
    loop = asyncio.get_running_loop()
    answered: list[float] = []
    kube.after("GET", path, lambda: answered.append(loop.time()), times=2)
    apps = client.AppsV1Api(kube_client)
    got = await kubemod.retrying(kubemod.RetryPolicy(attempts=3, base_s=0.0, max_wait_s=0.0),
                                 lambda: call(apps.read_namespaced_deployment("tgi-gemma-deployment", "llm")))
    assert got.metadata.name == "tgi-gemma-deployment"
    assert len(answered) == 2
    assert answered[1] - answered[0] >= 1.0


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        pytest.param({"Retry-After": "2"}, None, 2.0, id="header"),
        pytest.param({}, {"details": {"retryAfterSeconds": 3}}, 3.0, id="status-details"),
        pytest.param({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None, None, id="http-date-ignored"),
        pytest.param({}, None, None, id="none"),
    ],
)
def test_retry_after_is_read_from_the_header_or_the_status(
    headers: dict[str, str], body: dict[str, object] | None, seconds: float | None
) -> None:
    exc = ApiException(status=429, reason="Too Many Requests")
    exc.headers = CIMultiDictProxy(CIMultiDict(headers))
    assert kubemod.retry_after(exc, body) == seconds


@pytest.mark.parametrize("reserved", [True, False], ids=["reserved", "shared"])
async def test_watches_leave_the_pool_s_connections_to_calls(kube: Emulator, reserved: bool) -> None:
    """Each watch holds an HTTP/1.1 connection for its life. With as many watches as the pool has connections a
    read waits for one until its deadline; ``reserve_watch_connections`` gives the watches their own."""
    kube.add(objects.deployment())
    conf = client.Configuration(host=kube.url)
    conf.connection_pool_maxsize = 4
    api = kubemod.with_deadlines(client.ApiClient(conf), 2.0)
    if reserved:
        kubemod.reserve_watch_connections(api, 4)
    watchers = [Watcher(api, WatchSpec("apps", "v1", "deployments", f"ns{i}"), lambda *_: None) for i in range(4)]
    tasks = [asyncio.create_task(w.run()) for w in watchers]
    try:
        await asyncio.wait_for(kube.wait_for_watchers(4), 10)
        read = kubemod.get_json(api, "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment")
        if reserved:
            assert (await read)["metadata"]["name"] == "tgi-gemma-deployment"
        else:
            with pytest.raises(TimeoutError):
                await read
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()


async def test_the_server_s_warnings_are_logged_once_each(kube: Emulator) -> None:
    """The API server's ``Warning`` headers (a deprecated version, a field it dropped from a write), which
    kubernetes_asyncio drops, are logged by the client's REST layer (``DeadlineRest.warned``): each text once,
    with the call that met it first, on success and on failure alike."""
    kube.add(objects.deployment())
    kube.add(objects.workload("train"))
    kube.deprecate("kueue.x-k8s.io", "v1beta1")
    api = kubemod.with_deadlines(client.ApiClient(client.Configuration(host=kube.url)))
    path = "/apis/kueue.x-k8s.io/v1beta1/namespaces/llm/workloads"
    try:
        with capture_logs() as logs:
            with pytest.raises(NotFound):
                await kubemod.get_json(api, f"{path}/gone")
            for _ in range(2):
                await kubemod.get_json(api, f"{path}/train")
            await kubemod.request_json(
                api, "PATCH", "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale",
                body={"spec": {"replica": 3}}, content_type=kubemod.MERGE_PATCH)
    finally:
        await api.close()
    kube.warnings.clear()  # the dropped field was this test's point
    warned = [(e["warning"], e["method"], e["path"]) for e in logs if e["event"] == "api_warning"]
    assert warned == [
        ("kueue.x-k8s.io/v1beta1 Workload is deprecated; use kueue.x-k8s.io/v1beta2 Workload", "GET",
         f"{path}/gone"),
        ('unknown field "spec.replica"', "PATCH",
         "/apis/apps/v1/namespaces/llm/deployments/tgi-gemma-deployment/scale"),
    ]


async def test_not_found_carries_the_server_message(kube_client: client.ApiClient) -> None:
    with pytest.raises(NotFound, match=r'^404 NotFound: deployments.apps "nope" not found$'):
        await call(client.AppsV1Api(kube_client).read_namespaced_deployment("nope", "llm"))


async def test_a_request_reads_no_proxy_or_netrc_from_the_environment(
    kube: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``with_deadlines`` settles the environment once (``environment_once``): no request after it hands the
    proxy variables or ``~/.netrc`` to a thread again (two thread hops per API call in aiohttp >= 3.10)."""
    looked: list[str] = []
    # aiohttp's client module calls these by the names it imported them under: patched there.
    real_proxy, real_netrc = aiohttp.helpers.get_env_proxy_for_url, aiohttp.helpers.netrc_from_env

    def proxy(url: object) -> object:
        looked.append("proxy")
        return real_proxy(url)  # type: ignore[arg-type]

    def netrc() -> object:
        looked.append("netrc")
        return real_netrc()

    monkeypatch.setattr("aiohttp.client.get_env_proxy_for_url", proxy)
    monkeypatch.setattr("aiohttp.client.netrc_from_env", netrc)
    kube.add(objects.deployment())
    # The client as kubernetes_asyncio builds it looks the environment up on every request (what this guards).
    raw = client.ApiClient(client.Configuration(host=kube.url))
    try:
        await client.AppsV1Api(raw).read_namespaced_deployment("tgi-gemma-deployment", "llm")
    finally:
        await raw.close()
    assert looked, "the unwrapped client no longer looks the environment up: this test guards nothing"
    looked.clear()
    api = kubemod.with_deadlines(client.ApiClient(client.Configuration(host=kube.url)))
    try:
        for _ in range(3):
            dep = await client.AppsV1Api(api).read_namespaced_deployment("tgi-gemma-deployment", "llm")
    finally:
        await api.close()
    assert dep.spec.replicas == 1
    assert looked == []


@pytest.mark.parametrize(
    ("env", "proxy", "auth"),
    [
        pytest.param({"HTTPS_PROXY": "http://user:pw@proxy.example:3128"}, "http://proxy.example:3128",
                     "Basic dXNlcjpwdw==", id="https-proxy-with-credentials"),
        pytest.param({"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "api.example"}, None, None,
                     id="no-proxy-names-the-server"),
        pytest.param({}, None, None, id="none-set"),
    ],
)
async def test_the_environment_proxy_is_kept_as_read_at_construction(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxy: str | None, auth: str | None
) -> None:
    """What a request would have found in the environment is found once and passed explicitly: requests still
    go through the proxy the environment names for the API server (nothing is sent here)."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    api = client.ApiClient(client.Configuration(host="https://api.example:6443"))
    try:
        kubemod.environment_once(api)
        rest: object = api.rest_client
        assert getattr(rest, "proxy", None) == proxy
        assert (getattr(rest, "proxy_headers", None) or {}).get("Proxy-Authorization") == auth
        assert getattr(rest, "pool_manager").trust_env is False  # noqa: B009
    finally:
        await api.close()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("6", 6.0, id="int"),
        pytest.param("6000m", 6.0, id="milli"),
        pytest.param("1.5", 1.5, id="decimal"),
        pytest.param("1Gi", 2.0**30, id="binary"),
        pytest.param("2k", 2000.0, id="decimal-suffix"),
        pytest.param("1e3", 1000.0, id="exponent"),
        pytest.param(4, 4.0, id="number"),
    ],
)
def test_parse_quantity(text: object, value: float) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", [pytest.param("six", id="word"), pytest.param("6Xi", id="bad-suffix"),
                                  pytest.param(True, id="bool")])
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


async def test_the_controller_never_falls_back_to_the_home_kubeconfig(kube: Emulator, tmp_path: Path) -> None:
    """``run --help`` says: --kubeconfig, else $KUBECONFIG, else the in-cluster account. A writer acting on
    whatever cluster ~/.kube/config points at would be a surprise; observe (read-only) may use it."""
    _kubeconfig(tmp_path / ".kube" / "config", kube.url)
    env = {"HOME": str(tmp_path)}
    with pytest.raises(KubeConfigError, match="no Kubernetes credentials"):
        await kubemod.configuration(environ=env, service_account_dir=tmp_path / "none", home_fallback=False)
    conf = await kubemod.configuration(environ=env, service_account_dir=tmp_path / "none")
    assert conf.host == kube.url


def test_run_refuses_the_home_kubeconfig(kube: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _kubeconfig(tmp_path / ".kube" / "config", kube.url)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "policies").mkdir()
    assert cli.main(["run", "--policies", str(tmp_path / "policies"), "--once"]) == 1
    assert "no Kubernetes credentials" in capsys.readouterr().err  # errors go to stderr
    assert kube.requests == []
