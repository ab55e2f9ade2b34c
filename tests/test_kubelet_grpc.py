"""The kubelet-facing gRPC layer over real unix sockets and real gRPC channels."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_fake.core.metrics import DriverMetrics, start_metrics_server
from dra_fake.kubelet import sockets
from dra_fake.kubelet.api import ClaimRef, PreparedDevice, PrepareResult
from dra_fake.kubelet.draservice import strip_subrequests
from dra_fake.kubelet.health import NOT_SERVING, READINESS_SERVICE, SERVING, HealthServer
from dra_fake.kubelet.pb.dra.v1 import api_pb2 as v1
from dra_fake.kubelet.pb.dra.v1 import api_pb2_grpc as v1_grpc
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2 as v1beta1
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from dra_fake.kubelet.pb.health.v1 import health_pb2, health_pb2_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import DRA_V1_SERVICE, KubeletPlugin
from dra_fake.kubelet.signals import serve_forever

pytestmark = pytest.mark.timeout(60)

DRIVER = "gpu.nvidia.com"
WAIT = 20.0  # upper bound for anything the tests wait on; never reached when things work


# -- helpers ----------------------------------------------------------------------------------------


class FakeHandler:
    """DriverHandler with switchable misbehaviour; records the claims it was called with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self.prepare_results: dict[str, PrepareResult] = {}
        self.unprepare_results: dict[str, str] = {}
        self.omit: set[str] = set()
        self.add_unrequested = False
        self.fail: Exception | None = None
        self.entered = threading.Event()
        self.release: threading.Event | None = None  # prepare blocks until set
        self.barrier: threading.Barrier | None = None

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        with self.lock:
            self.prepare_calls.append(list(claims))
        self.entered.set()
        if self.release is not None:
            self.release.wait(WAIT)
        if self.barrier is not None:
            self.barrier.wait(WAIT)
        if self.fail is not None:
            raise self.fail
        out = {
            c.uid: self.prepare_results.get(
                c.uid,
                PrepareResult(
                    [PreparedDevice(("gpu",), "node-a", f"gpu-{c.name}", (f"k8s.{DRIVER}/gpu=x",))]
                ),
            )
            for c in claims
            if c.uid not in self.omit
        }
        if self.add_unrequested:
            out["uid-unrequested"] = PrepareResult()
        return out

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        with self.lock:
            self.unprepare_calls.append(list(claims))
        if self.fail is not None:
            raise self.fail
        out = {c.uid: self.unprepare_results.get(c.uid, "") for c in claims if c.uid not in self.omit}
        if self.add_unrequested:
            out["uid-unrequested"] = ""
        return out


def short_tmpdir() -> str:
    # AF_UNIX paths are limited to 107 usable bytes: keep test paths short.
    return tempfile.mkdtemp(dir="/tmp", prefix="dk-")


def stub(factory: Any, path: str) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(sockets.grpc_unix_target(path))
    return channel, factory(channel)


def claim(pb: Any, uid: str, name: str = "", ns: str = "default") -> Any:
    return pb.Claim(namespace=ns, uid=uid, name=name or f"claim-{uid}")


def poll(condition: Callable[[], bool], what: str, deadline: float = WAIT) -> None:
    end = time.monotonic() + deadline
    pause = threading.Event()
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        pause.wait(0.02)


