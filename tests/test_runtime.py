"""A GPU node's runtime (dra_fake.gpu.runtime): the per-node services of the registry, run by a
one-node host with their own threads and by a many-node host (fleet mode) through the parts its
nodes share; fault effects fanned out to the services and the node's owner."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_fake.gpu import faultwatch
from dra_fake.gpu.faults import Effects
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.runtime import Host, Node, NodeRuntime, NodeService, NodeSettings, SharedPart
from dra_fake.gpu.services import SERVICES
from dra_fake.gpu.sharedmetrics import SharedMetrics

DRIVER = "gpu.nvidia.com"
CREATED = "2026-12-01T10:00:00Z"


def inventory(node: str) -> Inventory:
    return build_inventory(
        parse_config({"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}]}, "test"), node, load_profiles()
    )


def no_api() -> client.ApiClient:
    raise AssertionError("the API server was asked for")


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # ends the threads a test started


def poll(what: str, check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


# ---- the runtime over made-up services ---------------------------------------------------------


class Recorder:
    """A service kind whose services log what happens to them."""

    def __init__(self, name: str, log: list[str], shared: bool = True) -> None:
        self.name, self.log, self.shared = name, log, shared

    def for_process(self, host: Host) -> SharedPart | None:
        self.log.append(f"{self.name}: shared part")
        return self if self.shared else None

    def node_service(self, runtime: NodeRuntime) -> NodeService | None:
        return self.for_node(runtime)

    def for_node(self, runtime: NodeRuntime) -> NodeService | None:
        name, log = self.name, self.log
        runtime.on_faults(lambda e: log.append(f"{name} heard {sorted(e.taints)} on {runtime.node.name}"))

        class Service:
            def start(self) -> None:
                log.append(f"{name} started on {runtime.node.name}")

            def stop(self) -> None:
                log.append(f"{name} stopped on {runtime.node.name}")

        return Service()


EFFECTS = Effects(taints={"gpu-0": [{"key": "k", "effect": "NoSchedule"}]}, health={}, gpus={})


def test_a_one_node_host_runs_every_service_in_registry_order_and_tells_them_of_faults(
    stop: threading.Event,
) -> None:
    log: list[str] = []
    host = Host(NodeSettings(DRIVER), no_api, stop, services=[Recorder("a", log), Recorder("b", log)])
    host.start()  # nothing is shared by one node
    runtime = host.node(Node("n1", inventory("n1")))
    runtime.on_faults(lambda e: log.append(f"owner heard {sorted(e.taints)}"))
    runtime.start()
    runtime.faults_changed(EFFECTS)
    runtime.stop()
    assert log == [
        "a started on n1",
        "b started on n1",
        "a heard ['gpu-0'] on n1",
        "b heard ['gpu-0'] on n1",
        "owner heard ['gpu-0']",
        "b stopped on n1",
        "a stopped on n1",
    ]


def test_a_many_node_host_runs_a_service_only_through_the_part_its_nodes_share(
    stop: threading.Event,
) -> None:
    log: list[str] = []
    kinds = [Recorder("shared", log), Recorder("alone", log, shared=False)]
    host = Host(NodeSettings(DRIVER), no_api, stop, many_nodes=True, services=kinds)
    host.start()
    runtimes = [host.node(Node(name, lambda: pytest.fail("inventory built"))) for name in ("n1", "n2")]
    for runtime in runtimes:
        runtime.start()
    runtimes[0].stop()
    assert log == [
        "shared: shared part",
        "alone: shared part",  # asked once per process, not per node; it has none
        "shared started on n1",
        "shared started on n2",
        "shared stopped on n1",
    ]


def test_a_node_builds_its_inventory_once_when_a_service_first_needs_it() -> None:
    built: list[str] = []

    def build() -> Inventory:
        built.append("n1")
        return inventory("n1")

    node = Node("n1", build)
    assert built == []
    assert node.inventory is node.inventory and built == ["n1"]


# ---- the registry's services -------------------------------------------------------------------


def test_a_fleet_without_faults_or_metrics_runs_nothing_per_node(stop: threading.Event) -> None:
    """The fleet benchmark's configuration: adopting a node costs two small objects."""
    host = Host(NodeSettings(DRIVER, faults=False), no_api, stop, many_nodes=True)
    host.start()
    runtime = host.node(Node("n1", lambda: pytest.fail("inventory built")))
    runtime.start()
    runtime.stop()
    assert host.services == SERVICES and runtime.services == []


