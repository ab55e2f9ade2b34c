"""The chart's Helm release on the kind bed: `helm` run as a user runs it, and the release's plugin pods."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from e2e.kube import Kube

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
RELEASE = NAMESPACE = "dra-fake"
PLUGIN_PODS = "app.kubernetes.io/component=kubelet-plugin"


def helm(kubeconfig: Path, *args: str) -> str:
    out = subprocess.run(
        [str(HELM), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def plugin_pods(kube: Kube) -> dict[str, str]:
    """uid -> node of the kubelet-plugin pods."""
    pods = kube.core.list_namespaced_pod(NAMESPACE, label_selector=PLUGIN_PODS).items
    return {str(p.metadata.uid): str(p.spec.node_name) for p in pods if p.metadata and p.spec}
