"""Prepare through the kubelet's DRA manager: opaque configs and checkpoint recovery (issue 7)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.kube import Kube, poll
from e2e.testbed import GPU_DRIVER, NODE_PLUGINS_DIR, TestBed, assert_sees_its_gpus
from e2e.workloads import claim_with_config, pod_for_claim, prepare_failure

BAD_CONFIGS = [
    # (case, parameters, text the kubelet's event must contain)
    (
        "unknown-field",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Short"}},
        },
        # NVIDIA's wording and wrapping, as users grep for it in Events
        "prepare devices failed: error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "sharing.timeSlicingConfig.intervall"',
    ),
    (
        "gate-off",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing"},
        },
        '"TimeSlicing" is selected as the GPU sharing strategy, '
        'but the "TimeSlicingSettings" feature gate is not enabled',
    ),
    (
        "unknown-strategy",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "Spatial"},
        },
        "unknown GPU sharing strategy: Spatial",
    ),
]


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_bad_opaque_config_fails_that_claim_with_a_message_naming_the_problem(
    kube: Kube, ns: str, case: tuple[str, dict[str, Any], str], bed: TestBed
) -> None:
    _, parameters, expected = case
    kube.apply_yaml(claim_with_config("bad", parameters), ns)
    kube.apply_yaml(
        claim_with_config("good", {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}), ns
    )
    kube.create(pod_for_claim("bad", "bad"), ns)
    kube.create(pod_for_claim("good", "good"), ns)
    message = prepare_failure(kube, ns, "bad", expected)
    # The kubelet's own wrapper around our message: "... for ResourceClaim bad" (1.33+), "... for
    # claim <ns>/bad" (1.32).
    assert (
        "NodePrepareResources failed for ResourceClaim bad" in message or f"for claim {ns}/bad" in message
    ), message
    kube.wait_running(ns, "good")  # only that claim fails
    assert_sees_its_gpus(bed, ns, "good")
    assert kube.pod(ns, "bad")["status"]["phase"] == "Pending"


@pytest.mark.needs("node")
def test_a_corrupt_checkpoint_is_reported_on_the_node_and_the_plugin_recovers(
    kube: Kube, ns: str, bed: TestBed
) -> None:
    """On kind this also proves the chart's RBAC lets the plugin post the Node Event."""
    node = bed.workers[0]
    plugin_dir = f"{NODE_PLUGINS_DIR}/{GPU_DRIVER}"
    bed.write_node_file(
        node, f"{plugin_dir}/checkpoint.json", '{"version": 1, "checksum": "0", "payload": {"garbage'
    )
    bed.crash_plugin(node)  # it restarts and reads the corrupt file

    def corrupt_event() -> dict[str, Any] | None:
        for e in kube.core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={node}"
        ).items:
            if e.reason == "CheckpointCorrupt":
                return kube.api.sanitize_for_serialization(e)  # type: ignore[no-any-return]
        return None

    event = poll("CheckpointCorrupt event on the Node", corrupt_event, 60)
    assert event["involvedObject"]["kind"] == "Node" and event["type"] == "Warning"
    kept = [f for f in bed.node_files(node, plugin_dir) if f.startswith("checkpoint.json.corrupt-")]
    assert kept, "the bad file is kept for inspection"
    kube.apply_yaml(
        claim_with_config("after", {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}), ns
    )
    pod = pod_for_claim("after", "after")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    kube.create(pod, ns)
    kube.wait_running(ns, "after")
    assert_sees_its_gpus(bed, ns, "after")
