"""`make demo-sharing`: both modes of docs/sharing.md on a one-node local cluster, step by step,
with what kubectl and each pod's nvidia-smi show.

1. Shared GPUs (demo/sharing/01-shared-gpu.yaml): node-1's plugin runs with
   `--consumable-shares=memory` (gate ConsumableShares); a 20Gi and a 30Gi share of one H100; each
   pod's nvidia-smi shows the same UUID with its own total and usage.
2. Idle-GPU lending (demo/sharing/02-gpu-lending.yaml): the plugin also runs with `--gpu-lending`;
   an idle owner's GPU is lent to a spot pod, then the owner gets busy and kube-controller-manager
   evicts the spot pod while the owner runs on.

The plugin's flags are set through e2e/pluginflags.py (the stand-in until the local cluster takes
plugin flags). KEEP=1 leaves the cluster running.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from e2e.harnessbed import HarnessBed
from e2e.kube import Kube, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.pluginflags import SHARES_GATES, start_gpu_plugin

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "demo" / "sharing"
NAMESPACE = "demo-sharing"
IDLE_FOR = 15
FLAGS = ("--consumable-shares=memory", "--gpu-lending=true", f"--gpu-lending-idle-for={IDLE_FOR}")
ANNOTATION = "dra-fake.dev/simulated-gpu-utilization"


def apply(kube: Kube, name: str) -> list[str]:
    path = MANIFESTS / name
    print(f"==> kubectl apply -f {path.relative_to(REPO)}")
    pods = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and not (doc["kind"] == "DeviceClass" and kube.device_class(doc["metadata"]["name"])):
            obj = kube.create(doc, NAMESPACE)
            if obj["kind"] == "Pod":
                pods.append(obj["metadata"]["name"])
    return pods


def lend_taints(kube: Kube, node: str, view: str) -> list[str]:
    for s in kube.slices(node=node):
        for d in s["spec"].get("devices", []):
            if d["name"] == view:
                return [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in d.get("taints") or []]
    return []


def smi(bed: HarnessBed, pod: str, *args: str) -> str:
    return (
        bed.container(NAMESPACE, pod, bed.kube.pod(NAMESPACE, pod)["spec"]["containers"][0]["name"])
        .nvidia_smi(*args)
        .output
    )


def gone(kube: Kube, pod: str) -> bool:
    return not kube.pod_exists(NAMESPACE, pod) or bool(
        kube.pod(NAMESPACE, pod)["metadata"].get("deletionTimestamp")
    )


def shared_gpus(kube: Kube, bed: HarnessBed) -> None:
    pods = apply(kube, "01-shared-gpu.yaml")
    for pod in pods:
        kube.wait_running(NAMESPACE, pod)
    query = "--query-gpu=uuid,memory.total,memory.used,utilization.gpu"

    def sampled(pod: str) -> bool:  # a telemetry sample with the pod's load
        return smi(bed, pod, query, "--format=csv,noheader").split(", ")[2] != "0 MiB"

    for pod in pods:
        poll(f"{pod}'s usage sampled", lambda: sampled(pod), 30)  # noqa: B023 (called at once)
    for pod in pods:
        claim = kube.claim(
            NAMESPACE, kube.pod(NAMESPACE, pod)["spec"]["resourceClaims"][0]["resourceClaimName"]
        )
        [result] = claim["status"]["allocation"]["devices"]["results"]
        consumed = result["consumedCapacity"]
        print(f"pod {pod}: {result['device']} shareID {result['shareID']} consumedCapacity {consumed}")
        print("  nvidia-smi " + query + ": " + smi(bed, pod, query, "--format=csv,noheader").strip())


def lending(kube: Kube, bed: HarnessBed, node: str) -> None:
    apply(kube, "02-gpu-lending.yaml")
    kube.wait_running(NAMESPACE, "owner")
    print(f"gpu-1-spot taints: {lend_taints(kube, node, 'gpu-1-spot')}")
    print(f"==> the owner is idle (3 %): waiting {IDLE_FOR}s for gpu-1 to be lent")
    poll(
        "gpu-1 lendable",
        lambda: not any("not-lendable" in t for t in lend_taints(kube, node, "gpu-1-spot")),
        IDLE_FOR + 60,
    )
    print(f"gpu-1-spot taints: {lend_taints(kube, node, 'gpu-1-spot')}")
    kube.wait_running(NAMESPACE, "spot", timeout=120)
    for pod in ("owner", "spot"):
        print(f"pod {pod}: nvidia-smi -L: {smi(bed, pod, '-L').strip()}")
    print(f"==> kubectl annotate pod owner --overwrite {ANNOTATION}=85")
    kube.core.patch_namespaced_pod("owner", NAMESPACE, {"metadata": {"annotations": {ANNOTATION: "85"}}})
    poll(
        "reclaim taint", lambda: any("busy:NoExecute" in t for t in lend_taints(kube, node, "gpu-1-spot")), 60
    )
    print(f"gpu-1-spot taints: {lend_taints(kube, node, 'gpu-1-spot')}")
    poll("the spot pod evicted", lambda: gone(kube, "spot"), 90)
    reasons = sorted({e.get("reason", "") for e in kube.events(NAMESPACE, "spot")})
    print(f"pod spot: evicted by kube-controller-manager (events: {', '.join(reasons)})")
    print(f"pod owner: {kube.pod(NAMESPACE, 'owner')['status']['phase']}, never evicted")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    cluster = LocalCluster(DEFAULT_ROOT, nodes=1)
    started = not cluster.is_up()
    if started:
        print("==> starting a local cluster with 1 node")
        cluster.up()
    node = cluster.state.nodes[0]
    kube = Kube(cluster.kubeconfig)
    bed = HarnessBed(kube, cluster)
    print(f"==> restarting {node}'s GPU plugin with {' '.join(FLAGS)}")
    cluster.stop_plugin(node)
    start_gpu_plugin(cluster, node, SHARES_GATES, FLAGS)
    kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
    poll("default service account", lambda: kube._has_default_sa(NAMESPACE), 30)
    try:
        shared_gpus(kube, bed)
        lending(kube, bed, node)
    finally:
        if args.keep or not started:
            if not started:  # someone else's cluster: as it was
                kube.delete_namespace(NAMESPACE, wait=True)
                cluster.stop_plugin(node)
                cluster.start_plugin(node)
            where = f"export KUBECONFIG={cluster.kubeconfig}; stop it with `make cluster-down`"
            print(f"\ncluster left running: {where}")
        else:
            print("\n==> tearing down (KEEP=1 keeps the cluster)")
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
