"""Fabric-attached GPUs (docs/inventory.md#attach-fabric-attached-gpus) with the real scheduler: a
pod binds only once the plugin reports the attach in its claim's status; a failed attach sends it
back to scheduling, and the next allocation attaches; an attach that never reports ends at the
scheduler's bindingTimeout (20 s on the local cluster and on our kind clusters of 1.36+) and the
pod stays unbound.

For the module the first node's plugin runs with an inventory whose GPUs are fabric-attached in three
ways (the chart's `inventory.config`: TestBed.plugin_values), then as it was.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dra_fake.gpu.attach import ATTACH_FAILED, ATTACHED
from e2e.conftest import published
from e2e.kube import Kube, poll
from e2e.localcluster.controlplane import BINDING_TIMEOUT_SECONDS
from e2e.testbed import TestBed
from e2e.workloads import pod, template

pytestmark = pytest.mark.needs("binding-conditions")

DRIVER = "gpu.nvidia.com"
INVENTORY = {
    "gpus": [
        {"profile": "h100-sxm5-80gb", "count": 2, "attach": {"delaySeconds": 2}},  # gpu-0, gpu-1
        {"profile": "h100-sxm5-80gb", "count": 2, "attach": {"delaySeconds": 1, "failFirst": 1}},  # gpu-2, 3
        {"profile": "h100-sxm5-80gb", "count": 2, "attach": {"hang": True}},  # gpu-4, gpu-5
        {"profile": "h100-sxm5-80gb", "count": 2},  # gpu-6, gpu-7: local
    ]
}


def attachable(kube: Kube, node: str) -> bool:
    return bool(published(kube, node).get("gpu-0", {}).get("bindingConditions"))


@pytest.fixture(scope="module")
def fabric_node(bed: TestBed, kube: Kube, nodes: list[str]) -> Iterator[str]:
    """The first node's GPUs fabric-attached for the module (on kind every GPU node's: the chart's
    values are the release's), then as they were."""
    node = nodes[0]
    with bed.plugin_values(node, {"inventory": {"config": INVENTORY}}):
        poll(f"fabric-attached GPUs published on {node}", lambda: attachable(kube, node), 90)
        yield node
    poll("local GPUs published on every node", lambda: not any(attachable(kube, n) for n in nodes), 90)


def on_device(kube: Kube, ns: str, name: str, node: str, device: str) -> None:
    uuid = published(kube, node)[device]["attributes"]["uuid"]["string"]
    kube.apply_yaml(template(name, DRIVER, selector=f'device.attributes["{DRIVER}"].uuid == "{uuid}"'), ns)
    kube.create(pod(name, name, node), ns)


def claim_of(kube: Kube, ns: str, pod_name: str) -> dict[str, Any] | None:
    statuses = kube.pod(ns, pod_name).get("status", {}).get("resourceClaimStatuses") or []
    names = [s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")]
    return kube.claim(ns, names[0]) if names else None


def attach_conditions(claim: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    entries = ((claim or {}).get("status") or {}).get("devices") or []
    return {c["type"]: c for e in entries if e["driver"] == DRIVER for c in e.get("conditions") or []}


def events(kube: Kube, ns: str, name: str) -> list[str]:
    return [f"{e.get('reason')}: {e.get('message')}" for e in kube.events(ns, name)]


def test_the_pod_binds_only_after_the_attach_succeeds(kube: Kube, ns: str, fabric_node: str) -> None:
    on_device(kube, ns, "attached", fabric_node, "gpu-0")
    # allocated and waiting in PreBind: not bound, no attach reported yet
    waiting = poll(
        "the claim allocated while the pod waits",
        lambda: (c := claim_of(kube, ns, "attached")) and (c.get("status") or {}).get("allocation") and c,
        30,
        every=0.1,
    )
    [result] = waiting["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == [ATTACHED] and result["bindingFailureConditions"] == [ATTACH_FAILED]
    if not attach_conditions(waiting):  # read before the 2 s attach: nothing reported, nothing bound
        assert not kube.pod(ns, "attached")["spec"].get("nodeName")
    running = kube.wait_running(ns, "attached", timeout=60)
    assert running["spec"]["nodeName"] == fabric_node
    conditions = attach_conditions(claim_of(kube, ns, "attached"))
    assert conditions[ATTACHED]["status"] == "True" and conditions[ATTACH_FAILED]["status"] == "False"
    assert any(e.startswith("BindingConditionsPending") for e in events(kube, ns, "attached"))
    scheduled = next(c for c in running["status"]["conditions"] if c["type"] == "PodScheduled")
    # bound no earlier than the attach was reported (both to the second)
    assert scheduled["lastTransitionTime"] >= conditions[ATTACHED]["lastTransitionTime"]
    assert conditions["Ready"]["status"] == "True"  # and the device status of the prepare beside it


def test_a_failed_attach_is_scheduled_again_and_attaches(kube: Kube, ns: str, fabric_node: str) -> None:
    on_device(kube, ns, "retried", fabric_node, "gpu-2")
    kube.wait_running(ns, "retried", timeout=90)
    conditions = attach_conditions(claim_of(kube, ns, "retried"))
    assert conditions[ATTACHED]["status"] == "True"
    assert "(attempt 2)" in conditions[ATTACHED]["message"]  # the first attempt failed
    # the scheduler's PreBind saw the failure condition, and the pod was scheduled again
    assert any("device binding failed" in e for e in events(kube, ns, "retried")), events(kube, ns, "retried")


def test_an_attach_that_never_reports_times_out(kube: Kube, ns: str, fabric_node: str) -> None:
    on_device(kube, ns, "hung", fabric_node, "gpu-4")
    start = time.monotonic()
    timed_out = poll(
        "the scheduler's binding timeout",
        lambda: [e for e in events(kube, ns, "hung") if "device binding timeout" in e],
        BINDING_TIMEOUT_SECONDS + 60,
        every=1,
    )
    assert time.monotonic() - start >= BINDING_TIMEOUT_SECONDS - 2, timed_out
    assert not kube.pod(ns, "hung")["spec"].get("nodeName")
    assert not attach_conditions(claim_of(kube, ns, "hung"))