def sample(metrics: DriverMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


class Env:
    def __init__(
        self, root: str, handler: FakeHandler, plugin: KubeletPlugin, metrics: DriverMetrics
    ) -> None:
        self.root, self.handler, self.plugin, self.metrics = root, handler, plugin, metrics
        self._channels: list[grpc.Channel] = []

    def stub(self, factory: Any, path: str | None = None) -> Any:
        default = (
            self.plugin.registration_socket
            if factory is regpb_grpc.RegistrationStub
            else self.plugin.dra_socket
        )
        channel, s = stub(factory, path or default)
        self._channels.append(channel)
        return s

    def close(self) -> None:
        for c in self._channels:
            c.close()


def make_plugin(root: str, handler: FakeHandler, pod_uid: str | None = None, **kw: Any) -> KubeletPlugin:
    return KubeletPlugin(
        DRIVER,
        handler,
        registrar_dir=os.path.join(root, "reg"),
        plugins_dir=os.path.join(root, "plugins"),
        pod_uid=pod_uid,
        **kw,
    )


@pytest.fixture
def root() -> Iterator[str]:
    d = short_tmpdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def env(root: str) -> Iterator[Env]:
    handler = FakeHandler()
    metrics = DriverMetrics(CollectorRegistry())
    plugin = make_plugin(root, handler, metrics=metrics)
    plugin.start()
    e = Env(root, handler, plugin, metrics)
    yield e
    e.close()
    if handler.release is not None:
        handler.release.set()
    plugin.stop(grace=0)


# -- registration -------------------------------------------------------------------------------------


def test_getinfo_default_naming(env: Env) -> None:
    reg_path = os.path.join(env.root, "reg", f"{DRIVER}-reg.sock")
    dra_path = os.path.join(env.root, "plugins", DRIVER, "dra.sock")
    assert env.plugin.registration_socket == reg_path
    assert env.plugin.dra_socket == dra_path
    info = env.stub(regpb_grpc.RegistrationStub).GetInfo(regpb.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == dra_path and os.path.isabs(info.endpoint)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_getinfo_rolling_update_naming(root: str) -> None:
    pod_uid = "5b1b4a3e-96a5-4d8f-8f3c-2f9e9d2c0f11"
    plugin = make_plugin(root, FakeHandler(), pod_uid=pod_uid, metrics=DriverMetrics(CollectorRegistry()))
    assert plugin.registration_socket == os.path.join(root, "reg", f"{DRIVER}-{pod_uid}-reg.sock")
    assert plugin.dra_socket == os.path.join(root, "plugins", DRIVER, f"dra-{pod_uid}.sock")
    with plugin:
        channel, s = stub(regpb_grpc.RegistrationStub, plugin.registration_socket)
        with channel:
            info = s.GetInfo(regpb.InfoRequest(), timeout=5)
        assert info.endpoint == plugin.dra_socket
        assert stat.S_ISSOCK(os.stat(plugin.dra_socket).st_mode)
    assert not os.path.exists(plugin.registration_socket)
    assert not os.path.exists(plugin.dra_socket)


def test_registration_socket_fallbacks_keep_path_short(root: str) -> None:
    pod_uid = "5b1b4a3e-96a5-4d8f-8f3c-2f9e9d2c0f11"
    # Pad the registrar dir so that candidate 1 is too long but candidate 2 fits.
    base = os.path.join(root, "r")
    pad = sockets.UNIX_PATH_MAX - len(f"{base}/{DRIVER}-{'x' * 11}-reg.sock")
    reg_dir = base + "x" * pad
    path = sockets.registration_socket_path(reg_dir, DRIVER, pod_uid)
    name = os.path.basename(path)
    assert name.startswith(f"{DRIVER}-") and name.endswith("-reg.sock") and pod_uid not in name
    assert len(name) == len(f"{DRIVER}-") + 11 + len("-reg.sock")  # 8 bytes -> 11 base64url chars
    assert len(os.fsencode(path)) <= sockets.UNIX_PATH_MAX
    # Longer still: the third scheme, "dra-<22 chars>-reg.sock", independent of the driver name.
    long_driver = "compute-domain." + "d" * 40 + ".nvidia.com"
    path3 = sockets.registration_socket_path(reg_dir, long_driver, pod_uid)
    name3 = os.path.basename(path3)
    assert name3.startswith("dra-") and name3.endswith("-reg.sock") and len(name3) == 4 + 22 + 9
    assert not name3.startswith(".")
    # Deterministic: the same inputs give the same name (old and new pod never collide by accident).
    assert sockets.registration_socket_path(reg_dir, long_driver, pod_uid) == path3
    assert sockets.registration_socket_path(reg_dir, long_driver, pod_uid + "0") != path3
    with pytest.raises(ValueError, match="exceeds"):
        sockets.registration_socket_path(reg_dir + "x" * 80, DRIVER, pod_uid)
    with pytest.raises(ValueError, match="exceeds"):
        sockets.registration_socket_path(reg_dir + "x" * 20, DRIVER)  # no fallbacks without a pod UID

    # The fallback path is bindable and served.
    plugin = KubeletPlugin(
        DRIVER,
        FakeHandler(),
        reg_dir,
        os.path.join(root, "p"),
        pod_uid,
        metrics=DriverMetrics(CollectorRegistry()),
    )
    assert plugin.registration_socket == path
    with plugin:
        channel, s = stub(regpb_grpc.RegistrationStub, path)
        with channel:
            assert s.GetInfo(regpb.InfoRequest(), timeout=5).name == DRIVER


def test_notify_registration_status_is_stored(env: Env) -> None:
    reg = env.stub(regpb_grpc.RegistrationStub)
    assert env.plugin.registration_status.registered is None
    assert not env.plugin.registered.is_set()
    reg.NotifyRegistrationStatus(regpb.RegistrationStatus(plugin_registered=True), timeout=5)
    assert env.plugin.wait_registered(0)
    assert env.plugin.registration_status.registered is True
    with pytest.raises(grpc.RpcError) as err:
        reg.NotifyRegistrationStatus(
            regpb.RegistrationStatus(plugin_registered=False, error="endpoint already registered"), timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    state = env.plugin.registration_status
    assert state.registered is False and state.error == "endpoint already registered"
    assert not env.plugin.registered.is_set()


# -- DRAPlugin ----------------------------------------------------------------------------------------


def test_v1_prepare_unprepare_round_trip(env: Env) -> None:
    env.handler.prepare_results["uid-1"] = PrepareResult(
        [
            PreparedDevice(
                ("gpu/a", "gpu/b", "mig", "gpu"), "node-a", "gpu-0", ("k8s.gpu.nvidia.com/gpu=gpu-0",), "s1"
            ),
            PreparedDevice((), "node-a", "gpu-1", ()),
        ]
    )
    dra = env.stub(v1_grpc.DRAPluginStub)
    resp = dra.NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1", "c1", "ns1"), claim(v1, "uid-2")]),
        timeout=5,
    )
    assert env.handler.prepare_calls == [
        [ClaimRef("uid-1", "ns1", "c1"), ClaimRef("uid-2", "default", "claim-uid-2")]
    ]
    assert set(resp.claims) == {"uid-1", "uid-2"}
    first = resp.claims["uid-1"]
    assert first.error == ""
    d0, d1 = first.devices
    assert list(d0.request_names) == ["gpu", "mig"]
    assert (d0.pool_name, d0.device_name, list(d0.cdi_device_ids)) == (
        "node-a",
        "gpu-0",
        ["k8s.gpu.nvidia.com/gpu=gpu-0"],
    )
    assert d0.HasField("share_id") and d0.share_id == "s1"
    assert list(d1.request_names) == [] and not d1.HasField("share_id")
    assert [d.device_name for d in resp.claims["uid-2"].devices] == ["gpu-claim-uid-2"]

    env.handler.unprepare_results["uid-2"] = "device busy"
    un = dra.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[claim(v1, "uid-1", "c1", "ns1"), claim(v1, "uid-2")]),
        timeout=5,
    )
    assert {k: v.error for k, v in un.claims.items()} == {"uid-1": "", "uid-2": "device busy"}
    assert env.handler.unprepare_calls[-1][0] == ClaimRef("uid-1", "ns1", "c1")


