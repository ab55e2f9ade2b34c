"""`helm upgrade` of the driver while a GPU pod runs, and `helm uninstall` + `install` (kind: the
chart as users install it).

The kubelet-plugin DaemonSet rolls with maxSurge 1 / maxUnavailable 0: on each node the new plugin
pod starts beside the old one (rolling-update socket names), becomes Ready only when the kubelet
has registered it, and only then the old pod goes. Running pods keep their devices, the new
plugin prepares new claims, and it unprepares the claims the old one prepared.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from e2e.helmrelease import NAMESPACE, RELEASE, helm, plugin_pods
from e2e.kube import Kube, gpu_claim_template, pod_with_claim_template, poll
from e2e.testbed import NODE_CDI_ROOT, TestBed, assert_sees_its_gpus

pytestmark = pytest.mark.needs("kind")

REPO = Path(__file__).resolve().parents[1]


def test_helm_upgrade_keeps_running_pods_and_their_claims(
    kube: Kube, ns: str, bed: TestBed, kubeconfig: Path
) -> None:
    node = bed.workers[0]
    kube.create(gpu_claim_template("single-gpu"), ns)
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
    chart = str(REPO / "charts" / "dra-fake")
    helm(kubeconfig, "upgrade", RELEASE, chart, "-n", NAMESPACE, "--reuse-values", "--set-string", annotation,
         "--wait", "--timeout", "5m")  # fmt: skip

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


def gfd_labels(kube: Kube, node: str) -> dict[str, str]:
    meta = kube.core.read_node(node).metadata
    labels = {k: v for k, v in (meta.labels or {}).items() if k.startswith("nvidia.com/")}
    if "dra-fake.dev/gfd-labels" in (meta.annotations or {}):
        labels["(record)"] = meta.annotations["dra-fake.dev/gfd-labels"]
    return labels


def test_helm_uninstall_removes_the_gfd_labels_and_a_reinstall_brings_them_back(
    kube: Kube, bed: TestBed, kubeconfig: Path, tmp_path: Path
) -> None:
    """The chart's pre-delete hook (a real Job of the driver image) removes the labels the plugins
    wrote; installing again (same values) restores the driver, labels and slices for the tests after."""
    nodes = bed.workers
    before = {n: poll(f"GFD labels on {n}", lambda n=n: gfd_labels(kube, n), 60) for n in nodes}
    assert all(labels["nvidia.com/gpu.present"] == "true" for labels in before.values())
    values = tmp_path / "values.yaml"
    values.write_text(helm(kubeconfig, "get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml"))

    helm(kubeconfig, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
    assert {n: gfd_labels(kube, n) for n in nodes} == {n: {} for n in nodes}

    helm(kubeconfig, "install", RELEASE, str(REPO / "charts" / "dra-fake"), "-n", NAMESPACE,
         "--values", str(values), "--wait", "--timeout", "5m")  # fmt: skip
    for node in nodes:
        poll(f"slices of {node} again", lambda n=node: kube.slices(node=n), 120)
        again = poll(f"GFD labels on {node} again", lambda n=node: gfd_labels(kube, n), 60)
        strip = ("nvidia.com/gfd.timestamp",)
        assert {k: v for k, v in again.items() if k not in strip} == {
            k: v for k, v in before[node].items() if k not in strip
        }
