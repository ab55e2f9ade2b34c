"""What the kubelet gRPC layer's tests (tests/test_kubelet_*.py, tests/test_device_health.py) run on:
a stand-in claim handler, a plugin started in a short temporary directory (unix socket paths are
short), gRPC stubs, and polling with a deadline. The fixtures `root` and `env` reach the tests
through tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from dra_fake.core.metrics import DriverMetrics
from dra_fake.kubelet import sockets
from dra_fake.kubelet.api import NO_LIMITS, CallLimits, ClaimRef, PreparedDevice, PrepareResult
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import KubeletPlugin

DRIVER = "gpu.nvidia.com"
WAIT = 20.0  # upper bound for anything the tests wait on; never reached when things work


# -- helpers ----------------------------------------------------------------------------------------


class FakeHandler:
    """DriverHandler with switchable misbehaviour; records the claims it was called with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self.limits: list[CallLimits] = []  # each prepare call's, as the gRPC layer passed them
        self.prepare_results: dict[str, PrepareResult] = {}
        self.unprepare_results: dict[str, str] = {}
        self.omit: set[str] = set()
        self.add_unrequested = False
        self.fail: Exception | None = None
        self.entered = threading.Event()
        self.release: threading.Event | None = None  # prepare blocks until set
        self.barrier: threading.Barrier | None = None

    def prepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, PrepareResult]:
        with self.lock:
            self.prepare_calls.append(list(claims))
            self.limits.append(limits)
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

    def unprepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, str]:
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