def test_v1beta1_prepare_unprepare_round_trip(env: Env) -> None:
    env.handler.prepare_results["uid-1"] = PrepareResult(
        [
            PreparedDevice(
                ("r0/s1", "r0/s2", "r1"), "pool", "gpu-3", ("k8s.gpu.nvidia.com/gpu=gpu-3",), "share"
            )
        ]
    )
    dra = env.stub(v1beta1_grpc.DRAPluginStub)
    resp = dra.NodePrepareResources(
        v1beta1.NodePrepareResourcesRequest(claims=[claim(v1beta1, "uid-1")]), timeout=5
    )
    (dev,) = resp.claims["uid-1"].devices
    assert list(dev.request_names) == ["r0", "r1"]
    assert (dev.pool_name, dev.device_name, list(dev.cdi_device_ids)) == (
        "pool",
        "gpu-3",
        ["k8s.gpu.nvidia.com/gpu=gpu-3"],
    )
    # share_id is v1 only: nothing of it reaches a v1beta1 kubelet, not even as an unknown field.
    assert "share_id" not in v1beta1.Device.DESCRIPTOR.fields_by_name
    assert not v1.Device.FromString(dev.SerializeToString()).HasField("share_id")
    un = dra.NodeUnprepareResources(
        v1beta1.NodeUnprepareResourcesRequest(claims=[claim(v1beta1, "uid-1")]), timeout=5
    )
    assert {k: v.error for k, v in un.claims.items()} == {"uid-1": ""}


