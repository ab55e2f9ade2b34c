"""`make demo`: a local cluster, the driver, the demo workloads in demo/, and what each pod got."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import Kube
from e2e.localcluster import DEFAULT_ROOT, LocalCluster

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "demo"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--config", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    # Without CONFIG, node-2 shows MIG: two H100s with pre-created instances, one with dynamic MIG.
    node_configs = {} if args.config else {"node-2": REPO / "examples" / "inventory" / "mixed-mig.yaml"}
    cluster = LocalCluster(
        DEFAULT_ROOT, nodes=args.nodes, inventory_config=args.config, node_configs=node_configs
    )
    started = not cluster.is_up()
    t0 = time.monotonic()
    if started:
        print(
            f"==> starting a local cluster with {args.nodes} node(s) (real etcd, kube-apiserver, "
            "kube-scheduler, kube-controller-manager, dra-kubelet harness, GPU plugin)"
        )
        cluster.up()
    print(f"==> cluster ready in {time.monotonic() - t0:.0f}s")
    try:
        kube = Kube(cluster.kubeconfig)
        kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
        kube._has_default_sa(NAMESPACE)
        from e2e.kube import poll

        poll("default service account", lambda: kube._has_default_sa(NAMESPACE), 30)
        pods: list[str] = []
        for path in sorted((REPO / "demo").glob("*.yaml")):
            print(f"==> kubectl apply -f {path.relative_to(REPO)}")
            for obj in kube.apply_yaml(path.read_text(), NAMESPACE):
                if obj.get("kind") == "Pod":
                    pods.append(obj["metadata"]["name"])
        for name in pods:
            kube.wait_running(NAMESPACE, name, timeout=120)
        print(f"==> all {len(pods)} pods Running\n")
        print(summary(kube, cluster, pods))
    finally:
        if args.keep or not started:
            print(
                f"\ncluster left running: export KUBECONFIG={cluster.kubeconfig}; "
                "stop it with `make cluster-down`"
            )
        else:
            print("\n==> tearing down (KEEP=1 keeps the cluster)")
            cluster.down()
    return 0


def pod_claim_names(pod: dict[str, Any]) -> list[str]:
    """Claims a pod uses: named directly, or generated from a template (pod status)."""
    generated = {
        s["name"]: s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses") or []
    }
    names = []
    for ref in pod["spec"].get("resourceClaims") or []:
        name = ref.get("resourceClaimName") or generated.get(ref["name"])
        if name:
            names.append(name)
    return names


def describe(device: dict[str, Any]) -> str:
    attrs = {k: next(iter(v.values())) for k, v in device.get("attributes", {}).items()}
    if "productName" in attrs:
        text = f"{attrs['productName']}  {attrs.get('uuid', '(MIG device created at prepare)')}"
        return text + (f"  MIG {attrs['profile']}" if "profile" in attrs else "")
    return "  ".join(f"{k}={v}" for k, v in sorted(attrs.items()))


def summary(kube: Kube, cluster: LocalCluster, pods: list[str]) -> str:
    listing = kube.custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
    all_slices = listing["items"]  # type: ignore[index]
    devices = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
        for s in all_slices
        for d in s["spec"].get("devices", [])
    }
    lines = []
    for name in pods:
        pod = kube.pod(NAMESPACE, name)
        node = pod["spec"]["nodeName"]
        lines.append(f"pod {NAMESPACE}/{name} -> node {node}")
        for claim_name in pod_claim_names(pod):
            claim = kube.claim(NAMESPACE, claim_name)
            uid = claim["metadata"]["uid"]
            for result in claim["status"]["allocation"]["devices"]["results"]:
                device = devices.get((result["driver"], result["pool"], result["device"]), {})
                request = result["request"]
                lines.append(
                    f"  claim {claim_name} request {request}: {result['device']}  {describe(device)}"
                )
            for spec_file in sorted((cluster.node_dir(node) / "cdi").glob(f"*-claim_{uid}.yaml")):
                lines.append(f"  CDI spec {spec_file.relative_to(REPO)}")
                spec = yaml.safe_load(spec_file.read_text())
                env = list(spec.get("containerEdits", {}).get("env", []))
                for d in spec["devices"]:
                    env += d.get("containerEdits", {}).get("env", [])
                lines.extend(f"    env {e}" for e in env)
        for ctr, ids in kube.cdi_devices(pod).items():
            lines.append(f"  container {ctr}: CDI devices {json.dumps(ids)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
