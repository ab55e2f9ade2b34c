"""`dra-fake scenario` against the e2e cluster (docs/scenarios.md): the drain-and-evict example
replayed as a user would run it, its report read back. The example names the local cluster's node-1
(8 x H100); on kind the same example with the first worker's name (8 x H100 too), its pods in real
containers of the e2e shell image (the scenario's default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dra_fake.gpu.taintrules import Rules
from e2e.kube import Kube

pytestmark = pytest.mark.needs(
    "node",
    "device-taint-rules",
    reason="a bed of ours: the scenario's pods run the e2e shell image, its fault needs our plugins",
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "scenarios" / "drain-and-evict.yaml"


def test_the_drain_and_evict_example(kube: Kube, kubeconfig: Path, nodes: list[str], tmp_path: Path) -> None:
    node = nodes[0]  # 8 x H100, as the example's node-1
    example = tmp_path / EXAMPLE.name
    example.write_text(EXAMPLE.read_text().replace("node-1", node))
    out = subprocess.run(
        [sys.executable, "-m", "dra_fake", "scenario", str(example), "--report", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert out.returncode == 0, f"{out.stdout}{out.stderr}"
    assert report["expectations"] == {"met": True, "failures": []}
    pods = {p["name"]: p for p in report["pods"]}
    assert all(p["node"] == node and p["evicted"] for p in pods.values())
    # the late pod waited for the cordon (NoSchedule DeviceTaintRule) to go: bound after the undrain
    undrain = next(a for a in report["actions"] if a["action"] == "undrain")
    assert pods["late"]["bound"] >= undrain["at"] and pods["late"]["pending"], pods["late"]
    assert pods["late"]["timeToBind"] >= 5
    assert all(a["result"] == "ok" for a in report["actions"]), report["actions"]
    assert report["summary"]["timeToBindSeconds"]["p50"] is not None
    assert f"| late | {node} |" in out.stdout  # the markdown on stdout
    # cleaned up: no namespace, fault or rule of the scenario left
    left = [
        n.metadata.name
        for n in kube.core.list_namespace(label_selector="dra-fake.dev/scenario=true").items
        if str(n.metadata.name).startswith("drain-and-evict-") and not n.metadata.deletion_timestamp
    ]
    assert not left
    rules = Rules(kube.api).find()  # in the version the server serves: v1beta2 on 1.36
    assert not [r for r in rules if r["metadata"]["name"].startswith("drain-and-evict-")]
