"""`helm upgrade` of the driver while a GPU pod runs (kind: the chart as users install it).

The kubelet-plugin DaemonSet rolls with maxSurge 1 / maxUnavailable 0: on each node the new plugin
pod starts beside the old one (rolling-update socket names), becomes Ready only when the kubelet
has registered it, and only then the old pod goes. Running pods keep their devices, the new
plugin prepares new claims, and it unprepares the claims the old one prepared.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from e2e.kube import Kube, pod_with_claim_template, poll
from e2e.testbed import NODE_CDI_ROOT, TestBed, assert_sees_its_gpus

pytestmark = pytest.mark.needs("kind")

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
RELEASE = NAMESPACE = "dra-fake"
PLUGIN_PODS = "app.kubernetes.io/component=kubelet-plugin"
GPU_TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: single-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"""


def plugin_pods(kube: Kube) -> dict[str, str]:
    """uid -> node of the kubelet-plugin pods."""
    pods = kube.core.list_namespaced_pod(NAMESPACE, label_selector=PLUGIN_PODS).items
    return {str(p.metadata.uid): str(p.spec.node_name) for p in pods if p.metadata and p.spec}


def test_helm_upgrade_keeps_running_pods_and_their_claims(
    kube: Kube, ns: str, bed: TestBed, kubeconfig: Path
) -> None:
    node = bed.workers[0]
    kube.apply_yaml(GPU_TEMPLATE, ns)
    before = pod_with_claim_template("before", "single-gpu")
    before["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # type: ignore[index]
    kube.create(before, ns)
    kube.wait_running(ns, "before")
    seen = assert_sees_its_gpus(bed, ns, "before")
    claim = kube.claim(ns, kube.pod(ns, "before")["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    spec = f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml"
    old = plugin_pods(kube)

    # A new pod template (as a new image or values would give): every plugin pod is replaced.
    nonce = uuid.uuid4().hex[:8]
    annotation = f"kubeletPlugin.podAnnotations.e2e-upgrade={nonce}"
    upgrade = subprocess.run(
        [str(HELM), "--kubeconfig", str(kubeconfig), "upgrade", RELEASE, str(REPO / "charts" / "dra-fake"),
         "-n", NAMESPACE, "--reuse-values", "--set-string", annotation, "--wait", "--timeout", "5m"],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stderr

    def replaced() -> dict[str, str] | None:
        now = plugin_pods(kube)
        return None if set(now) & set(old) else now

    new = poll("old plugin pods gone", replaced, 120)
    assert sorted(new.values()) == sorted(old.values()), "one new plugin pod per node"

    running = kube.pod(ns, "before")
    assert running["status"]["phase"] == "Running"
    assert running["status"]["containerStatuses"][0]["restartCount"] == 0
    assert assert_sees_its_gpus(bed, ns, "before") == seen
    assert bed.read_node_file(node, spec), "the claim stays prepared"
    assert kube.claim(ns, claim["metadata"]["name"])["status"]["reservedFor"][0]["name"] == "before"

    after = pod_with_claim_template("after", "single-gpu")
    after["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # type: ignore[index]
    kube.create(after, ns)
    kube.wait_running(ns, "after", timeout=120)
    assert assert_sees_its_gpus(bed, ns, "after") != seen
    kube.delete_pod(ns, "before")
    poll(
        "the old plugin's claim unprepared by the new one", lambda: bed.read_node_file(node, spec) is None, 60
    )
