"""The chart's values on the local cluster (e2e/localcluster/values.py): layers, checks, and the
plugin command lines, compared with what `helm template charts/dra-fake` renders for the same values.

The comparisons need helm from hack/install-tools.sh; without it they are skipped, unless
DRA_FAKE_REQUIRE_TOOLS=1 (then they fail), as tests/test_chart.py.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.cli import build_parser
from e2e.kindcluster.cluster import user_helm_args
from e2e.localcluster import values as chart_values
from e2e.localcluster.cluster import LocalCluster
from e2e.localcluster.values import ValuesError, check, effective, user_values

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
# As the local cluster's server (e2e/cluster/K8S_VERSION) answers.
KUBE = ["--kube-version", (REPO / "e2e" / "cluster" / "K8S_VERSION").read_text().strip()]
KUBE += ["--api-versions", "resource.k8s.io/v1/DeviceClass"]
# Every value CHART_ENV follows, away from its default; pools as in docs/chart.md.
KNOBS: dict[str, Any] = {
    "featureGates": {"MPSSupport": True, "ConsumableShares": True},
    "consumableShares": "memory",
    "deviceNodes": "never",
    "deviceOrder": "shuffled",
    "logLevel": "debug",
    "logFormat": "json",
    "nodeLabels": {"enabled": False, "migStrategy": "mixed"},
    "kubeletPlugin": {"cpuAffinity": "one"},
    "computeDomains": {"daemon": {"runAsUser": 1000, "runAsGroup": 2000}},
    "dcgmExporter": {"enabled": False},
    "gpuLending": {"enabled": True, "idleThreshold": 20, "idleFor": 30},
    "sharedMemoryView": "device",
    "inventory": {"profile": "a100-sxm4-40gb", "count": 4, "driverVersion": "570.1.2"},
    "nodePools": [
        {
            "name": "mig",
            "nodeSelector": {"dra-fake.dev/gpu-pool": "mig"},
            "inventory": {"count": 2, "mig": "static", "migDevices": [{"profile": "3g.20gb", "start": 0}]},
        },
        {
            "name": "l40s",
            "nodeSelector": {"dra-fake.dev/gpu-pool": "l40s"},
            "inventory": {"config": {"gpus": [{"profile": "l40s", "count": 1}]}},
        },
    ],
}

# Which pool a node is in the local cluster asks its Node (e2e/test_local_values.py does).
NO_POOLS = {key: value for key, value in KNOBS.items() if key != "nodePools"}


def write(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


# ---- layers and checks ---------------------------------------------------------------------------


def test_a_users_gates_are_added_to_the_test_beds_and_win_on_the_same_gate(tmp_path: Path) -> None:
    file = write(tmp_path, {"featureGates": {"MPSSupport": True, "TimeSlicingSettings": True}})
    user = user_values(file, "TimeSlicingSettings=false,DynamicMIG=false")
    assert effective(user)["featureGates"] == {
        "NVMLDeviceHealthCheck": True,  # the test bed's, kept
        "MPSSupport": True,  # the file's
        "TimeSlicingSettings": False,  # FEATURE_GATES wins over the file
        "DynamicMIG": False,
    }
    assert effective(user_values(None, "NVMLDeviceHealthCheck=false"))["featureGates"] == {
        "NVMLDeviceHealthCheck": False  # the test bed's default can be turned off
    }


def test_values_merge_as_helm_merges_them() -> None:
    base = {"a": {"x": 1, "y": 2}, "l": [1, 2], "gone": 1}
    assert chart_values.coalesce(base, {"a": {"y": 3}, "l": [3], "gone": None}) == {
        "a": {"x": 1, "y": 3},
        "l": [3],
    }
    assert base == {"a": {"x": 1, "y": 2}, "l": [1, 2], "gone": 1}  # unchanged


@pytest.mark.parametrize(
    ("values", "gates", "message"),
    [
        (
            {},
            "Bogus=true",
            "the plugins refuse featureGates Bogus=true,NVMLDeviceHealthCheck=true: --feature-gates: "
            "unknown feature gate 'Bogus' (known: TimeSlicingSettings, MPSSupport, DynamicMIG, "
            "NVMLDeviceHealthCheck, ConsumableShares, IMEXDaemonsWithDNSNames, ComputeDomainCliques, "
            "CrashOnNVLinkFabricErrors)",
        ),
        ({"featureGates": {"Bogus": True}}, "", "unknown feature gate 'Bogus'"),
        (
            {},
            "MPSSupport=yes",
            "FEATURE_GATES: --feature-gates: MPSSupport='yes': the value must be true or false",
        ),
        ({"featureGates": {"MPSSupport": "yes"}}, "", "featureGates.MPSSupport: 'yes' is not true or false"),
        (
            {},
            "DynamicMIG=true",
            "mutually exclusive with NVMLDeviceHealthCheck (NVMLDeviceHealthCheck=true is the "
            "test bed's default; NVMLDeviceHealthCheck=false turns it off)",
        ),
        ({"deviceOrder": "random"}, "", "deviceOrder: 'random' is not one of ['sorted', 'shuffled']"),
        ({"nodePools": [{"name": "a"}]}, "", "nodePools[0]: 'nodeSelector' is a required property"),
        (
            {"kubeletPlugin": {"cpuAffinity": 2}},
            "",
            "kubeletPlugin.cpuAffinity: 2 is not one of ['one', 'inherit']",
        ),
        (
            {"mode": "device-plugin"},
            "",
            "mode: not on the local cluster (device-plugin: the harness nodes have no device manager",
        ),
        (
            {"nodePools": [{"name": "a", "nodeSelector": {"a": "b"}, "mode": "device-plugin"}]},
            "",
            "nodePools[0].mode: not on the local cluster",
        ),
        ({"driverNames": {"gpu": "gpu.example.com"}}, "", "driverNames: not on the local cluster"),
    ],
)
def test_bad_values_fail_naming_the_value(
    tmp_path: Path, values: dict[str, Any], gates: str, message: str
) -> None:
    with pytest.raises(ValuesError) as err:
        check(user_values(write(tmp_path, values), gates))
    assert message in str(err.value)


def test_a_values_file_that_is_no_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n")
    with pytest.raises(ValuesError, match=r"list.yaml: a mapping of the chart's values, not list"):
        user_values(path)


def test_values_the_local_cluster_does_not_use_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="localcluster"):
        check(
            {
                "image": {"tag": "v9"},
                "logFormat": "json",
                "kubeletPlugin": {"resources": {"limits": {"cpu": 1}}},
            }
        )
    assert (
        "values not used by the local cluster (kind only): image.tag, kubeletPlugin.resources.limits.cpu"
        in (caplog.text)
    )


# ---- the command lines ---------------------------------------------------------------------------


def test_the_plugin_command_lines_carry_the_values(tmp_path: Path) -> None:
    """The flags the local cluster passes are the plugins' own: parsed by their parser, they set
    what the chart's env would."""
    cluster = LocalCluster(
        tmp_path / "root", values=user_values(write(tmp_path, NO_POOLS), "TimeSlicingSettings=true")
    )
    gpu = build_parser().parse_args(cluster.plugin_args("node-1")[3:])
    assert gpu.feature_gates == (
        "ConsumableShares=true,MPSSupport=true,NVMLDeviceHealthCheck=true,TimeSlicingSettings=true"
    )
    assert gpu.consumable_shares == "memory"
    assert (gpu.device_nodes, gpu.device_order, gpu.log_level, gpu.log_format) == (
        "never",
        "shuffled",
        "debug",
        "json",
    )
    assert (gpu.node_labels, gpu.mig_strategy, gpu.cpu_affinity, gpu.dcgm_exporter_port) == (
        "false",
        "mixed",
        "one",
        -1,
    )
    assert yaml.safe_load(Path(gpu.config).read_text()) == {
        "gpus": [{"profile": "a100-sxm4-40gb", "count": 4}],
        "driverVersion": "570.1.2",
    }
    cd = build_parser().parse_args(cluster.cd_plugin_args("node-1")[3:])
    assert cd.feature_gates == gpu.feature_gates and cd.config == gpu.config
    assert (cd.daemon_run_as_user, cd.daemon_run_as_group, cd.imex_clique_id) == (
        1000,
        2000,
        chart_values.CD_CLIQUE_ID,
    )
    assert (cd.cpu_affinity, cd.log_level, cd.log_format) == ("one", "debug", "json")


