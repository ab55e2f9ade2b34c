"""Consumable shares (NVIDIA's ConsumableShares): the setting and its start-up errors, the slice
shape, the inventory key, and the start-up refusal on servers that cannot honour it
(dra_fake.gpu.shares, sharesgate, inventory). Prepare and unprepare per share:
tests/test_shares_prepare.py; slice goldens: tests/test_slices.py (`shares-*`); the crash case:
tests/test_prepare_crash.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import GIB

from dra_fake.cli import build_parser
from dra_fake.core import fieldgate
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.gpu import sharesgate
from dra_fake.gpu.inventory import InventoryError, SharesSetting, build_inventory, parse_config
from dra_fake.gpu.plugin import run_gpu_plugin
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.shares import SharesMode, SharesSettingError, node_mode, parse_mode, shared_capacities
from tests.sharesnode import DRIVER, MIB

# ---- the setting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        ("", None),
        ("disabled", None),
        (" disabled ", None),
        ("memory", SharesMode("memory")),
        ("unlimited", SharesMode("unlimited")),
        ("4", SharesMode("count", 4)),
        ("+4", SharesMode("count", 4)),  # Go's Atoi takes a sign
        (7, SharesMode("count", 7)),  # a YAML number in the inventory
    ],
)
def test_setting_values_as_nvidias(raw: str | int, mode: SharesMode | None) -> None:
    assert parse_mode(raw) == mode


@pytest.mark.parametrize("raw", ["0", "-1", "Memory", "4.0", "\uff11", "99999999999999999999", "memory,4"])
def test_a_bad_setting_is_refused_with_nvidias_text(raw: str) -> None:
    with pytest.raises(SharesSettingError) as err:
        parse_mode(raw)
    assert str(err.value) == (
        f'invalid value for --consumable-shares: "{raw}" '
        "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"
    )


def test_the_flag_needs_the_feature_gate() -> None:
    assert node_mode("disabled", gate_enabled=False) is None
    assert node_mode("memory", gate_enabled=True) == SharesMode("memory")
    with pytest.raises(SharesSettingError) as err:
        node_mode("memory", gate_enabled=False)
    assert str(err.value) == "--consumable-shares requires feature gate ConsumableShares to be enabled"


def plugin_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    args = build_parser().parse_args(
        ["gpu-kubelet-plugin", "--node-name=n", f"--kubeconfig={tmp_path / 'none'}", *flags]
    )
    code = run_gpu_plugin(args)
    return code, capsys.readouterr().err


def test_the_plugin_exits_1_with_nvidias_start_up_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = plugin_exit(tmp_path, capsys, "--consumable-shares=memory")
    assert code == 1 and err.endswith(
        "error: --consumable-shares requires feature gate ConsumableShares to be enabled\n"
    )
    code, err = plugin_exit(
        tmp_path, capsys, "--consumable-shares=lots", "--feature-gates=ConsumableShares=true"
    )
    assert code == 1 and 'invalid value for --consumable-shares: "lots"' in err


def test_the_flag_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUMABLE_SHARES", "unlimited")
    args = build_parser().parse_args(["gpu-kubelet-plugin", "--node-name=n"])
    assert args.consumable_shares == "unlimited"
    monkeypatch.delenv("CONSUMABLE_SHARES")
    assert build_parser().parse_args(["gpu-kubelet-plugin", "--node-name=n"]).consumable_shares == "disabled"


# ---- the slice -------------------------------------------------------------------------------------

SIXTEEN_GIB = 16 * GIB


def policy(default: str, minimum: str, maximum: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


def test_memory_capacity_per_mode_as_nvidias_tests_expect() -> None:
    """NVIDIA's consumable_shares_test.go: a 16Gi device per mode."""
    memory = shared_capacities({"memory": SIXTEEN_GIB}, SharesMode("memory"))
    assert memory == {"memory": {"value": "16Gi", "requestPolicy": policy("16Gi", "1Mi", "16Gi", "1Mi")}}
    unlimited = shared_capacities({"memory": SIXTEEN_GIB}, SharesMode("unlimited"))
    assert unlimited == {"memory": {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")}}
    four = shared_capacities({"memory": SIXTEEN_GIB}, SharesMode("count", 4))
    assert four == {
        "memory": {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")},
        "shares": {"value": "4", "requestPolicy": policy("1", "1", "4", "1")},
    }


def test_memory_is_rounded_down_to_whole_mib_and_other_capacities_kept() -> None:
    capacity = shared_capacities(
        {"memory": SIXTEEN_GIB + MIB - 1, "multiprocessors": 16}, SharesMode("memory")
    )
    assert capacity["memory"]["value"] == "16Gi"
    assert capacity["multiprocessors"] == {"value": "16"}  # no policy: a claim without an amount takes all


def test_a_device_without_memory_gets_no_policy_and_no_shares() -> None:
    assert shared_capacities({"multiprocessors": 16}, SharesMode("count", 4)) == {
        "multiprocessors": {"value": "16"}
    }


def test_a_thousand_shares_are_a_decimal_quantity() -> None:
    """NVIDIA writes N as a DecimalSI quantity: the server keeps `1k`, never `1000` or binary."""
    assert shared_capacities({"memory": GIB}, SharesMode("count", 1000))["shares"]["value"] == "1k"
    assert shared_capacities({"memory": GIB}, SharesMode("count", 1024))["shares"]["value"] == "1024"


# ---- the inventory ---------------------------------------------------------------------------------


def inventory(groups: list[dict[str, Any]], setting: SharesSetting | None = None) -> Any:
    config = parse_config({"gpus": groups}, "node.yaml")
    return build_inventory(
        config, "n", load_profiles(), source="node.yaml", shares=setting or SharesSetting()
    )


def test_a_group_key_overrides_the_flag_for_its_gpus() -> None:
    built = inventory(
        [
            {"profile": "h100-sxm5-80gb"},
            {"profile": "h100-sxm5-80gb", "consumableShares": "disabled"},
            {"profile": "h100-sxm5-80gb", "consumableShares": 3},
        ],
        SharesSetting(SharesMode("memory"), gate=True),
    )
    assert [d.shares for d in built.devices.values()] == [SharesMode("memory"), None, SharesMode("count", 3)]
    assert [g.shares for g in built.gpus] == [SharesMode("memory"), None, SharesMode("count", 3)]


def test_a_bad_group_key_names_the_field() -> None:
    with pytest.raises(InventoryError) as err:
        inventory([{"profile": "h100-sxm5-80gb"}, {"profile": "h100-sxm5-80gb", "consumableShares": "all"}])
    assert str(err.value) == (
        'node.yaml: gpus.1.consumableShares: invalid value "all" '
        "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"
    )


def test_a_group_key_needs_the_feature_gate() -> None:
    groups = [{"profile": "h100-sxm5-80gb", "consumableShares": "memory"}]
    with pytest.raises(
        InventoryError, match=r"^node.yaml: gpus.0.consumableShares: requires feature gate ConsumableShares"
    ):
        inventory(groups, SharesSetting(None, gate=False))
    assert inventory(
        [{"profile": "h100-sxm5-80gb", "consumableShares": "disabled"}], SharesSetting(gate=False)
    )


# ---- the server: refused before publishing -------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "git", "expected"),
    [
        (
            (1, 33),
            "v1.33.4",
            "--consumable-shares=memory needs consumable capacity (resource.k8s.io fields added in "
            "Kubernetes 1.34, feature gate DRAConsumableCapacity); the API server is v1.33.4",
        ),
        (
            (1, 34),
            "v1.34.9",
            "--consumable-shares=memory: the Kubernetes 1.34 scheduler checks capacity on the wrong device "
            "(kubernetes/kubernetes#133705, fixed in 1.35.0), so one full shared GPU blocks every device of "
            "its node; use Kubernetes 1.35 or later (the API server is v1.34.9)",
        ),
        ((1, 35), "v1.35.0", None),
    ],
)
def test_versions_that_cannot_serve_shares_are_refused(
    version: tuple[int, int], git: str, expected: str | None
) -> None:
    assert sharesgate.GATE.version_refusal("--consumable-shares=memory", version, git) == expected


@pytest.mark.parametrize("api", ["v1", "v1beta2", "v1beta1"])
def test_the_probe_slice_and_what_a_server_without_the_gate_returns(api: str) -> None:
    manifest = sharesgate.GATE.probe_manifest(ServerInfo((1, 35), (api,)), "gpu.nvidia.com", "node-a")  # type: ignore[arg-type]
    assert manifest["apiVersion"] == f"resource.k8s.io/{api}" and manifest["spec"]["nodeName"] == "node-a"
    assert sharesgate.GATE.fields_kept(manifest)  # what a server with the gate returns
    stripped = yaml.safe_load(yaml.safe_dump(manifest))
    device = stripped["spec"]["devices"][0]
    fields = device["basic"] if api == "v1beta1" else device
    del fields["allowMultipleAllocations"]  # what a server with DRAConsumableCapacity off does
    del fields["capacity"]["memory"]["requestPolicy"]
    assert not sharesgate.GATE.fields_kept(stripped)


def test_a_server_dropping_the_fields_is_refused_after_the_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []

    def dry_run(api: Any, manifest: dict[str, Any]) -> dict[str, Any]:
        sent.append(manifest)
        stored: dict[str, Any] = yaml.safe_load(yaml.safe_dump(manifest))
        del stored["spec"]["devices"][0]["allowMultipleAllocations"]
        return stored

    def refusal() -> str | None:
        server = ServerInfo((1, 35), ("v1",))
        api: Any = None  # the dry run is replaced
        return sharesgate.GATE.server_refusal(
            "--consumable-shares=4", api, server, DRIVER, "n", threading.Event()
        )

    monkeypatch.setattr(fieldgate, "dry_run_create", dry_run)
    assert refusal() == (
        "--consumable-shares=4: the API server dropped allowMultipleAllocations from a ResourceSlice: "
        "turn on the feature gate DRAConsumableCapacity on kube-apiserver and kube-scheduler (alpha and "
        "off in Kubernetes 1.34 and 1.35, on by default from 1.36)"
    )
    assert len(sent) == 1
    monkeypatch.setattr(fieldgate, "dry_run_create", lambda api, manifest: manifest)
    assert refusal() is None
