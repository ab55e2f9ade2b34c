"""python -m e2e.kindcluster up|down|kwok|config|versions|public-image|examples|readme|matrix-*
(make kind-up, kind-down, kind-kwok, generate, kind-readme; e2e/kind/run.sh)"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from dra_fake.fleet.workload import load_workload
from e2e.kindcluster import matrix, readme
from e2e.kindcluster.cluster import KindCluster
from e2e.kindcluster.config import HostFacts, dump, kind_config, write_examples
from e2e.kindcluster.versions import REPO, Release, newest, pinned, public_node_image, resolve


def main() -> int:
    parser = argparse.ArgumentParser(prog="kindcluster", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create the cluster dra-fake-<minor> and install the chart")
    down = sub.add_parser("down", help="delete the cluster")
    cfg = sub.add_parser("config", help="print the kind configuration (e2e/kind/run.sh: public images)")
    sub.add_parser("versions", help="the pinned releases, one per line")
    pub = sub.add_parser("public-image", help="the public kindest/node image of a minor (e2e/kind/run.sh)")
    pub.add_argument("minor", help="1.34")
    sub.add_parser("examples", help="write examples/kind/kind-<minor>.yaml (make generate)")
    sub.add_parser("matrix-table", help="docs/kind.md's matrix table from docs/results/kind-matrix.tsv")
    mrow = sub.add_parser("matrix-row", help="a kind-matrix.tsv row from a lane's pytest output (matrix.sh)")
    for name in ("kubernetes", "date", "commit"):
        mrow.add_argument(name)
    for name in ("workers", "up_s", "lane_s"):
        mrow.add_argument(name, type=int)
    mrow.add_argument("log", type=Path, help="the lane's pytest output")
    rd = sub.add_parser("readme", help="run README.md's kind path as written (make kind-readme; internet)")
    rd.add_argument("--k8s", default=newest().short, help="minor: examples/kind/kind-<minor>.yaml")
    rd.add_argument("--print", action="store_true", help="print the blocks for that release, run nothing")
    rd.add_argument("--keep", action="store_true", help="leave the cluster when a step fails")
    kcfg = sub.add_parser("kubeconfig", help="print the path of the cluster's kubeconfig")
    kw = sub.add_parser("kwok", help="run KWOK in the cluster for dra-fake fleet's nodes (make kind-kwok)")
    kw.add_argument("--workload", default="", help="workload profile (docs/local-cluster.md)")
    kw.add_argument("--delete", action="store_true", help="remove KWOK from the cluster")
    for p in (up, down, cfg, kcfg, kw):
        p.add_argument("--k8s", default=newest().short, help="minor (1.33) or release (1.33.13)")
    up.add_argument(
        "--nodes",
        type=int,
        default=3,
        help="GPU workers (default 3: H100, MIG, and one through the device plugin)",
    )
    up.add_argument("--config", type=Path, help="inventory file for every worker (default: see docs/kind.md)")
    up.add_argument(
        "--values", type=Path, help="a values file for helm install, after ours (docs/local-cluster.md)"
    )
    up.add_argument(
        "--feature-gates", default="", help="A=true,B=false: --set featureGates.A=true ... after it"
    )
    up.add_argument("--if-missing", action="store_true", help="keep a running cluster of that release")
    up.add_argument("--node-image", help="a public kindest/node image instead of ours (e2e/kind/run.sh)")
    cfg.add_argument("--nodes", type=int, default=1)
    cfg.add_argument("--public", action="store_true", help="for public kindest/node images (kindnetd)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    if args.cmd == "versions":
        print("\n".join(r.tag for r in pinned()))
        return 0
    if args.cmd == "public-image":
        print(public_node_image(Release.parse(f"{args.minor}.0").minor))
        return 0
    if args.cmd == "readme":
        minor = Release.parse(f"{args.k8s}.0" if args.k8s.count(".") == 1 else args.k8s).minor
        if args.print:
            for step, block in readme.blocks().items():
                print(f"# ---- {step}\n{readme.for_release(block, minor)}", end="")
        else:
            readme.run(minor, keep=args.keep)
        return 0
    if args.cmd == "matrix-table":
        print(matrix.write_doc().relative_to(REPO))
        return 0
    if args.cmd == "matrix-row":
        text = args.log.read_text(errors="replace")
        tag = resolve(args.kubernetes).tag
        print(matrix.row(tag, args.date, args.commit, args.workers, args.up_s, args.lane_s, text))
        return 0
    if args.cmd == "examples":
        for path in write_examples():
            print(path.relative_to(REPO))
        return 0
    release = resolve(args.k8s, pinned_only=not (args.cmd == "config" or getattr(args, "node_image", None)))
    if args.cmd == "config":
        workers = [{"nvidia.com/gpu.present": "true"}] * args.nodes
        print(dump(kind_config(release, workers, HostFacts.detect(), offline=not args.public)), end="")
        return 0
    cluster = KindCluster(release, node_image=getattr(args, "node_image", None))
    if args.cmd == "kubeconfig":
        print(cluster.kubeconfig)
        return 0
    if args.cmd == "kwok":
        return kwok_cmd(cluster, args.workload, args.delete)
    if args.cmd == "down":
        if cluster.exists():
            cluster.down()
            print(f"kind cluster {cluster.name} deleted")
        else:
            print(f"no kind cluster {cluster.name}")
        return 0
    if args.if_missing and cluster.exists() and cluster.kubeconfig.exists():
        print(f"kind cluster {cluster.name} is running: export KUBECONFIG={cluster.kubeconfig}")
        return 0
    start = time.monotonic()
    cluster.up(
        workers=args.nodes, inventory=args.config, values=args.values, feature_gates=args.feature_gates
    )
    print(
        f"\nkind cluster {cluster.name} ({release}, {args.nodes} GPU worker(s)) up in "
        f"{time.monotonic() - start:.0f}s, dra-fake installed with Helm in namespace dra-fake\n\n"
        f"  export KUBECONFIG={cluster.kubeconfig}\n  kubectl get nodes,resourceslices\n"
        f"\n(delete: make kind-down K8S={release.short})"
    )
    return 0


def kwok_cmd(cluster: KindCluster, workload: str, delete: bool) -> int:
    from dra_fake.fleet.kwok import NAME, NAMESPACE
    from e2e.kindcluster import kwok
    from e2e.kube import Kube

    api = Kube(cluster.kubeconfig).api
    if delete:
        kwok.uninstall(api)
        print(f"KWOK removed from {cluster.name}")
        return 0
    kwok.load_image(cluster.name)
    kwok.install(api, load_workload(workload))
    print(
        f"KWOK runs in {cluster.name} (deployment {NAME} in {NAMESPACE}) for the nodes "
        "labelled dra-fake.dev/fleet; start a fleet:\n\n"
        f"  dra-fake fleet --nodes 100 --kubeconfig {cluster.kubeconfig}\n"
        f"\n(remove: make kind-kwok K8S={cluster.release.short} KWOK_DELETE=1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