def test_a_nodes_own_values_go_to_its_plugins_only(tmp_path: Path) -> None:
    """set_node_values: one node's GPU plugin gets more values (a module's shared GPUs or lending),
    the other nodes' keep theirs, and {} takes them back."""
    cluster = LocalCluster(tmp_path / "root", nodes=2)
    before = cluster.plugin_args("node-1")
    cluster.set_node_values(
        "node-1", {"featureGates": {"ConsumableShares": True}, "consumableShares": "memory"}
    )
    shared = build_parser().parse_args(cluster.plugin_args("node-1")[3:])
    assert (shared.consumable_shares, shared.feature_gates) == (
        "memory",
        "ConsumableShares=true,NVMLDeviceHealthCheck=true",
    )
    other = build_parser().parse_args(cluster.plugin_args("node-2")[3:])
    assert (other.consumable_shares, other.feature_gates) == ("disabled", "NVMLDeviceHealthCheck=true")
    with pytest.raises(ValuesError, match="consumableShares"):
        cluster.set_node_values("node-1", {"consumableShares": "all"})
    cluster.set_node_values("node-1", {})
    assert cluster.plugin_args("node-1") == before


def test_without_values_the_plugins_run_as_before(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "root")
    gpu = build_parser().parse_args(cluster.plugin_args("node-1")[3:])
    assert gpu.feature_gates == "NVMLDeviceHealthCheck=true" and gpu.node_labels == "true"
    assert gpu.dcgm_exporter_port > 0
    assert yaml.safe_load(Path(gpu.config).read_text()) == {
        "gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]
    }


