"""Upgrade from the previous release to this commit with live claims (kind: the chart as users run it).

The previous release (e2e/releases.py: the newest tag vX.Y.Z before this commit, its image tarball
and packaged chart from `make release`) is installed over the cluster's release with the cluster's
values; GPU pods and a Ready ComputeDomain start on it; then `helm upgrade` to this commit's chart
and image. Every pod keeps running without a restart and sees what it saw, no claim is prepared
again, the domain stays Ready, the new plugin read the old one's checkpoint: it unprepares the
old claim when its pod goes, and the new controller deletes the domain the old one made (its
DaemonSet runs the old image). Deselected when there is no previous release tag, or no files for it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.computedomainbed import (
    DOMAIN_WORKLOAD_SECONDS,
    cd_manifest,
    channel_pod,
    channels_seen,
    create_cd,
    delete_cd_and_wait_clean,
    get_template,
    node_statuses,
)
from e2e.helmrelease import NAMESPACE, PLUGIN_PODS, RELEASE, helm, plugin_pods
from e2e.kindbed import KindBed
from e2e.kindcluster.cluster import KIND
from e2e.kube import Kube, gpu_claim_template, pod_with_claim_template, poll
from e2e.releases import PreviousRelease, previous
from e2e.testbed import NODE_CDI_ROOT, TestBed, assert_sees_its_gpus

pytestmark = pytest.mark.needs("kind", "previous-release")
CHART = Path(__file__).resolve().parents[1] / "charts" / "dra-fake"


def restarts(kube: Kube, ns: str, pods: list[str]) -> dict[str, tuple[str, str, int]]:
    """uid, phase and restart count of each pod."""
    out = {}
    for name in pods:
        pod = kube.pod(ns, name)
        count = sum(c["restartCount"] for c in pod["status"].get("containerStatuses") or [])
        out[name] = (pod["metadata"]["uid"], pod["status"]["phase"], count)
    return out


def prepared_in_logs(kube: Kube, uids: dict[str, str]) -> list[str]:
    """`claim prepared` lines in the logs of the GPU containers of the plugin pods with these uids
    (plugin_pods' keys)."""
    lines = []
    for pod in kube.core.list_namespaced_pod(NAMESPACE, label_selector=PLUGIN_PODS).items:
        if pod.metadata.uid not in uids:
            continue
        log = kube.core.read_namespaced_pod_log(
            pod.metadata.name, NAMESPACE, container="gpus", _request_timeout=30
        )
        lines += [line for line in log.splitlines() if "claim prepared" in line]
    return lines


def test_upgrade_from_the_previous_release_keeps_pods_claims_and_a_ready_domain(
    kube: Kube, ns: str, bed: TestBed, kubeconfig: Path, tmp_path: Path
) -> None:
    release = previous()
    assert isinstance(release, PreviousRelease) and isinstance(bed, KindBed), release
    values = tmp_path / "values.yaml"  # the cluster's own values (image dra-fake:kind)
    values.write_text(helm(kubeconfig, "get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml"))
    # Read before the downgrade: a kubelet may wipe a node's slices after the replaced plugin
    # deregisters, until the new one publishes again (on kind 1.32 at c8d693f no node had any right
    # after `helm upgrade --wait`; docs/reference/kubernetes-dra.md#kubelet-wiping-of-slices).
    first, second = bed.workers[:2]
    load = [str(KIND), "load", "image-archive", str(release.image), "--name", bed.cluster]
    loaded = subprocess.run(load, capture_output=True, text=True, timeout=600)
    assert loaded.returncode == 0, loaded.stderr
    helm(kubeconfig, "upgrade", RELEASE, str(release.chart), "-n", NAMESPACE, "--values", str(values),
         "--set", f"image.tag={release.version}", "--wait", "--timeout", "5m")  # fmt: skip
    for node in (first, second):
        poll(f"slices of {node} from {release.version}", lambda n=node: kube.slices(node=n), 120)

    # Live claims on the previous release: a GPU pod, and a two-node ComputeDomain with its workloads.
    kube.create(gpu_claim_template("single-gpu"), ns)
    gpu = pod_with_claim_template("gpu", "single-gpu")
    gpu["spec"]["nodeSelector"] = {"kubernetes.io/hostname": first}  # type: ignore[index]
    kube.create(gpu, ns)
    kube.wait_running(ns, "gpu", timeout=120)
    seen = assert_sees_its_gpus(bed, ns, "gpu")
    claim = kube.claim(ns, kube.pod(ns, "gpu")["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    spec_path = f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml"
    spec = bed.read_node_file(first, spec_path)
    assert spec, "the previous release prepared the claim"
    cd_uid = create_cd(kube, ns, cd_manifest("cd", "imex-channel-0", num_nodes=2))["metadata"]["uid"]
    poll("workload template", lambda: get_template(kube, ns, "imex-channel-0"))
    workers = {"worker-0": first, "worker-1": second}
    for name, node in workers.items():
        kube.core.create_namespaced_pod(ns, channel_pod(name, "imex-channel-0", node=node))
    for name in workers:
        kube.wait_running(ns, name, timeout=DOMAIN_WORKLOAD_SECONDS)
    ready = ("Ready", {first: "Ready", second: "Ready"})
    poll("ComputeDomain Ready on the previous release", lambda: node_statuses(kube, ns, "cd") == ready, 120)
    channels = {name: channels_seen(bed, ns, name) for name in workers}
    pods = ["gpu", *workers]
    before = restarts(kube, ns, pods)
    old_plugins = plugin_pods(kube)

    helm(kubeconfig, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--values", str(values),
         "--wait", "--timeout", "5m")  # fmt: skip

    def replaced() -> dict[str, str] | None:
        now = plugin_pods(kube)
        return None if set(now) & set(old_plugins) else now

    new_plugins = poll("every plugin pod replaced", replaced, 180)

    assert restarts(kube, ns, pods) == before, "no pod restarted"
    assert assert_sees_its_gpus(bed, ns, "gpu") == seen
    assert {name: channels_seen(bed, ns, name) for name in workers} == channels
    assert poll("ComputeDomain still Ready", lambda: node_statuses(kube, ns, "cd") == ready, 60)
    assert bed.read_node_file(first, spec_path) == spec, "the claim's CDI spec is untouched"
    assert prepared_in_logs(kube, new_plugins) == [], "the new plugins prepared no claim again"

    # The new plugin knows the old one's claim from the checkpoint: it unprepares it.
    kube.delete_pod(ns, "gpu")
    gone = lambda: bed.read_node_file(first, spec_path) is None  # noqa: E731
    poll("the old claim unprepared by the new plugin", gone, 90)

    # The new controller deletes the domain the old one made: the IMEX DaemonSet, rendered with the
    # previous release's image, loses its finalizer (the chart's admission policy allows it).
    for name in workers:
        kube.delete_pod(ns, name)
    delete_cd_and_wait_clean(bed, ns, "cd", cd_uid)