def test_strip_subrequests() -> None:
    assert strip_subrequests(["a/x", "b", "a/y", "a", "c/z/w"]) == ("a", "b", "c")
    assert strip_subrequests([]) == ()


def test_missing_entries_filled_and_unrequested_dropped(env: Env) -> None:
    env.handler.omit = {"uid-2"}
    env.handler.add_unrequested = True
    dra = env.stub(v1_grpc.DRAPluginStub)
    req = [claim(v1, "uid-1"), claim(v1, "uid-2", "c2", "ns2")]
    resp = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=req), timeout=5)
    assert set(resp.claims) == {"uid-1", "uid-2"}
    assert resp.claims["uid-1"].error == ""
    assert "no result" in resp.claims["uid-2"].error and "ns2/c2" in resp.claims["uid-2"].error
    assert len(resp.claims["uid-2"].devices) == 0
    un = dra.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=req), timeout=5)
    assert set(un.claims) == {"uid-1", "uid-2"}
    assert un.claims["uid-1"].error == "" and "no result" in un.claims["uid-2"].error
    assert sample(env.metrics, "dra_fake_node_prepare_errors_total") == 1
    assert sample(env.metrics, "dra_fake_node_unprepare_errors_total") == 1


def test_per_claim_error_drops_devices(env: Env) -> None:
    env.handler.prepare_results["uid-1"] = PrepareResult(
        [PreparedDevice(("r",), "p", "d", ())], error="no GPU left"
    )
    resp = env.stub(v1_grpc.DRAPluginStub).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1")]), timeout=5
    )
    assert resp.claims["uid-1"].error == "no GPU left"
    assert len(resp.claims["uid-1"].devices) == 0
    assert (
        sample(
            env.metrics,
            "dra_fake_requests_total",
            {"method": "v1.NodePrepareResources", "result": "claim_error"},
        )
        == 1
    )


def test_duplicate_claims_are_passed_once(env: Env) -> None:
    resp = env.stub(v1_grpc.DRAPluginStub).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1"), claim(v1, "uid-1")]), timeout=5
    )
    assert [c.uid for c in env.handler.prepare_calls[0]] == ["uid-1"]
    assert list(resp.claims) == ["uid-1"]


@pytest.mark.parametrize("pb,factory", [(v1, v1_grpc.DRAPluginStub), (v1beta1, v1beta1_grpc.DRAPluginStub)])
def test_handler_exception_fails_whole_call(env: Env, pb: Any, factory: Any) -> None:
    env.handler.fail = RuntimeError("checkpoint unreadable")
    dra = env.stub(factory)
    with pytest.raises(grpc.RpcError) as err:
        dra.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[claim(pb, "uid-1")]), timeout=5)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "checkpoint unreadable" in err.value.details()
    with pytest.raises(grpc.RpcError) as err2:
        dra.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[claim(pb, "uid-1")]), timeout=5)
    assert err2.value.code() == grpc.StatusCode.INTERNAL
    version = pb.DESCRIPTOR.package.rsplit(".", 1)[1]
    assert (
        sample(
            env.metrics,
            "dra_fake_requests_total",
            {"method": f"{version}.NodePrepareResources", "result": "error"},
        )
        == 1
    )
    assert sample(env.metrics, "dra_fake_node_prepare_errors_total") == 1
    # The server is still fine afterwards.
    env.handler.fail = None
    resp = dra.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[claim(pb, "uid-1")]), timeout=5)
    assert resp.claims["uid-1"].error == ""