def test_the_device_plugins_node_samples_without_watching_pods(tmp_path: Path, stop: threading.Event) -> None:
    """No prepared claims (the kubelet allocates): the monitor writes nvidia-smi's live files and
    asks the API server for nothing (faults and labels off here)."""
    inv = inventory("n1")
    smi = NvidiaSmi.from_inventory(tmp_path, inv)
    host = Host(NodeSettings(DRIVER, faults=False), no_api, stop)
    runtime = host.node(Node("n1", inv, nvidia_smi=smi))
    assert [type(s).__name__ for s in runtime.services] == ["_OwnMonitor"]
    runtime.start()
    uuids = sorted(g.uuid for g in inv.gpus)
    poll("the live files", lambda: all(smi.read_live(u) for u in uuids))
    runtime.faults_changed(Effects(taints={}, health={}, gpus={uuids[0]: {"lost": 1, "xid": 79}}))
    poll("the lost GPU in its live file", lambda: smi.read_live(uuids[0]).get("fault_lost") == "1")


def test_fleet_nodes_share_one_fault_informer_and_one_metrics_endpoint(
    monkeypatch: pytest.MonkeyPatch, stop: threading.Event
) -> None:
    """A GpuFault on one fleet node reaches its owner (the fleet re-publishes its slices) and the
    shared metrics; the other node never builds its inventory. Nothing is started (no threads,
    no server): the informer is fed by hand."""
    informers: list[faultwatch.FaultInformer] = []
    metrics: list[SharedMetrics] = []
    monkeypatch.setattr(faultwatch.FaultInformer, "start", lambda self: informers.append(self))
    monkeypatch.setattr(SharedMetrics, "start", lambda self, stop, port: metrics.append(self))
    written: list[tuple[str, str]] = []
    monkeypatch.setattr(
        faultwatch.NodeFaults,
        "_write_status",
        lambda self, obj, phase, message, now: written.append((obj["metadata"]["name"], phase)),
    )
    api = client.ApiClient()
    host = Host(NodeSettings(DRIVER, dcgm_port=0), lambda: api, stop, many_nodes=True)
    host.start()
    assert len(informers) == 1 and len(metrics) == 1
    heard: dict[str, list[str]] = {}
    built: list[str] = []

    def build(name: str) -> Inventory:
        built.append(name)
        return inventory(name)

    for name in ("n1", "n2"):
        runtime = host.node(Node(name, lambda name=name: build(name)))
        runtime.on_faults(lambda e, name=name: heard.setdefault(name, []).extend(sorted(e.taints)))
        runtime.start()
    lost = {
        "metadata": {"name": "lost", "creationTimestamp": CREATED},
        "spec": {"nodeName": "n1", "device": "gpu-1", "kind": "gpu-lost"},
    }
    informers[0].listed([lost])
    assert heard == {"n1": ["gpu-0", "gpu-1"]} and written == [("lost", "Active")]
    text = metrics[0].sample()
    assert 'DCGM_FI_DEV_XID_ERRORS{gpu="1",' in text and 'Hostname="n1"' in text and 'Hostname="n2"' in text
    assert built == ["n1", "n2"]  # n2's for its metrics only: no fault ever built its tracker


def test_a_forgotten_fleet_node_hears_of_no_more_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    informer = faultwatch.FaultInformer(client.ApiClient(), threading.Event())
    reconciled: list[list[str]] = []

    class Faults:
        def reconcile(self, objects: list[dict[str, Any]]) -> float | None:
            reconciled.append([o["metadata"]["name"] for o in objects])
            return time.time() + 60

    made: list[str] = []
    informer.add("n1", lambda: made.append("n1") or Faults())  # type: ignore[func-returns-value]
    assert made == []  # no fault yet: nothing built
    fault = {"metadata": {"name": "x"}, "spec": {"nodeName": "n1"}}
    informer.changed("ADDED", fault)
    informer.changed("ADDED", {"metadata": {"name": "y"}, "spec": {"nodeName": "elsewhere"}})
    assert made == ["n1"] and reconciled == [["x"]]
    informer.remove("n1")
    informer.changed("MODIFIED", fault)
    assert reconciled == [["x"]]
    informer.add("n1", lambda: made.append("again") or Faults())  # type: ignore[func-returns-value]
    assert made == ["n1", "again"] and reconciled == [["x"], ["x"]]  # faults listed before the node was
