"""Publishing: plugin start -> all slices visible in the API server, -> registration socket
answering GetInfo, -> registered by the kubelet (the dra-kubelet harness: the kubelet's own
plugin manager); plus the plugin's RSS at rest."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client

from bench.common import CONFIGS, BenchError, cluster_api, rss_bytes, spread
from bench.driver import Driver, pool_complete
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regrpc
from e2e.localcluster import LocalCluster

REFERENCE_GPUS = 8  # the reference driver's --num-devices (ours: the config's GPUs)
REST_SECONDS = 5.0  # "at rest": this long after the slices are visible


def _get_info(registrar: Path) -> bool:
    socks = list(registrar.glob("*-reg.sock"))
    if not socks:
        return False
    with grpc.insecure_channel(f"unix://{socks[0]}") as channel:
        regrpc.RegistrationStub(channel).GetInfo(regpb.InfoRequest(), timeout=1)  # type: ignore[no-untyped-call]
    return True


def measure(
    cluster: LocalCluster,
    kind: str,
    node: str,
    config: Path | None,
    work: Path,
    rest: float = REST_SECONDS,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    api = cluster_api(cluster)
    custom = client.CustomObjectsApi(api)
    d = Driver(cluster, kind, node, work, env=env)
    want, devices = d.pool_shape(config, REFERENCE_GPUS)
    d.delete_slices(api, custom)  # every start publishes from nothing
    # The harness (kubelet plugin manager) watches <node dir>/plugins_registry.
    cluster.start_harness(node)
    harness_dir = cluster.node_dir(node)
    d.dir = harness_dir  # sockets where the harness looks
    try:
        t0 = d.start(config, REFERENCE_GPUS)
        timings: dict[str, float] = {}
        deadline = time.monotonic() + 180
        while len(timings) < (3 if kind == "ours" else 2):
            d.check_alive()
            now = time.monotonic()
            if now > deadline:
                raise BenchError(f"{kind} on {node}: only {sorted(timings)} after 180s")
            if "registration_socket_s" not in timings:
                try:
                    if _get_info(d.registrar):
                        timings["registration_socket_s"] = time.monotonic() - t0
                except grpc.RpcError:
                    pass
            if "all_slices_visible_s" not in timings and pool_complete(d.slices(custom), want):
                timings["all_slices_visible_s"] = time.monotonic() - t0
            if kind == "ours" and "registered_with_kubelet_s" not in timings:
                assert d.proc is not None
                if (
                    "kubelet registered the plugin"
                    in Path(d.proc.log).read_text(errors="replace").split(f"starting bench-{node}")[-1]
                ):
                    timings["registered_with_kubelet_s"] = time.monotonic() - t0
            time.sleep(0.01)
        time.sleep(rest)  # the plugin settles; then its RSS "at rest"
        assert d.proc is not None
        rss = rss_bytes(d.proc.pid)
    finally:
        d.stop()
        cluster.stop_harness(node)
    return {
        "slices": want,
        "devices": devices,
        **{k: round(v, 3) for k, v in timings.items()},
        "rss_at_rest_mib": round(rss / 2**20, 1),
    }


CASES = {
    "ours_8_full_gpus": ("ours", "pub-full", CONFIGS / "h100x8.yaml"),
    "ours_8_gpus_dynamic_mig": ("ours", "pub-mig", CONFIGS / "h100x8-dynamic-mig.yaml"),
    "reference_8_gpus": ("ref", "pub-ref", None),
}


def run(cluster: LocalCluster, work: Path, repeat: int = 3, rest: float = REST_SECONDS) -> dict[str, Any]:
    """Each plugin started `repeat` times (the plugins alternating): every start's figures, and
    their median and spread."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    for _ in range(repeat):
        for name, (kind, node, config) in CASES.items():
            runs[name].append(measure(cluster, kind, node, config, work, rest))
    return {name: {"repetitions": r, **spread(r)} for name, r in runs.items()}