def test_empty_request_does_not_call_handler(env: Env) -> None:
    resp = env.stub(v1_grpc.DRAPluginStub).NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=5)
    assert len(resp.claims) == 0
    assert env.handler.prepare_calls == []


def test_handler_called_concurrently(env: Env) -> None:
    env.handler.barrier = threading.Barrier(2)  # both calls must be inside prepare at once
    dra = env.stub(v1_grpc.DRAPluginStub)
    calls = [
        dra.NodePrepareResources.future(v1.NodePrepareResourcesRequest(claims=[claim(v1, uid)]), timeout=WAIT)
        for uid in ("uid-a", "uid-b")
    ]
    assert [set(c.result().claims) for c in calls] == [{"uid-a"}, {"uid-b"}]


def test_metrics_recorded(env: Env) -> None:
    dra = env.stub(v1_grpc.DRAPluginStub)
    dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1")]), timeout=5)
    env.stub(regpb_grpc.RegistrationStub).GetInfo(regpb.InfoRequest(), timeout=5)
    m = env.metrics
    assert (
        sample(m, "dra_fake_requests_total", {"method": "v1.NodePrepareResources", "result": "success"}) == 1
    )
    assert sample(m, "dra_fake_requests_total", {"method": "GetInfo", "result": "success"}) == 1
    assert sample(m, "dra_fake_request_duration_seconds_count", {"method": "v1.NodePrepareResources"}) == 1
    assert sample(m, "dra_fake_requests_inflight", {"method": "v1.NodePrepareResources"}) == 0
    for gauge in ("dra_fake_prepared_claims", "dra_fake_prepared_devices", "dra_fake_published_devices"):
        assert m.registry.get_sample_value(gauge) == 0
    m.checkpoint_errors_total.labels("decode").inc()

    server, thread = start_metrics_server(0, addr="127.0.0.1", registry=m.registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)
    assert 'dra_fake_requests_total{method="v1.NodePrepareResources",result="success"} 1.0' in text
    assert 'dra_fake_checkpoint_errors_total{reason="decode"} 1.0' in text
    assert "dra_fake_node_unprepare_errors_total 0.0" in text


# -- sockets and lifecycle ------------------------------------------------------------------------------


def test_socket_and_directory_modes(env: Env) -> None:
    for path in (env.plugin.registration_socket, env.plugin.dra_socket):
        st = os.lstat(path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) & ~0o660 == 0, oct(st.st_mode)
    for d in (os.path.join(env.root, "reg"), os.path.join(env.root, "plugins"), env.plugin.plugin_data_dir):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o750, d


def test_existing_directories_keep_their_mode(root: str) -> None:
    reg = os.path.join(root, "reg")
    os.mkdir(reg, 0o755)
    os.chmod(reg, 0o755)
    with make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry())):
        assert stat.S_IMODE(os.stat(reg).st_mode) == 0o755


def _leave_stale_socket(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays behind, nobody listens: a crashed predecessor


def test_stale_sockets_removed_at_start(root: str) -> None:
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    for path in (plugin.registration_socket, plugin.dra_socket):
        _leave_stale_socket(path)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    with plugin:
        channel, s = stub(regpb_grpc.RegistrationStub, plugin.registration_socket)
        with channel:
            assert s.GetInfo(regpb.InfoRequest(), timeout=5).name == DRIVER
        channel, d = stub(v1_grpc.DRAPluginStub, plugin.dra_socket)
        with channel:
            d.NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=5)


def test_non_socket_file_is_not_replaced(root: str) -> None:
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    os.makedirs(os.path.dirname(plugin.dra_socket))
    with open(plugin.dra_socket, "w") as f:
        f.write("not a socket")
    with pytest.raises(ValueError, match="not a socket"):
        plugin.start()
    with open(plugin.dra_socket) as f:
        assert f.read() == "not a socket"
    assert not os.path.exists(plugin.registration_socket)


