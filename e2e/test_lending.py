"""Idle-GPU lending with reclaim end to end (docs/sharing.md): an owner's idle GPU is lent to a spot
pod through its lend view, the owner getting busy reclaims it through kube-controller-manager's
own NoExecute device-taint eviction while the owner runs on, and a spot pod is admitted again once
the owner has been idle for the hold time.

The first worker's plugin runs with the chart values `gpuLending` (TestBed.plugin_values, as
e2e/test_sharing.py does: on kind a `helm upgrade`, which also creates the DeviceClass
`spot.gpu.nvidia.com`; the local cluster does not, so the module creates it there), on Kubernetes
1.36+ (docs/sharing.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dra_fake.gpu.deviceclasses import spot_class
from dra_fake.gpu.lending import NOT_LENDABLE_TAINT, SPOT_TAINT
from dra_fake.gpu.lendingfile import FILE_NAME
from dra_fake.gpu.workloads import ANNOTATION_UTILIZATION
from e2e.conftest import every_node_publishes, published
from e2e.kube import Kube, pod_with_claim_template, poll
from e2e.testbed import GPU_DRIVER, NODE_PLUGINS_DIR, TestBed
from e2e.workloads import prepare_failure

pytestmark = pytest.mark.needs("node", "gpu-lending")

IDLE_FOR = 10  # seconds: short, so a test waits little for (re-)admission
LENDING_VALUES = {"gpuLending": {"enabled": True, "idleFor": IDLE_FOR, "idleThreshold": 10}}


def lending(slices: dict[str, dict[str, Any]]) -> bool:
    return "gpu-0-spot" in slices


@pytest.fixture(scope="module")
def lending_node(bed: TestBed, kube: Kube, nodes: list[str]) -> Iterator[str]:
    """The first node with lending on for the module (and the spot class), then as it was (on kind
    every node's plugin restarted: no lend view on any node)."""
    node = nodes[0]
    spot = spot_class(GPU_DRIVER)
    with bed.plugin_values(node, LENDING_VALUES):
        created = kube.device_class(spot["metadata"]["name"]) is None  # the chart creates it
        if created:
            kube.create(spot)
        poll(f"lend views published on {node}", lambda: lending(published(kube, node)), 90)
        try:
            yield node
        finally:
            if created:
                delete_class(kube, spot["metadata"]["name"])
    poll("no lend views on any node", lambda: every_node_publishes(kube, nodes, no_lend_views), 90)


def no_lend_views(devices: dict[str, dict[str, Any]]) -> bool:
    return not any(name.endswith("-spot") for name in devices)


def delete_class(kube: Kube, name: str) -> None:
    try:
        kube.custom.delete_cluster_custom_object(*kube.resource, "deviceclasses", name)
    except ApiException as err:
        if err.status != 404:
            raise


def template(
    name: str, device_class: str, uuid: str, tolerations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "selectors": [{"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].uuid == "{uuid}"'}}],
    }
    if tolerations:
        exactly["tolerations"] = tolerations
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


SPOT_TOLERATION = {"key": SPOT_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def pod_on(
    kube: Kube, ns: str, name: str, claim_template: str, node: str, utilization: str | None = None
) -> None:
    pod = pod_with_claim_template(name, claim_template)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    if utilization is not None:
        pod["metadata"]["annotations"] = {ANNOTATION_UTILIZATION: utilization}
    kube.create(pod, ns)


def set_utilization(kube: Kube, ns: str, pod: str, value: str) -> None:
    kube.core.patch_namespaced_pod(pod, ns, {"metadata": {"annotations": {ANNOTATION_UTILIZATION: value}}})


def reclaim_taint(kube: Kube, node: str, gpu: str = "gpu-0") -> tuple[str, str] | None:
    """(value, effect) of the GPU's lend view's not-lendable taint; None: lendable."""
    for taint in published(kube, node)[f"{gpu}-spot"].get("taints") or []:
        if taint["key"] == NOT_LENDABLE_TAINT:
            return taint.get("value", ""), taint["effect"]
    return None


def lending_events(kube: Kube, node: str) -> set[str] | None:
    """The reasons of the lending service's Node events about gpu-0 (None: no reclaim yet)."""
    found = kube.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}")
    reasons = {
        str(e.reason) for e in found.items if str(e.reason).startswith("Gpu") and "gpu-0 " in str(e.message)
    }
    return reasons if "GpuReclaimed" in reasons else None


def gone_or_going(kube: Kube, ns: str, pod: str) -> bool:
    return not kube.pod_exists(ns, pod) or bool(kube.pod(ns, pod)["metadata"].get("deletionTimestamp"))


def owner_runs_on(kube: Kube, ns: str) -> None:
    """The owner's pod was never evicted: lending never costs the owner its GPU."""
    owner = kube.pod(ns, "owner")
    assert owner["status"]["phase"] == "Running" and not owner["metadata"].get("deletionTimestamp")


def spot_refused_at_prepare(kube: Kube, ns: str, says: str, expected: str) -> None:
    """The spot pod's prepare failed with `expected` (found by `says`) and the pod waits."""
    message = prepare_failure(kube, ns, "spot", says)
    assert expected in message, message
    assert kube.pod(ns, "spot")["status"]["phase"] == "Pending"


def test_an_idle_gpu_is_lent_reclaimed_by_eviction_and_lent_again_while_the_owner_runs_on(
    kube: Kube, ns: str, bed: TestBed, lending_node: str
) -> None:
    node = lending_node
    slices = published(kube, node)
    uuid = str(slices["gpu-0"]["attributes"]["uuid"]["string"])
    spot_view = slices["gpu-0-spot"]
    assert spot_view["attributes"]["type"] == {"string": "spot"}
    assert spot_view["attributes"]["uuid"] == {"string": uuid}
    assert {t["key"] for t in spot_view["taints"]} >= {SPOT_TAINT}
    assert not slices["gpu-0"].get("taints"), "the owners' device is never tainted by lending"

    kube.create(template("owned", GPU_DRIVER, uuid), ns)
    kube.create(template("spot", f"spot.{GPU_DRIVER}", uuid, [SPOT_TOLERATION]), ns)
    pod_on(kube, ns, "owner", "owned", node, utilization="3")
    kube.wait_running(ns, "owner")

    # lend: the owner idle for IDLE_FOR, the not-lendable taint goes, a spot pod runs on the same GPU
    poll("gpu-0 lendable", lambda: reclaim_taint(kube, node) is None, IDLE_FOR + 40)
    pod_on(kube, ns, "spot-1", "spot", node)
    kube.wait_running(ns, "spot-1")
    env = bed.container(ns, "spot-1").env()
    assert (env["DRA_FAKE_GPU_0_SPOT_UUID"], env["DRA_FAKE_GPU_0_SPOT_LENDER"]) == (uuid, "gpu-0")

    # reclaim: the owner gets busy; Kubernetes evicts the spot pod, never the owner
    set_utilization(kube, ns, "owner", "85")
    assert poll("the reclaim taint", lambda: reclaim_taint(kube, node), 30) == ("busy", "NoExecute")
    poll("the spot pod evicted", lambda: gone_or_going(kube, ns, "spot-1"), 60)
    owner_runs_on(kube, ns)
    # every step is visible with kubectl: the eviction's event on the spot pod, ours on the node
    reasons = {e.get("reason") for e in kube.events(ns, "spot-1")}
    assert "DeviceTaintManagerEviction" in reasons, reasons
    node_events = poll("the lending Node events", lambda: lending_events(kube, node), 30)
    assert {"GpuLendable", "GpuReclaimed"} <= node_events, node_events

    # a new spot pod waits while the owner is busy ...
    pod_on(kube, ns, "spot-2", "spot", node)
    assert "cannot allocate all claims" in poll(
        "spot-2 unschedulable", lambda: kube.unschedulable(ns, "spot-2"), 60
    )
    # ... and is admitted once the owner has been idle for IDLE_FOR again
    set_utilization(kube, ns, "owner", "3")
    poll("gpu-0 lendable again", lambda: reclaim_taint(kube, node) is None, IDLE_FOR + 40)
    kube.wait_running(ns, "spot-2", timeout=120)
    owner_runs_on(kube, ns)


def test_claims_that_do_not_opt_in_or_a_gpu_without_owners_get_no_lend_view(
    kube: Kube, ns: str, lending_node: str
) -> None:
    """Bad inputs: a spot claim for a GPU nobody owns pends (not lent); once the GPU is owned and
    lendable, a claim of the spot class that does not tolerate dra-fake.dev/spot still pends (the
    opt-in), and the owner's claim got the GPU itself, never its lend view."""
    node = lending_node
    uuid = str(published(kube, node)["gpu-1"]["attributes"]["uuid"]["string"])
    kube.create(template("spot", f"spot.{GPU_DRIVER}", uuid, [SPOT_TOLERATION]), ns)
    pod_on(kube, ns, "unowned", "spot", node)
    assert "cannot allocate all claims" in poll(
        "a spot pod for an unowned GPU unschedulable", lambda: kube.unschedulable(ns, "unowned"), 60
    )
    kube.delete_pod(ns, "unowned")

    kube.create(template("owned", GPU_DRIVER, uuid), ns)
    pod_on(kube, ns, "owner", "owned", node, utilization="3")
    kube.wait_running(ns, "owner")
    poll("gpu-1 lendable", lambda: reclaim_taint(kube, node, "gpu-1") is None, IDLE_FOR + 40)
    kube.create(template("no-opt-in", f"spot.{GPU_DRIVER}", uuid), ns)
    pod_on(kube, ns, "no-opt-in", "no-opt-in", node)
    assert "cannot allocate all claims" in poll(
        "a spot pod without the toleration unschedulable", lambda: kube.unschedulable(ns, "no-opt-in"), 60
    )
    claim = kube.pod(ns, "owner")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert [r["device"] for r in kube.claim(ns, claim)["status"]["allocation"]["devices"]["results"]] == [
        "gpu-1"
    ]


# Both effects, each named: the eviction controller of 1.37.2 ignores a toleration without an
# explicit NoExecute effect (docs/sharing-design.md, 2.2); NoExecute for an hour (forever is refused).
NOT_LENDABLE_TOLERATIONS = [
    {"key": NOT_LENDABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    {"key": NOT_LENDABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600},
]


def test_a_spot_claim_on_a_busy_gpu_is_refused_at_prepare_naming_why(
    kube: Kube, ns: str, lending_node: str
) -> None:
    """A spot claim that tolerates the not-lendable taint gets a busy GPU's lend view from the
    scheduler; the plugin still does not prepare it, says why, and the owner runs on."""
    node = lending_node
    uuid = str(published(kube, node)["gpu-0"]["attributes"]["uuid"]["string"])
    kube.create(template("owned", GPU_DRIVER, uuid), ns)
    tolerations = [SPOT_TOLERATION, *NOT_LENDABLE_TOLERATIONS]
    kube.create(template("spot-anyway", f"spot.{GPU_DRIVER}", uuid, tolerations), ns)
    pod_on(kube, ns, "owner", "owned", node)  # no simulated load: busy (80-100 %)
    kube.wait_running(ns, "owner")
    poll("gpu-0 busy", lambda: reclaim_taint(kube, node) == ("busy", "NoExecute"), 30)

    pod_on(kube, ns, "spot", "spot-anyway", node)
    spot_refused_at_prepare(
        kube,
        ns,
        "is not lendable now",
        "prepare devices failed: requested device gpu-0-spot is not lendable now: GPU gpu-0 is busy "
        f"({NOT_LENDABLE_TAINT}=busy: its owners are busy)",
    )
    owner_runs_on(kube, ns)


def test_a_spot_claim_that_tolerates_reclaim_forever_is_refused_at_prepare(
    kube: Kube, ns: str, lending_node: str
) -> None:
    """The allocation result carries the request's tolerations (1.35+): one that tolerates the
    reclaim taint without tolerationSeconds could never be evicted, so the plugin refuses it even
    on a lendable GPU."""
    node = lending_node
    uuid = str(published(kube, node)["gpu-0"]["attributes"]["uuid"]["string"])
    kube.create(template("owned", GPU_DRIVER, uuid), ns)
    forever = [SPOT_TOLERATION, {"key": NOT_LENDABLE_TAINT, "operator": "Exists", "effect": "NoExecute"}]
    kube.create(template("spot-forever", f"spot.{GPU_DRIVER}", uuid, forever), ns)
    pod_on(kube, ns, "owner", "owned", node, utilization="3")
    kube.wait_running(ns, "owner")
    poll("gpu-0 lendable", lambda: reclaim_taint(kube, node) is None, IDLE_FOR + 40)

    pod_on(kube, ns, "spot", "spot-forever", node)
    spot_refused_at_prepare(
        kube,
        ns,
        "could never be reclaimed",
        "prepare devices failed: requested device gpu-0-spot: the spot claim tolerates "
        f"{NOT_LENDABLE_TAINT}=busy:NoExecute forever, so it could never be reclaimed",
    )


def lending_file(bed: TestBed, node: str) -> dict[str, Any]:
    """The lending state the node's plugin keeps (dra_fake.gpu.lendingfile); {} while there is none."""
    kept = bed.read_node_file(node, f"{NODE_PLUGINS_DIR}/{GPU_DRIVER}/{FILE_NAME}")
    return json.loads(kept) if kept else {}


def test_a_lent_gpu_stays_lent_through_a_plugin_sigkill_and_is_reclaimed_after_it(
    kube: Kube, ns: str, bed: TestBed, lending_node: str
) -> None:
    """The plugin is SIGKILLed while a spot pod runs on a lent GPU: the restarted plugin publishes
    the same taints (no `unknown`, the spot taint's timeAdded kept), the spot pod is not evicted,
    and a later reclaim still evicts it while the owner runs on."""
    node = lending_node
    uuid = str(published(kube, node)["gpu-0"]["attributes"]["uuid"]["string"])
    kube.create(template("owned", GPU_DRIVER, uuid), ns)
    kube.create(template("spot", f"spot.{GPU_DRIVER}", uuid, [SPOT_TOLERATION]), ns)
    pod_on(kube, ns, "owner", "owned", node, utilization="3")
    kube.wait_running(ns, "owner")
    poll("gpu-0 lendable", lambda: reclaim_taint(kube, node) is None, IDLE_FOR + 40)
    pod_on(kube, ns, "spot-1", "spot", node)
    kube.wait_running(ns, "spot-1")
    taints = published(kube, node)["gpu-0-spot"]["taints"]

    crashed = time.time()
    bed.crash_plugin(node)
    # the restarted plugin has sampled the owners (their pods listed) and kept what it saw
    poll("a sample after the restart", lambda: (lending_file(bed, node).get("sampled") or 0) > crashed, 30)
    assert published(kube, node)["gpu-0-spot"]["taints"] == taints
    assert lending_file(bed, node)["gpus"]["gpu-0"]["state"] == "lendable"
    assert not gone_or_going(kube, ns, "spot-1")

    set_utilization(kube, ns, "owner", "85")
    assert poll("the reclaim taint", lambda: reclaim_taint(kube, node), 30) == ("busy", "NoExecute")
    poll("the spot pod evicted", lambda: gone_or_going(kube, ns, "spot-1"), 60)
    owner_runs_on(kube, ns)
