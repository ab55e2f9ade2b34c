"""The `dra-fake fleet` flags (kept apart from run.py so building the CLI parser does not import
the kubernetes client)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dra_fake.core.flags import LOG_LEVELS
from dra_fake.fleet.core import FLEET_LABEL


def add_fleet_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fleet",
        help="simulate N GPU nodes (Nodes + ResourceSlices) from one process",
        description=(
            "Create N simulated Nodes (or adopt existing ones by label, e.g. KWOK nodes) and keep the "
            "ResourceSlices of every one of them published from one process."
        ),
    )
    p.add_argument("--nodes", type=int, default=0, help="number of Nodes to create (0 with --adopt-selector)")
    p.add_argument(
        "--config", default="", help="node inventory file for every node (default: 8 x h100-sxm5-80gb)"
    )
    p.add_argument("--adopt-selector", default="", help="adopt existing Nodes matching this label selector")
    p.add_argument("--node-prefix", default="fleet-", help="name prefix of created Nodes")
    p.add_argument("--fleet-name", default="fleet", help=f"value of the {FLEET_LABEL} label on created Nodes")
    p.add_argument("--node-label", action="append", default=[], help="extra KEY=VALUE label on created Nodes")
    p.add_argument("--workers", type=int, default=16, help="concurrent API writers")
    p.add_argument("--driver-name", default="gpu.nvidia.com")
    p.add_argument("--profiles-dir", type=Path, action="append", default=[])
    p.add_argument("--mark-pods-running", action="store_true", help="mark pods bound to fleet nodes Running")
    p.add_argument("--resync-seconds", type=float, default=300.0)
    p.add_argument(
        "--node-leases",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="renew each node's Lease as a kubelet would (default: for created nodes, not adopted ones)",
    )
    p.add_argument(
        "--exit-after", type=float, default=None, help="run this many seconds, print the summary (JSON), exit"
    )
    p.add_argument(
        "--feature-gates",
        default="",
        help="as the GPU plugin's; NVMLDeviceHealthCheck=true: GpuFaults of fleet nodes taint their devices",
    )
    p.add_argument("--additional-xids-to-ignore", default="", help="as the GPU plugin's (docs/faults.md)")
    p.add_argument(
        "--gfd-labels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GPU Feature Discovery's nvidia.com/* labels on created Nodes (docs/observability.md)",
    )
    p.add_argument(
        "--mig-strategy", default="none", help="GFD's MIG strategy of those labels: none, single, mixed"
    )
    p.add_argument(
        "--dcgm-exporter-port",
        type=int,
        default=-1,
        help="serve dcgm-exporter-compatible metrics of every fleet GPU at :<port>/metrics (negative: off)",
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    p.add_argument(
        "--exit-when-synced",
        action="store_true",
        help="exit once every node is published, printing a JSON summary (wall time, API requests, RSS)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    p.add_argument("--log-format", default="text", choices=["text", "json"])


def add_fleet_stages_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fleet-stages",
        help="print the KWOK Stages that run the pods of fleet nodes as a workload profile says",
        description=(
            "Print KWOK Stage objects (kwok.x-k8s.io/v1alpha1): pods bound to KWOK-managed fleet nodes "
            "start, run and finish (Succeeded or Failed) as the workload profile says. KWOK's --config "
            "file, or objects to apply where KWOK runs with --enable-crds=Stage (docs/local-cluster.md)."
        ),
    )
    p.add_argument(
        "--workload",
        default="",
        help="workload profile (YAML: startSeconds, runSeconds, runJitterSeconds, failureFraction, "
        "exitCode; default: start after 1 s, run until deleted)",
    )
    p.add_argument(
        "--deployment",
        metavar="IMAGE",
        default="",
        help="print instead the manifests that run KWOK in the cluster with these Stages: a Deployment of "
        "IMAGE (KWOK's own image, or make kind-images' offline one), its ServiceAccount and ClusterRole, "
        "the Stages' ConfigMap (kubectl apply -f -; kubectl delete -f - removes them)",
    )
    p.add_argument("--namespace", default="kube-system", help="with --deployment: where KWOK runs")


def run_fleet_stages(args: Any) -> int:
    import sys

    from dra_fake.fleet.kwok import manifests
    from dra_fake.fleet.workload import WorkloadError, dump_documents, load_workload, stages_yaml

    try:
        profile = load_workload(args.workload)
    except WorkloadError as err:
        print(f"dra-fake fleet-stages: error: {err}", file=sys.stderr)
        return 2
    if args.deployment:
        sys.stdout.write(dump_documents(manifests(profile, args.deployment, args.namespace)))
    else:
        sys.stdout.write(stages_yaml(profile))
    return 0
