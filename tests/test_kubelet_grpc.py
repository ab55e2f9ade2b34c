"""The kubelet-facing gRPC layer over real unix sockets and real gRPC channels: registration and the
DRAPlugin service. Sockets, lifecycle and health are in tests/test_kubelet_lifecycle.py; the stand-in
handler and plugin both use in tests/kubeletbed.py."""

from __future__ import annotations

import os
import stat
import threading
import time
import urllib.request
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_fake.core.metrics import DriverMetrics, start_metrics_server
from dra_fake.kubelet import sockets
from dra_fake.kubelet.api import ClaimRef, PreparedDevice, PrepareResult
from dra_fake.kubelet.draservice import strip_subrequests
from dra_fake.kubelet.pb.dra.v1 import api_pb2 as v1
from dra_fake.kubelet.pb.dra.v1 import api_pb2_grpc as v1_grpc
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2 as v1beta1
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import KubeletPlugin
from tests.kubeletbed import DRIVER, WAIT, Env, FakeHandler, claim, make_plugin, sample, stub

pytestmark = pytest.mark.timeout(60)


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


def test_the_handler_sees_the_kubelets_deadline_and_cancellation(env: Env) -> None:
    """What bounds a driver's retries within a call (the compute-domain plugin's): the deadline the
    kubelet sent (45 s; here 30 s) and whether the call is still wanted."""
    dra = env.stub(v1_grpc.DRAPluginStub)
    sent = time.monotonic()
    dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-1")]), timeout=30)
    limits = env.handler.limits[-1]
    # gRPC rounds the deadline it receives; a second either way is the same call's.
    assert limits.deadline is not None and sent + 25 < limits.deadline <= time.monotonic() + 31
    assert limits.waiting() is False  # the call has been answered


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
