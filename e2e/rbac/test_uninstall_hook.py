"""The chart's pre-delete hook with its own rights. Its file sorts last in e2e/rbac on purpose: it
removes the GPU Feature Discovery labels the other files' plugins wrote (on kind the plugins are
restarted afterwards, so they write them again for the rest of the suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from kubernetes import client

from e2e.kube import poll
from e2e.rbac.bed import CHART_BED, REPO, apply_all, delete_all, is_hook, request_token
from e2e.rbac.chart import Chart

pytestmark = CHART_BED
RECORD = "dra-fake.dev/gfd-labels"  # the annotation naming the labels a plugin wrote


def test_uninstall_hook_removes_the_gfd_labels_with_its_own_rights(
    chart: Chart, rendered: list[dict[str, Any]]
) -> None:
    """The chart's pre-delete hook (its ServiceAccount, ClusterRole and the Job's command; release
    `rbac`'s, beside kind's own release) removes exactly the labels the plugins recorded, from every
    node that has them; a label someone else set on the node stays."""
    hook = [json.loads(json.dumps(o)) for o in rendered if is_hook(o)]
    [job] = [o for o in hook if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    rights = [o for o in hook if o["kind"] != "Job"]
    for obj in rights:
        del obj["metadata"]["annotations"]
    apply_all(chart.admin, rights)
    core = client.CoreV1Api(chart.admin)
    first = chart.nodes[0]
    core.patch_node(first, {"metadata": {"labels": {"nvidia.com/gpu.deploy.test": "true"}}})
    try:
        for node in chart.nodes:
            poll(
                f"GFD labels on {node}",
                lambda n=node: "nvidia.com/gpu.count" in (core.read_node(n).metadata.labels or {}),
                60,
            )
        labelled = [
            n.metadata.name for n in core.list_node().items if RECORD in (n.metadata.annotations or {})
        ]
        assert set(chart.nodes) <= set(labelled), labelled
        token = request_token(chart.admin, None, pod["serviceAccountName"])
        kc = chart.token_kubeconfig(token, "hook")
        [program, *args] = pod["containers"][0]["command"]
        assert program == "dra-fake"
        out = subprocess.run(
            [sys.executable, "-m", "dra_fake", *args, f"--kubeconfig={kc}"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        expected = f"labels removed from {len(labelled)} node(s)\n"
        assert out.returncode == 0 and out.stdout == expected, out.stdout + out.stderr
        for node in labelled:
            meta = core.read_node(node).metadata
            left = {k for k in meta.labels or {} if k.startswith("nvidia.com/")}
            assert left == ({"nvidia.com/gpu.deploy.test"} if node == first else set()), left
            assert RECORD not in (meta.annotations or {})
    finally:
        core.patch_node(first, {"metadata": {"labels": {"nvidia.com/gpu.deploy.test": None}}})
        delete_all(chart.admin, rights)
        chart.relabel()