def test_dra_server_starts_before_registration(root: str) -> None:
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    order: list[str] = []
    for srv in (plugin.dra_server, plugin.registration_server):
        original = srv.start

        def record(original: Callable[[], None] = original, name: str = srv.name) -> None:
            # The DRA socket must already answer when the registration socket appears.
            if name == "registration":
                assert os.path.exists(plugin.dra_socket)
            order.append(name)
            original()

        srv.start = record  # type: ignore[method-assign]
    with plugin:
        assert order == ["dra", "registration"]


def test_sockets_removed_after_stop_and_stop_is_idempotent(root: str) -> None:
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    plugin.start()
    assert plugin.running
    plugin.stop(grace=1)
    assert not plugin.running
    assert not os.path.exists(plugin.registration_socket)
    assert not os.path.exists(plugin.dra_socket)
    # Nothing left behind, not even the hidden names the sockets were bound under.
    assert os.listdir(os.path.join(root, "reg")) == []
    assert os.listdir(plugin.plugin_data_dir) == []
    plugin.stop(grace=1)
    # Restartable.
    plugin.start()
    assert os.path.exists(plugin.dra_socket)
    plugin.stop(grace=0)


def test_stop_leaves_a_successor_socket_alone(root: str) -> None:
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    plugin.start()
    os.unlink(plugin.registration_socket)  # a successor replaced our socket file
    _leave_stale_socket(plugin.registration_socket)
    plugin.stop(grace=0)
    assert stat.S_ISSOCK(os.lstat(plugin.registration_socket).st_mode)


def _dra_refuses_new_calls(path: str) -> bool:
    channel, d = stub(v1_grpc.DRAPluginStub, path)
    with channel:
        try:
            d.NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=1)
        except grpc.RpcError:
            return True
    return False


def test_graceful_stop_lets_inflight_call_finish(env: Env) -> None:
    env.handler.release = threading.Event()
    dra = env.stub(v1_grpc.DRAPluginStub)
    call = dra.NodePrepareResources.future(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1")]), timeout=WAIT
    )
    assert env.handler.entered.wait(WAIT)
    with futures.ThreadPoolExecutor(1) as pool:
        stopping = pool.submit(env.plugin.stop, WAIT)
        poll(lambda: not os.path.exists(env.plugin.registration_socket), "registration socket removal")
        poll(lambda: _dra_refuses_new_calls(env.plugin.dra_socket), "DRA server to refuse new calls")
        assert not call.done() and not stopping.done()
        env.handler.release.set()
        resp = call.result(WAIT)
        assert resp.claims["uid-1"].error == ""
        stopping.result(WAIT)
    assert not os.path.exists(env.plugin.dra_socket)


def test_stop_is_bounded_by_grace(env: Env) -> None:
    env.handler.release = threading.Event()  # never set before stop: the call outlives the grace
    call = env.stub(v1_grpc.DRAPluginStub).NodePrepareResources.future(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1")]), timeout=WAIT
    )
    assert env.handler.entered.wait(WAIT)
    started = time.monotonic()
    env.plugin.stop(grace=0.2)
    assert time.monotonic() - started < 5
    with pytest.raises(grpc.RpcError):
        call.result(WAIT)
    assert not os.path.exists(env.plugin.dra_socket)


def test_serve_forever_stops_on_sigterm(root: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    plugin = make_plugin(root, FakeHandler(), metrics=DriverMetrics(CollectorRegistry()))
    plugin.start()
    ready = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)

    def send() -> None:
        if ready.wait(WAIT):
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send)
    sender.start()
    serve_forever(plugin, grace=1, ready=ready)
    sender.join(WAIT)
    assert not plugin.running
    assert not os.path.exists(plugin.registration_socket) and not os.path.exists(plugin.dra_socket)
    assert signal.getsignal(signal.SIGTERM) == previous


# -- health -----------------------------------------------------------------------------------------------


