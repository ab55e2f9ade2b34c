"""An administrator's drain (docs/faults.md#draining-devices): `dra-fake fault drain` creates a
DeviceTaintRule selecting one of our devices; Kubernetes alone acts on it: with NoSchedule the
scheduler allocates the device to no new claim, with NoExecute kube-controller-manager's
device-taint-eviction-controller deletes the pod using it; `undrain` removes the rule and the device
is allocatable again. DeviceTaintRules: resource.k8s.io/v1 in 1.37 (the local control plane), v1beta2
in 1.36 with the gate DRADeviceTaintRules (our kind clusters: e2e/kindcluster/versions.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from dra_fake.gpu.taintrules import Drain, Rules
from e2e.conftest import published
from e2e.faultcli import fault_cli
from e2e.kube import Kube, poll
from e2e.workloads import pod, running_on_one_gpu, template, unschedulable

pytestmark = pytest.mark.needs("device-taint-rules")


def rule_names(kube: Kube) -> list[str]:
    return [r["metadata"]["name"] for r in Rules(kube.api).find()]  # in the version the server serves


@pytest.fixture
def drains(kube: Kube, kubeconfig: Path) -> Iterator[list[str]]:
    """Nodes whose drains a test made; undrained afterwards."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        with contextlib.suppress(AssertionError, ApiException):
            fault_cli(kubeconfig, "undrain", "--node", node)


def uuid_template(name: str, uuid: str) -> str:
    return template(name, "gpu.nvidia.com", selector=f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"')


def test_a_noexecute_drain_evicts_the_pod_and_undrain_frees_the_device(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, drains: list[str]
) -> None:
    device = running_on_one_gpu(kube, ns, full_gpu_node, "holder")
    drains.append(full_gpu_node)
    out = fault_cli(kubeconfig, "drain", "--node", full_gpu_node, "--device", device)
    name = Drain(pool=full_gpu_node, device=device).rule_name()  # kind's node names have dots
    assert out.strip() == f"devicetaintrule.resource.k8s.io/{name} created"
    assert name in rule_names(kube)

    def evicted() -> bool:
        return not kube.pod_exists(ns, "holder") or bool(
            kube.pod(ns, "holder")["metadata"].get("deletionTimestamp")
        )

    poll("the pod on the drained device evicted", evicted, 90)

    def eviction_state() -> str | None:
        """The rule's condition once the controller has acted on it (it writes NotStarted first)."""
        for line in fault_cli(kubeconfig, "rules").splitlines():
            fields = line.split()
            if fields[0] == name and fields[-1].split("/")[-1] in ("PodsPendingEviction", "Completed"):
                return fields[-1]
        return None

    # the eviction controller's condition on the rule, shown by `rules`
    poll("the rule's EvictionInProgress condition past NotStarted", eviction_state, 60)

    # The drained device is allocated to no new claim that asks for exactly it ...
    uuid = published(kube, full_gpu_node)[device]["attributes"]["uuid"]["string"]
    kube.apply_yaml(uuid_template("same", uuid), ns)
    kube.create(pod("waiting", "same", full_gpu_node), ns)

    def refused() -> str | None:
        """The scheduler reads DeviceTaintRules from its own watch: a pod it schedules in the moment
        before it has the new rule gets the device, and the eviction controller deletes that pod
        (seen once in a make test run: bound within a second of the rule). Such a pod is made
        again: what must hold is that the device ends up refused."""
        if not kube.pod_exists(ns, "waiting"):
            kube.create(pod("waiting", "same", full_gpu_node), ns)
            return None
        return kube.unschedulable(ns, "waiting")

    assert poll("pod waiting Unschedulable", refused, 60)
    # ... until the drain is undone.
    out = fault_cli(kubeconfig, "undrain", "--node", full_gpu_node, "--device", device)
    assert out.strip() == f"devicetaintrule.resource.k8s.io/{name} deleted"
    assert name not in rule_names(kube)
    kube.wait_running(ns, "waiting", timeout=120)


def test_a_noschedule_drain_of_a_node_keeps_running_pods(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, drains: list[str]
) -> None:
    running_on_one_gpu(kube, ns, full_gpu_node, "running")
    drains.append(full_gpu_node)
    fault_cli(
        kubeconfig, "drain", "--node", full_gpu_node, "--effect", "NoSchedule", "--name", f"{ns}-cordon"
    )
    kube.apply_yaml(template("two", "gpu.nvidia.com"), ns)
    kube.create(pod("new", "two", full_gpu_node), ns)
    assert unschedulable(kube, ns, "new")  # no device of the cordoned node for a new claim
    assert kube.pod(ns, "running")["status"]["phase"] == "Running"
    assert not kube.pod(ns, "running")["metadata"].get("deletionTimestamp")
    fault_cli(kubeconfig, "undrain", "--name", f"{ns}-cordon")
    kube.wait_running(ns, "new", timeout=120)
