"""`dra-fake scenario` without a cluster (dra_fake.scenario): the file's checks, the objects a step
creates, and the report from what the pod watch and the events saw. Against a cluster:
e2e/test_scenario.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_fake.gpu.attach import ANNOTATION_OUTCOME
from dra_fake.gpu.workloads import ANNOTATION_UTILIZATION
from dra_fake.scenario import report
from dra_fake.scenario.model import Expect, PodSpec, ScenarioError, load, parse
from dra_fake.scenario.run import claim_template, pod_manifest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "scenarios"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_are_valid(path: Path) -> None:
    scenario = load(path)
    assert scenario.steps and scenario.expect.running


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"at": 0}], "steps.0: Value error, a step has exactly one action"),
        ([{"at": 0, "delete": ["a"], "undrain": {}}], "exactly one action"),
        ([{"at": 0, "delete": ["ghost"]}], "pod 'ghost' is not created by an earlier step"),
        ([{"at": 0, "pods": [{"name": "a", "count": 0}]}], "steps.0.pods.0.count"),
        ([{"at": 0, "drain": {"node": "n", "effect": "Evict"}}], "steps.0.drain.effect"),
        ([{"at": 0, "pods": [{"name": "a", "gpus": 1}]}], "steps.0.pods.0.gpus: Extra inputs"),
    ],
)
def test_bad_files_name_the_field(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        parse({"name": "s", "steps": steps}, "s.yaml")
    assert str(err.value).startswith("s.yaml: ")


def test_a_pod_gets_its_own_claim_template() -> None:
    spec = PodSpec.model_validate(
        {"name": "p", "count": 2, "node": "node-1", "selector": "true", "attach": "failed", "utilization": 80}
    )
    template = claim_template(spec, "ns-1")
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
        "selectors": [{"cel": {"expression": "true"}}],
    }
    assert template["spec"]["metadata"]["annotations"] == {ANNOTATION_OUTCOME: "failed"}
    pod = pod_manifest(spec, "ns-1")
    assert pod["metadata"]["annotations"] == {ANNOTATION_UTILIZATION: "80"}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-1"}
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "p"}]


def pod_at(
    node: str = "", phase: str = "Pending", deleting: bool = False, **conditions: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    conds = [
        {"type": t, "status": "True" if t == "DisruptionTarget" else "False", "reason": r}
        for t, r in conditions.items()
    ]
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase, "conditions": conds}}


def test_the_report_times_reasons_and_evictions() -> None:
    waited, evicted, gone = report.PodRecord("waited"), report.PodRecord("evicted"), report.PodRecord("gone")
    waited.observe(pod_at(PodScheduled="Unschedulable"), 1.0)
    waited.observe(pod_at("node-1"), 6.5)
    waited.observe(pod_at("node-1", "Running"), 7.0)
    evicted.observe(pod_at("node-1", "Running"), 2.0)
    evicted.observe(
        pod_at("node-1", "Running", deleting=True, DisruptionTarget="DeletionByDeviceTaintManager"), 9.0
    )
    gone.observe(pod_at(), 3.0)
    gone.deleted_by_scenario = True
    gone.observe(pod_at(deleting=True), 4.0)
    pods = {r.name: r for r in (waited, evicted, gone)}
    report.add_events(
        pods,
        [
            {
                "involvedObject": {"kind": "Pod", "name": "waited"},
                "reason": "FailedScheduling",
                "message": "0/2 nodes",
            },
            {
                "involvedObject": {"kind": "Pod", "name": "waited"},
                "reason": "FailedScheduling",
                "message": "0/2 nodes",
            },
            {
                "involvedObject": {"kind": "Pod", "name": "evicted"},
                "reason": "DeviceTaintManagerEviction",
                "message": "Marking for deletion",
            },
            {
                "involvedObject": {"kind": "Node", "name": "gone"},
                "reason": "FailedScheduling",
                "message": "x",
            },
        ],
    )
    expect = Expect(running=["waited", "gone"], evicted=["evicted", "waited"], unbound=["gone"])
    built = report.build(
        "s",
        pods,
        [{"at": 0.1, "planned": 0, "action": "pods", "what": "waited", "result": "ok"}],
        expect,
        12.0,
    )
    rows = {r["name"]: r for r in built["pods"]}
    assert rows["waited"]["timeToBind"] == 5.5
    assert rows["waited"]["pending"] == ["Unschedulable", "FailedScheduling: 0/2 nodes"]  # each once
    assert rows["evicted"]["evicted"] and not rows["gone"]["evicted"] and not rows["waited"]["evicted"]
    assert built["summary"] == {
        "pods": 3,
        "bound": 2,
        "running": 2,
        "evicted": 1,
        "neverBound": ["gone"],
        "timeToBindSeconds": {"p50": 2.75, "max": 5.5},
    }
    assert built["expectations"] == {
        "met": False,
        "failures": ["gone: expected to run, never did", "waited: expected to be evicted, was not"],
    }
    pods["waited"].pending += [f"FailedScheduling: attempt {n}" for n in range(5)]
    text = report.markdown(report.build("s", pods, [], expect, 12.0))
    assert "FailedScheduling: attempt 0<br>(+4 more in the JSON report) |" in text
    assert "| waited | node-1 | 1.0 | 6.5 | 7.0 | 5.5 | no | " in text
    assert "Expectations: NOT met: gone: expected to run" in text