def test_health_transitions(env: Env) -> None:
    health = HealthServer(env.plugin, port=0)
    health.start()
    try:
        assert health.bound_port
        channel = grpc.insecure_channel(f"127.0.0.1:{health.bound_port}")
        with channel:
            health_stub: Any = health_pb2_grpc.HealthStub
            h = health_stub(channel)

            def status() -> Any:
                return h.Check(health_pb2.HealthCheckRequest(), timeout=10).status

            assert status() == SERVING
            named = health_pb2.HealthCheckRequest(service=DRA_V1_SERVICE)
            assert h.Check(named, timeout=10).status == SERVING
            # Readiness: serving, but not registered with the kubelet yet.
            ready = health_pb2.HealthCheckRequest(service=READINESS_SERVICE)
            assert h.Check(ready, timeout=10).status == NOT_SERVING
            with pytest.raises(grpc.RpcError) as err:
                h.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            # Probes are not handler calls and not counted as kubelet traffic.
            assert env.handler.prepare_calls == []
            assert (
                sample(env.metrics, "dra_fake_requests_total", {"method": "GetInfo", "result": "success"})
                == 0
            )

            reg = env.stub(regpb_grpc.RegistrationStub)
            with pytest.raises(grpc.RpcError):
                reg.NotifyRegistrationStatus(
                    regpb.RegistrationStatus(plugin_registered=False, error="x"), timeout=5
                )
            assert status() == NOT_SERVING
            assert h.Check(ready, timeout=10).status == NOT_SERVING
            reg.NotifyRegistrationStatus(regpb.RegistrationStatus(plugin_registered=True), timeout=5)
            assert status() == SERVING
            assert h.Check(ready, timeout=10).status == SERVING

            env.plugin.dra_server.stop(grace=0)
            assert status() == NOT_SERVING
            env.plugin.dra_server.start()
            assert status() == SERVING
            env.plugin.registration_server.stop(grace=0)
            assert status() == NOT_SERVING
    finally:
        health.stop(grace=0)


def health_status(health: HealthServer) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{health.bound_port}") as channel:
        health_stub: Any = health_pb2_grpc.HealthStub
        return health_stub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def test_a_plugin_busy_with_more_calls_than_workers_stays_live(root: str) -> None:
    """The liveness probe needs no DRA worker: a burst of prepares must not get the plugin killed."""
    handler = FakeHandler()
    handler.release = threading.Event()
    plugin = make_plugin(root, handler, metrics=DriverMetrics(CollectorRegistry()), max_workers=2)
    plugin.start()
    health = HealthServer(plugin, port=0, probe_timeout=0.5)
    health.start()
    channel, dra = stub(v1_grpc.DRAPluginStub, plugin.dra_socket)
    calls = []
    try:
        for i in range(4):  # two running, two queued behind them
            request = v1.NodePrepareResourcesRequest(claims=[claim(v1, f"uid-{i}")])
            calls.append(dra.NodePrepareResources.future(request, timeout=WAIT))
        poll(lambda: len(handler.prepare_calls) == 2, "both workers busy")
        assert health_status(health) == SERVING
        handler.release.set()
        for i, call in enumerate(calls):
            assert not call.result().claims[f"uid-{i}"].error
    finally:
        handler.release.set()
        channel.close()
        health.stop(grace=0)
        plugin.stop(grace=0)


def test_a_hung_dra_call_fails_the_liveness_probe(env: Env) -> None:
    env.handler.release = threading.Event()
    health = HealthServer(env.plugin, port=0, stuck_after=0.2)
    health.start()
    try:
        dra = env.stub(v1_grpc.DRAPluginStub)
        call = dra.NodePrepareResources.future(
            v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-hung")]), timeout=WAIT
        )
        assert env.handler.entered.wait(WAIT)
        poll(lambda: env.plugin.in_flight.oldest_age() > 0.2, "the call to outlive stuck_after")
        assert health_status(health) == NOT_SERVING
        env.handler.release.set()
        assert not call.result().claims["uid-hung"].error
        assert env.plugin.in_flight.oldest_age() == 0.0
        assert health_status(health) == SERVING
    finally:
        health.stop(grace=0)
