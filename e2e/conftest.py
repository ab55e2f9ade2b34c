"""The e2e suite's cluster: the local control plane (started once per run, or reused when
`make cluster-up` is running), a kind cluster of ours (`make e2e-kind`: real containers), or any
cluster named by $KUBECONFIG. e2e/testbed.py says what differs between them.

Tests declare what they need with `@pytest.mark.needs(...)`: "harness" (the local harness's
internals), "kind" (Helm and real containers of our kind cluster), "node" (node files and
processes: harness or kind), "partitionable" (dynamic MIG: counters in ResourceSlices),
"counter-rollback" (a scheduler that gives back the counters of a device a constraint rejected:
not 1.34 and 1.35, docs/reference/kubernetes-dra.md#counter-leak-in-the-134-and-135-allocator),
"consumable-shares" and "gpu-lending" (1.36+: docs/sharing.md), "kwok" (a bed that starts KWOK:
harness or kind); `reason="..."` says why a bed cannot run it. Tests a
cluster cannot run are deselected at collection, with the reason printed, never skipped: in CI
a skip is a failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dra_fake.gpu.sharesgate import SCHEDULER_FIXED_IN
from e2e.faultcli import GROUP, PLURAL, VERSION
from e2e.harnessbed import HarnessBed
from e2e.kindbed import ApiOnlyBed, KindBed, kind_cluster_of
from e2e.kindcluster.cluster import CLASSIC, POOL_LABEL
from e2e.kindcluster.versions import Release, feature_gates
from e2e.kube import Kube, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.releases import PreviousRelease, previous
from e2e.testbed import TestBed

E2E_NODES = 2
REPO = Path(__file__).resolve().parents[1]
# node-1: the default 8 x H100; node-2: two H100s with pre-created MIG devices and one with dynamic
# MIG. Kind clusters of ours have the same topology (e2e/kindcluster/cluster.py).
E2E_NODE_CONFIGS = {"node-2": REPO / "examples" / "inventory" / "mixed-mig.yaml"}


def require(condition: object, reason: str) -> None:
    """Skip when the cluster lacks what a test needs, except in CI, where that is a failure."""
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(f"CI cluster lacks: {reason}")
        pytest.skip(reason)


@dataclass(frozen=True)
class Environment:
    """What the suite knows before any fixture runs: which test bed, and what the server offers."""

    bed: str  # harness | kind | api
    capabilities: frozenset[str]
    resource_versions: tuple[str, ...]
    partitionable: bool
    server_minor: int
    extended_resources: bool  # the GPU DeviceClass serves `nvidia.com/gpu` (1.34+, DRAExtendedResource)
    device_plugin: bool = False  # a node offers its GPUs through the device plugin (kind's third worker)

    @classmethod
    def detect(cls) -> Environment:
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:  # the local control plane: the pinned release, every version served
            minor = local_minor()
            versions = ("v1", "v1beta2", "v1beta1")
            return cls("harness", HarnessBed.capabilities, versions, True, minor, minor >= 34)
        kube = Kube(Path(kubeconfig))
        devices = [d for s in kube.slices() for d in s["spec"]["devices"]]
        partitionable = any(d.get("consumesCounters") for d in devices)
        bed, capabilities = (
            ("kind", KindBed.capabilities)
            if kind_cluster_of(Path(kubeconfig))
            else ("api", ApiOnlyBed.capabilities)
        )
        info = kube.info
        # A server without the gate drops the field, so its presence is the capability.
        extended = "extendedResourceName" in (kube.device_class("gpu.nvidia.com") or {}).get("spec", {})
        classic = bool(kube.core.list_node(label_selector=f"{POOL_LABEL}={CLASSIC}").items)
        return cls(
            bed, capabilities, info.resource_versions, partitionable, info.version[1], extended, classic
        )

    def _sharing_gates_on(self) -> bool:
        """DRAConsumableCapacity and DRADeviceTaints on: by default from 1.36; before, on our kind
        clusters where their config switches both on (e2e/kindcluster/versions.py) and the plugin
        serves shares at all (not under 1.34's scheduler: dra_fake.gpu.sharesgate)."""
        if self.server_minor >= SHARING_SINCE:
            return True
        gates = feature_gates(Release(1, self.server_minor, 0))
        return (
            self.bed == "kind"
            and (1, self.server_minor) >= SCHEDULER_FIXED_IN
            and all(gates.get(gate) for gate in SHARING_GATES)
        )

    def missing(self, item: pytest.Item) -> str | None:
        server_needs = {
            "partitionable": (self.partitionable, "the server has no partitionable devices (dynamic MIG)"),
            "counter-rollback": (
                self.server_minor not in COUNTER_LEAK_MINORS,
                f"the 1.{self.server_minor} scheduler keeps the counters of devices a constraint "
                "rejected (fixed in 1.36)",
            ),
            "noexecute-toleration": (
                self.server_minor not in TOLERATION_LOSS_MINORS,
                f"the 1.{self.server_minor} scheduler leaves a claim's tolerations out of its allocation, "
                "so a NoExecute taint evicts a tolerating pod at once (fixed in 1.35)",
            ),
            "slice-taints": (
                self.server_minor >= 33,
                "a ResourceSlice's devices have taints from 1.33 (DRADeviceTaints); 1.32's have none",
            ),
            "device-taints": (
                self.server_minor >= 34,
                "device taints need resource.k8s.io/v1 with DRADeviceTaints (Kubernetes 1.34+ here)",
            ),
            # e2e/test_sharing.py, e2e/test_lending.py: run where the features are beta and on by
            # default, and on our kind clusters of 1.35, which switch the alpha gates on
            # (e2e/kindcluster/versions.py). Not on 1.34: its scheduler checks a share's capacity
            # on the wrong device, so the plugin refuses shares there
            # (docs/sharing.md#which-releases-run-the-tests).
            "consumable-shares": (
                self._sharing_gates_on(),
                "shared GPUs need DRAConsumableCapacity: beta and on from 1.36, alpha in 1.35 (on in "
                "our kind clusters), and 1.34's scheduler checks capacity on the wrong device",
            ),
            "gpu-lending": (
                self._sharing_gates_on(),
                "GPU lending needs shared GPUs and device taints with their eviction (DRADeviceTaints): "
                "beta and on from 1.36, alpha in 1.35 (on in our kind clusters)",
            ),
            # 1.36 serves DeviceTaintRule in v1beta2, off by default: a 1.36 server that serves
            # v1beta2 is ours with DRADeviceTaintRules on too (e2e/kindcluster/versions.py).
            "device-taint-rules": (
                self.server_minor >= 37 or (self.server_minor == 36 and "v1beta2" in self.resource_versions),
                "DeviceTaintRules need resource.k8s.io/v1 (Kubernetes 1.37) or, on 1.36, the gate "
                "DRADeviceTaintRules and resource.k8s.io/v1beta2",
            ),
            "binding-conditions": (
                self.server_minor >= 36 and self.bed in ("harness", "kind"),
                "binding conditions need DRADeviceBindingConditions (on from 1.36) and a scheduler whose "
                "bindingTimeout is 20 s (the local cluster's and our kind clusters' from 1.36)",
            ),
            "kwok": (
                self.bed in ("harness", "kind"),
                "KWOK fleets need a test bed that starts KWOK (the harness's process, kind's Deployment)",
            ),
            "device-health": (
                self.server_minor >= 36 and self.bed in ("harness", "kind"),
                "the kubelet's device health stream needs ResourceHealthStatus (on from 1.36) and a "
                "kubelet of ours",
            ),
            "extended-resource": (
                self.extended_resources,
                "the GPU DeviceClass maps no extended resource (Kubernetes 1.34+, DRAExtendedResource)",
            ),
            "previous-release": (
                isinstance(previous(), PreviousRelease),
                str(previous()),
            ),
            "device-plugin": (
                self.device_plugin,
                f"no node labelled {POOL_LABEL}={CLASSIC} serves its GPUs through the device plugin "
                "(kind with 3 workers: make kind-up)",
            ),
        }
        for marker in item.iter_markers("needs"):
            for need in marker.args:
                if need in server_needs:
                    met, reason = server_needs[need]
                    if not met:
                        return reason
                elif need not in self.capabilities:
                    why = marker.kwargs.get("reason")  # needs("harness", reason="...")
                    return f"needs the {need} test bed (this is {self.bed})" + (f": {why}" if why else "")
        params = getattr(item, "callspec", None)
        version = params.params.get("api_version") if params else None
        if version and version not in self.resource_versions:
            return f"the server does not serve resource.k8s.io/{version}"
        return None


ENVIRONMENT: Environment | None = None
# kubernetes/kubernetes#140436, fixed in 1.36 and 1.37 (docs/reference/kubernetes-dra.md).
COUNTER_LEAK_MINORS = (34, 35)
# kubernetes/kubernetes#134434, fixed in 1.35 (docs/reference/kubernetes-dra.md#taints-and-tolerations).
TOLERATION_LOSS_MINORS = (33, 34)
# Consumable capacity and device taints are beta and on by default from this minor.
SHARING_SINCE = 36
SHARING_GATES = ("DRAConsumableCapacity", "DRADeviceTaints")


def local_minor() -> int:
    """The minor of the local control plane's pinned release (e2e/cluster/K8S_VERSION)."""
    return int((REPO / "e2e" / "cluster" / "K8S_VERSION").read_text().strip().lstrip("v").split(".")[1])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global ENVIRONMENT
    e2e_items = [i for i in items if "e2e" in Path(str(i.fspath)).parts]
    for item in e2e_items:
        item.add_marker(pytest.mark.e2e)
    if not e2e_items:
        return
    ENVIRONMENT = env = Environment.detect()
    kept, deselected = [], []
    reasons: dict[str, int] = {}
    for item in items:
        reason = env.missing(item) if item in e2e_items else None
        if reason:
            deselected.append(item)
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
        config._dra_fake_deselected = reasons  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    reasons = getattr(config, "_dra_fake_deselected", {})
    if ENVIRONMENT:
        terminalreporter.write_line(
            f"e2e test bed: {ENVIRONMENT.bed}; resource.k8s.io {', '.join(ENVIRONMENT.resource_versions)}"
        )
    for reason, count in sorted(reasons.items()):
        terminalreporter.write_line(f"deselected {count}: {reason}")


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster | None]:
    if os.environ.get("KUBECONFIG"):
        yield None
        return
    logging.basicConfig(level=logging.INFO)
    root = Path(os.environ.get("LOCAL_CLUSTER_DIR", DEFAULT_ROOT))
    cluster = LocalCluster(root, nodes=E2E_NODES, node_configs=E2E_NODE_CONFIGS)
    if cluster.is_up():
        yield cluster  # a developer's `make cluster-up`: use it, leave it running
        return
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def kubeconfig(local_cluster: LocalCluster | None) -> Path:
    return local_cluster.kubeconfig if local_cluster else Path(os.environ["KUBECONFIG"])


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Kube:
    return Kube(kubeconfig)


