"""A local-cluster node's GPU plugin started with extra feature gates, flags or another inventory.

For what chart values cannot say: another inventory file for one node (the kill soak
e2e/soak.py) and the sharing demo's flags. A test that needs other chart values on a
node uses TestBed.plugin_values instead (e2e/testbed.py), which kind runs too. The process keeps
the cluster's name for it (`gpu-plugin-<node>`), so LocalCluster.stop_plugin and start_plugin
still work on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from e2e.localcluster.cluster import CHECKED_SPECS, LocalCluster
from e2e.localcluster.controlplane import REPO
from e2e.localcluster.processes import Process, spawn, wait_for

GATES_FLAG = "--feature-gates="
# What a node with shared GPUs needs (docs/sharing-design.md#11-switches-nvidias-names);
# TimeSlicingSettings for the time slice shares have to agree on.
SHARES_GATES = ("ConsumableShares=true", "TimeSlicingSettings=true")


def gpu_plugin_args(
    cluster: LocalCluster,
    node: str,
    gates: Sequence[str] = (),
    flags: Sequence[str] = (),
    config: Path | None = None,
) -> list[str]:
    """The cluster's argv for the node's GPU plugin with `gates` added to its feature gates,
    `flags` appended and, if given, `config` as its inventory."""
    args = []
    merged = list(gates)
    for arg in cluster.plugin_args(node):
        if arg.startswith(GATES_FLAG):
            merged = [g for g in arg.removeprefix(GATES_FLAG).split(",") if g] + merged
        elif config is None or not arg.startswith("--config="):
            args.append(arg)
    if merged:
        args.append(GATES_FLAG + ",".join(merged))
    if config is not None:
        args.append(f"--config={config}")
    return args + list(flags)


def start_gpu_plugin(
    cluster: LocalCluster,
    node: str,
    gates: Sequence[str] = (),
    flags: Sequence[str] = (),
    config: Path | None = None,
    wait: bool = True,
) -> Process:
    """Start the node's GPU plugin (stopped before) with these extras; `wait`: until it serves."""
    args = gpu_plugin_args(cluster, node, gates, flags, config)
    proc = cluster._track(spawn(f"gpu-plugin-{node}", args, cluster.logs, env=CHECKED_SPECS, cwd=REPO))
    if wait:
        wait_for(
            f"GPU plugin on {node} registered and publishing",
            lambda: cluster.plugin_ready(node),
            120,
            every=0.5,
            alive=proc.check_alive,
        )
    return proc
