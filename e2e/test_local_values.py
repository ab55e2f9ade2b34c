"""`make cluster-up VALUES=... FEATURE_GATES=...` (issue 45): the chart's values reach the plugins.

A one-node local cluster of this module's own, started as `make cluster-up` starts it, with a values
file (a gate, a plugin setting, a node pool) and FEATURE_GATES (another gate). Each path is checked
by what the plugins then do: a sharing strategy runs only with its gate (without it the claim fails,
e2e/test_prepare.py's gate-off case), both plugins show their gates in dra_fake_feature_enabled, log
in the format asked for, and the node gets its pool's GPUs. How values become command lines is
compared with the chart in tests/test_local_values.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harnessbed import HarnessBed
from e2e.kube import Kube, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.workloads import claim_with_config, pod_for_claim

REPO = Path(__file__).resolve().parents[1]
NODE = "node-1"
VALUES = {
    "featureGates": {"MPSSupport": True},
    "logFormat": "json",
    "nodePools": [
        {
            "name": "small",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "inventory": {"profile": "l40s", "count": 2},
        }
    ],
}
FEATURE_GATES = "TimeSlicingSettings=true"

pytestmark = pytest.mark.needs(
    "harness",
    reason="make cluster-up's own path from chart values to the local cluster's plugin command lines "
    "(on kind Helm renders the values: e2e/test_sharing.py's and e2e/test_lending.py's upgrades)",
)


def cluster_up(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """What `make cluster-up NODES=1 VALUES=... FEATURE_GATES=...` runs."""
    return subprocess.run(
        [sys.executable, "-m", "e2e.localcluster", "--root", str(root), "up", "--nodes", "1", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """This module's cluster (also the one conftest's components_alive watches here)."""
    root = Path(str(Path(os.environ.get("LOCAL_CLUSTER_DIR", DEFAULT_ROOT)).resolve()) + "-values")
    if LocalCluster(root).is_up():
        LocalCluster(root).down()
    values = tmp_path_factory.mktemp("values") / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    started = cluster_up(root, "--values", str(values), "--feature-gates", FEATURE_GATES)
    cluster = LocalCluster(root)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def kube(local_cluster: LocalCluster) -> Kube:
    return Kube(local_cluster.kubeconfig)


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = kube.namespace("values")
    yield name
    kube.delete_namespace(name, wait=True)


def feature_enabled(cluster: LocalCluster, port_name: str) -> dict[str, float]:
    """dra_fake_feature_enabled of a plugin's /metrics, by gate."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{cluster.state.ports[port_name]}/metrics", timeout=10
    ) as resp:
        lines = resp.read().decode().splitlines()
    prefix = 'dra_fake_feature_enabled{name="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith(prefix)
    }


def run_shared(kube: Kube, bed: HarnessBed, ns: str, strategy: str) -> dict[str, str]:
    """A pod whose claim asks for the sharing strategy, Running; its container's environment."""
    config = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": strategy},
    }
    kube.apply_yaml(claim_with_config("shared", config), ns)
    kube.create(pod_for_claim("shared", "shared"), ns)
    kube.wait_running(ns, "shared")
    return bed.container(ns, "shared").env()


@pytest.mark.parametrize(
    ("strategy", "gate"),
    [("TimeSlicing", "TimeSlicingSettings"), ("MPS", "MPSSupport")],
    ids=["from-FEATURE_GATES", "from-the-values-file"],
)
def test_a_gate_reaches_both_plugins(
    local_cluster: LocalCluster, kube: Kube, ns: str, strategy: str, gate: str
) -> None:
    env = run_shared(kube, HarnessBed(kube, local_cluster), ns, strategy)
    assert [v for k, v in env.items() if k.endswith("_SHARING_STRATEGY")] == [strategy], env
    for plugin in (f"metrics-{NODE}", f"cd-metrics-{NODE}"):
        gates = feature_enabled(local_cluster, plugin)
        # the test bed's gate is kept beside the user's
        assert (gates[gate], gates["NVMLDeviceHealthCheck"], gates["DynamicMIG"]) == (1, 1, 0), plugin


def test_a_plugin_setting_of_the_values_file_reaches_both_plugins(local_cluster: LocalCluster) -> None:
    """logFormat: json, as the chart's LOG_FORMAT: every line both plugins wrote is a JSON record."""
    for name in (f"gpu-plugin-{NODE}", f"cd-plugin-{NODE}"):
        lines = [line for line in local_cluster.process(name).tail(10_000).splitlines() if line]
        records = [json.loads(line) for line in lines]
        assert records and all(isinstance(r, dict) and "msg" in r for r in records), name


def test_a_node_pool_of_the_values_file_gives_the_node_its_gpus(kube: Kube) -> None:
    def devices() -> list[dict[str, Any]] | None:
        found = [d for s in kube.slices(node=NODE) for d in s["spec"]["devices"]]
        return found or None

    names = {d["attributes"]["productName"]["string"] for d in poll(f"ResourceSlices of {NODE}", devices, 30)}
    assert (len(devices() or []), names) == (2, {"NVIDIA L40S"})


def test_an_unknown_gate_fails_cluster_up_with_the_plugins_error(tmp_path: Path) -> None:
    failed = cluster_up(tmp_path / "root", "--feature-gates", "Bogus=true")
    assert failed.returncode == 1
    assert "--feature-gates: unknown feature gate 'Bogus' (known: TimeSlicingSettings" in failed.stderr
    assert not (tmp_path / "root" / "state.json").exists(), "nothing was started"
