"""The kubelet's device health stream (DRAResourceHealth v1 and v1alpha1) over a real unix socket."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_fake.core.metrics import DriverMetrics
from dra_fake.kubelet.device_health import HEALTHY, UNHEALTHY, UNKNOWN, DeviceHealthBoard
from dra_fake.kubelet.pb.drahealth.v1 import api_pb2 as h_v1
from dra_fake.kubelet.pb.drahealth.v1 import api_pb2_grpc as h_v1_grpc
from dra_fake.kubelet.pb.drahealth.v1alpha1 import api_pb2 as h_v1alpha1
from dra_fake.kubelet.pb.drahealth.v1alpha1 import api_pb2_grpc as h_v1alpha1_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import KubeletPlugin
from tests.kubeletbed import FakeHandler, short_tmpdir

pytestmark = pytest.mark.timeout(60)

DRIVER = "gpu.nvidia.com"
WAIT = 20.0
VERSIONS = [(h_v1, h_v1_grpc), (h_v1alpha1, h_v1alpha1_grpc)]


@pytest.fixture
def served() -> Iterator[tuple[KubeletPlugin, DeviceHealthBoard]]:
    root = short_tmpdir()
    board = DeviceHealthBoard(resend_seconds=30)
    plugin = KubeletPlugin(
        DRIVER,
        FakeHandler(),
        registrar_dir=os.path.join(root, "reg"),
        plugins_dir=os.path.join(root, "plugins"),
        metrics=DriverMetrics(CollectorRegistry()),
        device_health=board,
    )
    plugin.start()
    yield plugin, board
    plugin.stop(grace=0)
    shutil.rmtree(root, ignore_errors=True)


def _open(plugin: KubeletPlugin, grpc_mod: ModuleType, pb: ModuleType) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(f"unix:{plugin.dra_socket}")
    stream = grpc_mod.DRAResourceHealthStub(channel).NodeWatchResources(
        pb.NodeWatchResourcesRequest(), timeout=WAIT
    )
    return channel, stream


def _health(response: Any) -> dict[str, tuple[int, str]]:
    return {d.device.device_name: (d.health, d.message) for d in response.devices}


def test_advertised_only_when_served(served: tuple[KubeletPlugin, DeviceHealthBoard]) -> None:
    plugin, _ = served
    with grpc.insecure_channel(f"unix:{plugin.registration_socket}") as channel:
        info = regpb_grpc.RegistrationStub(channel).GetInfo(regpb.InfoRequest(), timeout=5)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    plain = KubeletPlugin(DRIVER, FakeHandler(), "/nonexistent/reg", "/nonexistent/plugins")
    assert plain.supported_versions == ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@pytest.mark.parametrize(("pb", "grpc_mod"), VERSIONS, ids=["v1", "v1alpha1"])
def test_full_list_on_open_then_every_change(
    served: tuple[KubeletPlugin, DeviceHealthBoard], pb: ModuleType, grpc_mod: ModuleType
) -> None:
    plugin, board = served
    board.set_devices("node-a", ["gpu-0", "gpu-1"])
    channel, stream = _open(plugin, grpc_mod, pb)
    try:
        first = next(stream)
        assert [(d.device.pool_name, d.device.device_name) for d in first.devices] == [
            ("node-a", "gpu-0"),
            ("node-a", "gpu-1"),
        ]
        assert _health(first) == {"gpu-0": (pb.HEALTHY, ""), "gpu-1": (pb.HEALTHY, "")}
        assert all(abs(d.last_updated_time - time.time()) < 60 for d in first.devices)

        board.set_health({"gpu-1": (UNHEALTHY, "Xid 79")})
        assert _health(next(stream)) == {"gpu-0": (pb.HEALTHY, ""), "gpu-1": (pb.UNHEALTHY, "Xid 79")}

        board.set_health({"gpu-0": (UNKNOWN, "not monitored")})
        assert _health(next(stream)) == {"gpu-0": (pb.UNKNOWN, "not monitored"), "gpu-1": (pb.HEALTHY, "")}
    finally:
        channel.close()


def test_unchanged_health_is_not_resent_before_the_period(
    served: tuple[KubeletPlugin, DeviceHealthBoard],
) -> None:
    _, board = served
    board.set_devices("node-a", ["gpu-0"])
    version, _ = board.snapshot()
    board.set_health({})  # nothing changes
    board.set_devices("node-a", ["gpu-0"])
    assert not board.wait_newer(version, 0.2)
    board.set_health({"gpu-0": (UNHEALTHY, "lost")})
    assert board.wait_newer(version, 0.2)


def test_resent_periodically_so_the_kubelet_never_times_out() -> None:
    board = DeviceHealthBoard(resend_seconds=0.2)
    board.set_devices("p", ["d"])
    plugin_root = short_tmpdir()
    plugin = KubeletPlugin(
        DRIVER,
        FakeHandler(),
        os.path.join(plugin_root, "reg"),
        os.path.join(plugin_root, "plugins"),
        metrics=DriverMetrics(CollectorRegistry()),
        device_health=board,
    )
    plugin.start()
    channel, stream = _open(plugin, h_v1_grpc, h_v1)
    try:
        started = time.monotonic()
        for _ in range(3):
            assert _health(next(stream)) == {"d": (h_v1.HEALTHY, "")}
        assert time.monotonic() - started >= 0.4  # two resend periods, not a busy loop
    finally:
        channel.close()
        plugin.stop(grace=0)
        shutil.rmtree(plugin_root, ignore_errors=True)


def test_stop_ends_open_streams_at_once(served: tuple[KubeletPlugin, DeviceHealthBoard]) -> None:
    plugin, board = served
    board.set_devices("node-a", ["gpu-0"])
    channel, stream = _open(plugin, h_v1_grpc, h_v1)
    next(stream)
    ended = threading.Event()

    def drain() -> None:
        try:
            for _ in stream:
                pass
        except grpc.RpcError:
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    started = time.monotonic()
    plugin.stop(grace=10)
    assert ended.wait(WAIT)
    assert time.monotonic() - started < 5, "the stream held the server until the grace period ended"
    channel.close()


def test_bad_health_value_is_refused() -> None:
    board = DeviceHealthBoard()
    with pytest.raises(ValueError, match="gpu-0: health 'Broken'"):
        board.set_health({"gpu-0": ("Broken", "")})


def test_devices_keep_their_status_when_the_list_is_republished() -> None:
    board = DeviceHealthBoard()
    board.set_devices("p", ["a", "b"])
    board.set_health({"a": (UNHEALTHY, "x")})
    _, before = board.snapshot()
    board.set_devices("p", ["a", "b", "c"])
    _, after = board.snapshot()
    assert [s for s in after if s.device == "a"] == [s for s in before if s.device == "a"]
    assert [(s.device, s.health) for s in after] == [("a", UNHEALTHY), ("b", HEALTHY), ("c", HEALTHY)]
