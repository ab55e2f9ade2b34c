"""`make demo` / `make demo-kind`: a cluster, the driver, the workloads in demo/, and what each pod got.

`make demo` runs on the local control plane (harness nodes: no containers, so "inside the pod"
is what the kubelet's CDI library injected, with our nvidia-smi run against it); `make demo-kind`
on a kind cluster of ours, where every pod is a real container.

Deterministic on purpose: node 1 has 8 full H100s, node 2 the MIG GPUs (pre-created and dynamic
MIG); pods that want full GPUs select node 1 by its `dra-fake.dev/gpu-pool` label, so no full-GPU
pod can take the GPU whose partitions the MIG notebooks need.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.harnessbed import HarnessBed
from e2e.kindbed import KindBed
from e2e.kube import Kube, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.localcluster.values import user_values
from e2e.testbed import GPU_DRIVER, NODE_CDI_ROOT, TestBed, pod_claims

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "demo"
POOL_LABEL = "dra-fake.dev/gpu-pool"
NEEDS_ANNOTATION = "demo.dra-fake.dev/needs"  # "partitionable-devices": skipped where the server has none


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--kind", metavar="K8S", help="on the kind cluster of this release (make demo-kind)")
    parser.add_argument("--values", type=Path, help="the chart's values file (docs/local-cluster.md)")
    parser.add_argument("--feature-gates", default="", help="A=true,B=false, on top of the values' gates")
    args = parser.parse_args()
    if args.nodes < 2 and not args.kind:
        parser.error(
            f"--nodes {args.nodes}: the demo needs 2 nodes or more (node 2 holds the MIG GPUs, the "
            "ComputeDomain spans two nodes)"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    t0 = time.monotonic()
    if args.kind:
        from e2e.kindcluster import KindCluster, resolve

        kind = KindCluster(resolve(args.kind))
        started = not (kind.exists() and kind.kubeconfig.exists())
        if started:
            print(f"==> creating kind cluster {kind.name}: 2 GPU workers, chart installed with Helm")
            kind.up(workers=2, values=args.values, feature_gates=args.feature_gates)
        kube = Kube(kind.kubeconfig)
        bed: TestBed = KindBed(kube, kind.name, kind.kubeconfig)
        stop, where = kind.down, f"export KUBECONFIG={kind.kubeconfig}; delete it with `make kind-down`"
    else:
        # Without CONFIG, node-2 shows MIG: two H100s with pre-created instances, one with dynamic MIG.
        node_configs = {} if args.config else {"node-2": REPO / "examples" / "inventory" / "mixed-mig.yaml"}
        labels = {
            f"node-{i}": {POOL_LABEL: "mig" if i == 2 and not args.config else "h100"} for i in range(1, 9)
        }
        cluster = LocalCluster(
            DEFAULT_ROOT,
            nodes=args.nodes,
            inventory_config=args.config,
            node_configs=node_configs,
            node_labels=labels,
            values=user_values(args.values, args.feature_gates),
        )
        started = not cluster.is_up()
        if started:
            print(
                f"==> starting a local cluster with {args.nodes} node(s) (real etcd, kube-apiserver, "
                "kube-scheduler, kube-controller-manager, dra-kubelet harness, GPU plugin)"
            )
            cluster.up()
        kube = Kube(cluster.kubeconfig)
        bed = HarnessBed(kube, cluster)
        stop, where = (
            cluster.down,
            f"export KUBECONFIG={cluster.kubeconfig}; stop it with `make cluster-down`",
        )
    print(f"==> cluster ready in {time.monotonic() - t0:.0f}s")
    try:
        pods = run_workloads(kube)
        print(summary(bed, pods))
    finally:
        if args.keep or not started:
            print(f"\ncluster left running: {where}")
        else:
            print("\n==> tearing down (KEEP=1 keeps the cluster)")
            stop()
    return 0


def partitionable(kube: Kube) -> bool:
    return any(d.get("consumesCounters") for s in kube.slices() for d in s["spec"]["devices"])


def run_workloads(kube: Kube) -> list[str]:
    kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
    poll("default service account", lambda: kube._has_default_sa(NAMESPACE), 30)
    dynamic_mig = partitionable(kube)
    pods: list[str] = []
    for path in sorted((REPO / "demo").glob("*.yaml")):
        print(f"==> kubectl apply -f {path.relative_to(REPO)}")
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            needs = (doc["metadata"].get("annotations") or {}).get(NEEDS_ANNOTATION)
            if needs == "partitionable-devices" and not dynamic_mig:
                what = f"{doc['kind']} {doc['metadata']['name']}"
                print(f"    skipped {what}: this release has no partitionable devices")
                continue
            obj = kube.create(doc, NAMESPACE)
            if obj.get("kind") == "Pod":
                pods.append(obj["metadata"]["name"])
    for name in pods:
        kube.wait_running(NAMESPACE, name, timeout=180)
    print(f"==> all {len(pods)} pods Running\n")
    return pods


def describe(device: dict[str, Any]) -> str:
    attrs = {k: next(iter(v.values())) for k, v in device.get("attributes", {}).items()}
    if "productName" in attrs:
        text = f"{attrs['productName']}  {attrs.get('uuid', '(MIG device created at prepare)')}"
        return text + (f"  MIG {attrs['profile']}" if "profile" in attrs else "")
    return "  ".join(f"{k}={v}" for k, v in sorted(attrs.items()))


def summary(bed: TestBed, pods: list[str]) -> str:
    kube = bed.kube
    devices = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
        for driver in (GPU_DRIVER, "compute-domain.nvidia.com")
        for s in kube.slices(driver=driver)
        for d in s["spec"]["devices"]
    }
    lines = []
    for name in pods:
        pod = kube.pod(NAMESPACE, name)
        node = pod["spec"]["nodeName"]
        lines.append(f"pod {NAMESPACE}/{name} -> node {node}")
        for claim_name in pod_claims(pod):
            claim = kube.claim(NAMESPACE, claim_name)
            uid = claim["metadata"]["uid"]
            for result in claim["status"]["allocation"]["devices"]["results"]:
                device = devices.get((result["driver"], result["pool"], result["device"]), {})
                request = result["request"]
                lines.append(
                    f"  claim {claim_name} request {request}: {result['device']}  {describe(device)}"
                )
            for prefix in ("k8s.gpu.nvidia.com", "k8s.compute-domain.nvidia.com"):
                spec_path = f"{NODE_CDI_ROOT}/{prefix}-claim_{uid}.yaml"
                text = bed.read_node_file(node, spec_path)
                if text is None:
                    continue
                lines.append(f"  CDI spec {spec_path} on {node}")
                spec = yaml.safe_load(text)
                env = list(spec.get("containerEdits", {}).get("env", []))
                for d in spec["devices"]:
                    env += d.get("containerEdits", {}).get("env", [])
                shown = [e for e in env if not e.startswith("DRA_FAKE_GPU_")]  # per-device details
                lines.extend(f"    env {e}" for e in shown)
                if len(env) > len(shown):
                    lines.append(f"    env DRA_FAKE_GPU_* ({len(env) - len(shown)} per-device variables)")
        for ctr in pod["spec"]["containers"]:
            view = bed.container(NAMESPACE, name, ctr["name"])
            smi = view.nvidia_smi("-L")
            if smi.code == 0:
                lines.append(f"  container {ctr['name']}: nvidia-smi -L")
                lines.extend(f"    {line}" for line in smi.output.splitlines())
            channels = view.run("ls", "/dev/nvidia-caps-imex-channels")
            if channels.code == 0:
                listed = " ".join(channels.output.split())
                lines.append(f"  container {ctr['name']}: ls /dev/nvidia-caps-imex-channels: {listed}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