def test_a_flag_the_plugin_lacks_is_an_error() -> None:
    with pytest.raises(
        ValuesError, match="dra-fake compute-domain-kubelet-plugin has no flag for DEVICE_ORDER"
    ):
        chart_values.as_flags("compute-domain-kubelet-plugin", {"DEVICE_ORDER": "sorted"})


@pytest.mark.parametrize(
    ("labels", "pool", "document"),
    [
        (
            {"dra-fake.dev/gpu-pool": "mig"},
            "mig",
            {
                "gpus": [
                    {
                        "profile": "a100-sxm4-40gb",
                        "count": 2,
                        "mig": "static",
                        "migDevices": [{"profile": "3g.20gb", "start": 0}],
                    }
                ],
                "driverVersion": "570.1.2",
            },
        ),
        ({"dra-fake.dev/gpu-pool": "l40s"}, "l40s", {"gpus": [{"profile": "l40s", "count": 1}]}),
        ({}, "", {"gpus": [{"profile": "a100-sxm4-40gb", "count": 4}], "driverVersion": "570.1.2"}),
    ],
)
def test_a_node_gets_the_inventory_of_its_pool(
    labels: dict[str, str], pool: str, document: dict[str, Any]
) -> None:
    assert chart_values.node_inventory(check(KNOBS), labels) == (pool, document)


# ---- the chart renders the same ------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    if not HELM.exists():
        if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
            raise RuntimeError(f"{HELM} missing: run hack/install-tools.sh")
        pytest.skip(f"needs {HELM}: run hack/install-tools.sh (make chart-check does)")
    return HELM


GATES = "TimeSlicingSettings=true,MPSSupport=false"


def rendered(helm: Path, tmp_path: Path, user: dict[str, Any], gates: str) -> list[dict[str, Any]]:
    """What the chart renders as `make kind-up VALUES=... FEATURE_GATES=...` installs it: the test
    bed's values, then the user's file and gates, merged by Helm itself."""
    test_bed = write(tmp_path, chart_values.TEST_BED_VALUES, "test-bed.yaml")
    users = user_helm_args(write(tmp_path, user, "user.yaml"), gates)
    out = subprocess.run(
        [
            str(helm),
            "template",
            "r",
            str(REPO / "charts" / "dra-fake"),
            "-n",
            "dra-fake",
            *KUBE,
            "-f",
            str(test_bed),
            *users,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize(
    "user",
    [{}, KNOBS, {**KNOBS, "computeDomains": {"imexCliqueID": ""}}],
    ids=["test-bed", "knobs", "no-clique"],
)
def test_the_plugins_get_what_the_chart_gives_its_containers(
    helm: Path, tmp_path: Path, user: dict[str, Any]
) -> None:
    """Every env of the chart's plugin containers is either what the local cluster renders from the
    same file and gates (CHART_ENV), or one it sets itself (LOCAL_ENV): a new one in the template
    fails here until it is one or the other."""
    values = check(user_values(write(tmp_path, user), GATES))
    for ds in (d for d in rendered(helm, tmp_path, user, GATES) if d["kind"] == "DaemonSet"):
        for container in ds["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container["env"]}
            ours = {name: text for name, text in env.items() if name not in chart_values.LOCAL_ENV}
            assert ours == chart_values.plugin_env(values, container["name"]), container["name"]
            assert "TimeSlicingSettings=true" in ours["FEATURE_GATES"]  # the gates took that path


def test_the_nodes_get_the_inventories_of_the_charts_config_maps(helm: Path, tmp_path: Path) -> None:
    maps = {
        d["metadata"]["name"]: yaml.safe_load(d["data"]["inventory.yaml"])
        for d in rendered(helm, tmp_path, KNOBS, "")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-inventory")
    }
    values = check(KNOBS)
    ours = {
        f"r-dra-fake{'-' + pool if pool else ''}-inventory": document
        for pool, document in (
            chart_values.node_inventory(values, {"dra-fake.dev/gpu-pool": name})
            for name in ("mig", "l40s", "none")
        )
    }
    assert maps == ours


def test_kind_gets_the_users_values_after_its_own() -> None:
    assert user_helm_args(Path("my.yaml"), "A=true,B=false") == [
        "--values",
        "my.yaml",
        "--set",
        "featureGates.A=true",
        "--set",
        "featureGates.B=false",
    ]
    assert user_helm_args(None, "") == []
