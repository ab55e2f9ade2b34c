"""The kubelet-facing gRPC layer's sockets and lifecycle (modes, stale sockets, start and stop order,
graceful and bounded stops, SIGTERM) and its health service (tests/kubeletbed.py)."""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_fake.core.metrics import DriverMetrics
from dra_fake.kubelet.health import NOT_SERVING, READINESS_SERVICE, SERVING, HealthServer
from dra_fake.kubelet.pb.dra.v1 import api_pb2 as v1
from dra_fake.kubelet.pb.dra.v1 import api_pb2_grpc as v1_grpc
from dra_fake.kubelet.pb.health.v1 import health_pb2, health_pb2_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import DRA_V1_SERVICE
from dra_fake.kubelet.signals import serve_forever
from tests.kubeletbed import DRIVER, WAIT, Env, FakeHandler, claim, make_plugin, poll, sample, stub

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