@pytest.fixture(scope="session")
def bed(kube: Kube, kubeconfig: Path, local_cluster: LocalCluster | None) -> TestBed:
    if local_cluster:
        return HarnessBed(kube, local_cluster)
    cluster = kind_cluster_of(kubeconfig)
    if cluster:
        return KindBed(kube, cluster, kubeconfig)
    return ApiOnlyBed(kube)


@pytest.fixture
def harness(local_cluster: LocalCluster | None) -> LocalCluster:
    """The local cluster; for tests marked needs("harness"), which run nowhere else."""
    assert local_cluster is not None, "a harness test was not deselected"
    return local_cluster


@pytest.fixture(scope="session")
def nodes(bed: TestBed) -> list[str]:
    return bed.workers


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = kube.namespace()
    yield name
    # Wait until the namespace is gone, so its pods were unprepared and released their devices
    # before the next test allocates.
    kube.delete_namespace(name, wait=True)


@pytest.fixture
def faults(kube: Kube) -> Iterator[list[str]]:
    """Names of GpuFaults a test created; deleted afterwards (they are cluster-scoped)."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(ApiException):  # already cleared by the test
            kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


@pytest.fixture(autouse=True)
def components_alive(local_cluster: LocalCluster | None) -> Iterator[None]:
    """A component that crashed during a test fails that test, with its last log lines."""
    yield
    if local_cluster:
        dead = local_cluster.dead_processes()
        if dead:
            pytest.fail("components died: " + "; ".join(f"{p.name}:\n{p.tail(15)}" for p in dead))


def published(kube: Kube, node: str) -> dict[str, dict[str, Any]]:
    """The node's devices. Polls: the kubelet wipes a node's slices when it starts, and the driver
    re-creates them, so right after start-up they may be briefly absent."""
    slices = poll(f"ResourceSlices of {node}", lambda: kube.slices(node=node), 30)
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def every_node_publishes(
    kube: Kube, nodes: list[str], condition: Callable[[dict[str, dict[str, Any]]], bool]
) -> bool:
    """Each of the nodes publishes GPU devices, and each node's devices meet the condition: after a
    change that restarted every node's plugin (a helm upgrade on kind, TestBed.plugin_values)."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for s in kube.slices():
        found.setdefault(s["spec"]["nodeName"], {}).update({d["name"]: d for d in s["spec"]["devices"]})
    return set(nodes) <= set(found) and all(condition(found[node]) for node in nodes)


@pytest.fixture
def full_gpu_node(kube: Kube, nodes: list[str]) -> str:
    for node in nodes:
        devs = published(kube, node)
        if len([d for d in devs if "-mig-" not in d]) == 8 and not any("-mig-" in d for d in devs):
            return node
    require(False, "a node with 8 full GPUs and no MIG")
    raise AssertionError
