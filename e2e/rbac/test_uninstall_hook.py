"""The chart's pre-delete hook with its own rights. Its file sorts last in e2e/rbac on purpose: it
removes the GPU Feature Discovery labels the other files' plugins wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e.kube import poll
from e2e.localcluster import LocalCluster
from e2e.rbac.bed import NODES, OWN_CONTROL_PLANE, REPO, apply_all, is_hook, request_token, token_kubeconfig

pytestmark = OWN_CONTROL_PLANE


def test_uninstall_hook_removes_the_gfd_labels_with_its_own_rights(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster, rendered: list[dict[str, Any]]
) -> None:
    """The chart's pre-delete hook (its ServiceAccount, ClusterRole and the Job's command) removes
    exactly the labels the plugins recorded; a label someone else set on the node stays. Last in
    e2e/rbac: the labels are gone afterwards."""
    hook = [o for o in rendered if is_hook(o)]
    [job] = [o for o in hook if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    for obj in hook:
        if obj["kind"] != "Job":
            obj = json.loads(json.dumps(obj))
            del obj["metadata"]["annotations"]
            apply_all(admin, [obj])
    core = client.CoreV1Api(admin)
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/gpu.deploy.test": "true"}}})
    for node in NODES:
        poll(
            f"GFD labels on {node}",
            lambda n=node: "nvidia.com/gpu.count" in (core.read_node(n).metadata.labels or {}),
            60,
        )
    kc = token_kubeconfig(
        cluster, request_token(admin, None, pod["serviceAccountName"]), cluster.root / "sa-hook.kubeconfig"
    )
    [program, *args] = pod["containers"][0]["command"]
    assert program == "dra-fake"
    out = subprocess.run(
        [sys.executable, "-m", "dra_fake", *args, f"--kubeconfig={kc}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0 and out.stdout == "labels removed from 2 node(s)\n", out.stdout + out.stderr
    for node in NODES:
        meta = core.read_node(node).metadata
        left = {k for k in meta.labels or {} if k.startswith("nvidia.com/")}
        assert left == ({"nvidia.com/gpu.deploy.test"} if node == "node-1" else set()), left
        assert "dra-fake.dev/gfd-labels" not in (meta.annotations or {})
