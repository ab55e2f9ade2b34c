"""Consumable shares (NVIDIA's ConsumableShares): the setting and its start-up errors, the slice
shape, the inventory key, the start-up refusal on servers that cannot honour it, and prepare and
unprepare per share (dra_fake.gpu.shares, sharesgate, inventory, state). Slice goldens:
tests/test_slices.py (`shares-*`); the crash case: tests/test_prepare.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import GIB, NODE, P1_0, make_claim, make_state, opaque, result

from dra_fake.cli import build_parser
from dra_fake.core import fieldgate
from dra_fake.core.claims import ClaimError, PermanentClaimError, parse_claim
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.gpu import sharesgate
from dra_fake.gpu.claimdata import GpuClaimData, ShareRecord
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.inventory import InventoryError, SharesSetting, build_inventory, parse_config
from dra_fake.gpu.plugin import run_gpu_plugin
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.shares import SharesMode, SharesSettingError, node_mode, parse_mode, shared_capacities
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.api import PreparedDevice

API = "resource.nvidia.com/v1beta1"
DRIVER = "gpu.nvidia.com"
KIND = "k8s.gpu.nvidia.com/claim"
UID1 = "1a111111-1111-1111-1111-111111111111"
UID2 = "b2222222-2222-2222-2222-222222222222"
UID3 = "c3333333-3333-3333-3333-333333333333"
SHARE1 = "0d6a5f0e-1111-4c3b-8d6e-000000000001"
SHARE2 = "0d6a5f0e-2222-4c3b-8d6e-000000000002"
SHARED_GPU = "gpu-4"  # crash_helper: a full GPU with consumable shares (memory)
SHARED_MIG = "gpu-5-mig-1g10gb-19-0"  # crash_helper: a dynamic MIG device with consumable shares
MIB = 1 << 20

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


# ---- prepare per share -----------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> DeviceState:
    return make_state(tmp_path)


def share(device: str, share_id: str, request: str = "gpu", **consumed: str) -> dict[str, Any]:
    return result(request, device, shareID=share_id, consumedCapacity=consumed or {"memory": "20Gi"})


def spec_of(state: DeviceState, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(state.cdi.path(uid).read_text())
    return spec


def device_env(state: DeviceState, uid: str, cdi_name: str) -> list[str]:
    [device] = [d for d in spec_of(state, uid)["devices"] if d["name"] == cdi_name]
    return list(device["containerEdits"]["env"])


def ts(interval: str | None) -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": "TimeSlicing"}
    if interval is not None:
        sharing["timeSlicingConfig"] = {"interval": interval}
    return opaque({"apiVersion": API, "kind": "GpuConfig", "sharing": sharing})


def test_consumed_capacity_is_read_from_the_allocation_result() -> None:
    claim = make_claim(UID1, [share(SHARED_GPU, SHARE1, memory="19074Mi", shares="1")])
    [parsed] = parse_claim(claim, "gpu.nvidia.com").results
    assert (parsed.share_id, dict(parsed.consumed_capacity)) == (SHARE1, {"memory": "19074Mi", "shares": "1"})
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": {"value": 1}}
    with pytest.raises(PermanentClaimError, match=r"results\[0\].consumedCapacity.memory is not a quantity"):
        parse_claim(claim, "gpu.nvidia.com")


def test_each_claims_share_is_its_own_cdi_device_named_as_nvidias(state: DeviceState) -> None:
    first = state.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1, memory="20Gi")]))
    second = state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2, memory="19074Mi")]))
    assert first == [
        PreparedDevice(("gpu",), NODE, SHARED_GPU, (f"{KIND}={UID1}-{SHARED_GPU}",), share_id=SHARE1)
    ]
    assert second[0].cdi_device_ids == (f"{KIND}={UID2}-{SHARED_GPU}",) and second[0].share_id == SHARE2
    env = device_env(state, UID2, f"{UID2}-{SHARED_GPU}")
    assert f"DRA_FAKE_GPU_4_SHARE_ID={SHARE2}" in env
    assert f"DRA_FAKE_GPU_4_SHARE_MEMORY_BYTES={19074 * MIB}" in env
    assert not any("SHARE_SHARES" in e for e in env)
    assert state.devices[SHARED_GPU].uuid and f"DRA_FAKE_GPU_4_UUID={state.devices[SHARED_GPU].uuid}" in env
    data = state.store.peek()
    assert data is not None
    entry = data.claims[UID2]
    assert entry.preparedDevices[0].shareID == SHARE2
    assert entry.driverData.shares == [
        ShareRecord(
            device=SHARED_GPU,
            shareID=SHARE2,
            config=entry.driverData.shares[0].config,
            consumedCapacity={"memory": "19074Mi"},
        )
    ]
    state.unprepare(UID1)  # one share goes, the other stays
    assert state.prepared_claims() == {UID2: "PrepareCompleted"} and state.cdi.claim_uids() == [UID2]


def test_two_shares_of_one_device_in_one_claim_carry_their_share_ids(state: DeviceState) -> None:
    """NVIDIA's names would repeat (the CDI library refuses that): ours append the share ID."""
    claim = make_claim(
        UID1, [share(SHARED_GPU, SHARE1, "a", shares="1"), share(SHARED_GPU, SHARE2, "b", shares="1")]
    )
    devices = state.prepare(claim)
    names = [f"{UID1}-{SHARED_GPU}-{SHARE1}", f"{UID1}-{SHARED_GPU}-{SHARE2}"]
    assert [d.cdi_device_ids for d in devices] == [(f"{KIND}={n}",) for n in names]
    assert [d["name"] for d in spec_of(state, UID1)["devices"]] == names
    assert "DRA_FAKE_GPU_4_SHARE_SHARES=1" in device_env(state, UID1, names[1])


def test_a_share_id_on_an_unshared_device_is_still_exclusive(state: DeviceState) -> None:
    """A device allocated as a share while the plugin ran with sharing on, prepared after it was
    turned off: held whole, as any device without sharing."""
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    with pytest.raises(
        ClaimError, match=f"requested device gpu-0 is already allocated to different claim {UID1}$"
    ):
        state.prepare(make_claim(UID2, [share("gpu-0", SHARE2)]))


def test_a_whole_holder_of_a_shared_device_blocks_shares(state: DeviceState) -> None:
    """An entry without a share of the device (prepared before it was shared) holds it whole."""
    state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2)]))
    data = state.store.load().data
    entry = data.claims[UID2]
    whole = [d.model_copy(update={"shareID": None}) for d in entry.preparedDevices]
    data.claims[UID2] = entry.model_copy(update={"driverData": GpuClaimData(), "preparedDevices": whole})
    state.store.save(data)
    with pytest.raises(
        ClaimError, match=f"requested device {SHARED_GPU} is already allocated to different claim {UID2}$"
    ):
        state.prepare(make_claim(UID3, [share(SHARED_GPU, SHARE1)]))


def failed(uid: str) -> str:
    return f"error preparing devices for claim default/claim:{uid}: "


def test_conflicting_time_slicing_on_a_shared_gpu_is_refused_with_nvidias_text(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1)], [ts("Long")]))
    with pytest.raises(ClaimError) as err:
        state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2)], [ts("Short")]))
    assert not isinstance(err.value, PermanentClaimError)  # NVIDIA's kubelet retries it too
    assert str(err.value) == (
        f"{failed(UID2)}unable to prepare claim {UID2}: requested device {SHARED_GPU} has conflicting "
        f"configuration with already prepared claim {UID1}"
    )
    assert state.prepared_claims() == {UID1: "PrepareCompleted"} and state.cdi.claim_uids() == [UID1]
    state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2)], [ts("Long")]))  # the same: accepted


def test_configs_are_compared_normalized(state: DeviceState) -> None:
    """As NVIDIA: TimeSlicing without timeSlicingConfig is TimeSlicing/Default, and so is no config
    at all with TimeSlicingSettings on."""
    state.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1)], [ts(None)]))
    state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2)], [ts("Default")]))
    state.prepare(make_claim(UID3, [share(SHARED_GPU, "s3")]))
    assert len(state.prepared_claims()) == 3


MPS = opaque({"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "MPS"}})
MPS_TEXT = (
    "prepare devices failed: error applying config: "
    "MPS sharing is not supported when consumable shares is enabled"
)


def test_mps_is_refused_node_wide_by_the_flag_and_per_device_by_the_inventory(tmp_path: Path) -> None:
    node_wide = make_state(tmp_path / "flag", consumable_shares=SharesMode("memory"))
    with pytest.raises(PermanentClaimError) as err:
        node_wide.prepare(make_claim(UID1, [result("gpu", "gpu-0")], [MPS]))  # not a shared device
    assert str(err.value) == f"{failed(UID1)}{MPS_TEXT}"
    per_device = make_state(tmp_path / "inventory")
    with pytest.raises(PermanentClaimError, match=MPS_TEXT):
        per_device.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1)], [MPS]))
    assert per_device.prepare(make_claim(UID2, [result("gpu", "gpu-0")], [MPS]))  # unshared: as before
    gate_off = make_state(tmp_path / "gate", gates=FeatureGates.of("TimeSlicingSettings"))
    with pytest.raises(PermanentClaimError, match='the "MPSSupport" feature gate is not enabled'):
        gate_off.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1)], [MPS]))  # the gate's text first


def test_the_time_slice_is_reset_when_its_last_share_goes(
    state: DeviceState, caplog: pytest.LogCaptureFixture
) -> None:
    state.prepare(make_claim(UID1, [share(SHARED_GPU, SHARE1)], [ts("Long")]))
    state.prepare(make_claim(UID2, [share(SHARED_GPU, SHARE2)], [ts("Long")]))
    caplog.set_level(logging.INFO, logger="dra_fake.gpu.state")
    state.unprepare(UID1)
    assert "time slice still in use by other claims, not reset" in caplog.text
    assert "interval=Default" not in caplog.text
    caplog.clear()
    state.unprepare(UID2)
    assert "time-slice interval reset" in caplog.text and "still in use" not in caplog.text


def test_a_second_share_of_a_dynamic_mig_device_uses_the_one_the_first_created(
    state: DeviceState, caplog: pytest.LogCaptureFixture
) -> None:
    state.prepare(make_claim(UID1, [share(SHARED_MIG, SHARE1, "mig", memory="5Gi")]))
    state.prepare(make_claim(UID2, [share(SHARED_MIG, SHARE2, "mig", memory="4Gi")]))
    first_uuid = mig_uuid(NODE, 5, P1_0, nonce=UID1)
    assert [m.uuid for m in state.dynamic_mig_devices()] == [first_uuid]
    env = device_env(state, UID2, f"{UID2}-{SHARED_MIG}")
    assert f"DRA_FAKE_GPU_5_MIG_1G10GB_19_0_UUID={first_uuid}" in env
    caplog.set_level(logging.INFO, logger="dra_fake.gpu.state")
    state.unprepare(UID1)  # the first holder goes: the device stays for the second
    assert [m.uuid for m in state.dynamic_mig_devices()] == [first_uuid]
    assert f"dynamic MIG device still in use by other claims, kept claim={UID1}" in caplog.text
    assert "dynamic MIG device destroyed" not in caplog.text
    state.prepare(make_claim(UID3, [share(SHARED_MIG, "s3", "mig")]))
    assert [m.uuid for m in state.dynamic_mig_devices()] == [first_uuid]
    state.unprepare(UID2)
    state.unprepare(UID3)
    assert state.dynamic_mig_devices() == []
    state.prepare(make_claim(UID2, [share(SHARED_MIG, SHARE2, "mig")]))  # created anew
    assert [m.uuid for m in state.dynamic_mig_devices()] == [mig_uuid(NODE, 5, P1_0, nonce=UID2)]


def test_shares_in_one_unprepare_batch_release_the_mig_device(state: DeviceState) -> None:
    """Two shares unprepared in one group-commit batch: each release counts the entries left."""
    state.prepare(make_claim(UID1, [share(SHARED_MIG, SHARE1, "mig")]))
    state.prepare(make_claim(UID2, [share(SHARED_MIG, SHARE2, "mig")]))
    released: list[str] = []
    original = state.release

    def release(data: Any, uid: str, entry: Any) -> None:
        released.append(uid)
        original(data, uid, entry)

    state.release = release  # type: ignore[method-assign,assignment]
    data = state.store.load().data
    from dra_fake.core.state import _Unprepare

    items = [_Unprepare(UID1), _Unprepare(UID2)]
    with state.locked():
        state._drop(data, items)
    assert released == [UID1, UID2] and state.dynamic_mig_devices() == []


def test_a_recovered_share_keeps_its_share_id_and_mig_uuid(state: DeviceState, tmp_path: Path) -> None:
    """After a corrupt checkpoint the entries come back from the CDI specs: a share's ID from its
    env, a second share's MIG device with the first one's UUID."""
    state.prepare(make_claim(UID1, [share(SHARED_MIG, SHARE1, "mig")]))
    state.prepare(make_claim(UID2, [share(SHARED_MIG, SHARE2, "mig"), share(SHARED_GPU, SHARE1)]))
    first_uuid = state.dynamic_mig_devices()[0].uuid
    (tmp_path / "plugin" / "checkpoint.json").write_text("{corrupt")
    (tmp_path / "plugin" / "checkpoint.journal").unlink(missing_ok=True)
    again = make_state(tmp_path)
    data, status = again.load()
    assert status == "corrupt"
    entry = data.claims[UID2]
    assert entry.recovered and entry.preparedDevices[0].shareID == SHARE2
    assert [m.uuid for m in entry.driverData.migDevices] == [first_uuid]
    assert entry.driverData.shares == [
        ShareRecord(device=SHARED_MIG, shareID=SHARE2),
        ShareRecord(device=SHARED_GPU, shareID=SHARE1),
    ]
    # a recovered share's config is unknown: it does not block a share with any config
    again.prepare(make_claim(UID3, [share(SHARED_GPU, "s3")], [ts("Long")]))


def test_a_failing_release_is_that_claims_error_alone(state: DeviceState) -> None:
    """In one unprepare batch, a claim whose release fails keeps its entry and spec; the other goes."""
    from dra_fake.core.state import _Unprepare

    state.prepare(make_claim(UID1, [share(SHARED_MIG, SHARE1, "mig")]))
    state.prepare(make_claim(UID2, [share(SHARED_MIG, SHARE2, "mig")]))
    original = state.release

    def release(data: Any, uid: str, entry: Any) -> None:
        if uid == UID1:
            raise OSError("disk full")
        original(data, uid, entry)

    state.release = release  # type: ignore[method-assign,assignment]
    items = [_Unprepare(UID1), _Unprepare(UID2)]
    with state.locked():
        state._drop(state.store.load().data, items)
    assert isinstance(items[0].error, OSError) and items[1].error is None
    assert state.prepared_claims() == {UID1: "PrepareCompleted"} and state.cdi.claim_uids() == [UID1]
    assert len(state.dynamic_mig_devices()) == 1  # UID1 still holds it
    state.release = original  # type: ignore[method-assign]
    state.unprepare(UID1)
    assert state.prepared_claims() == {} and state.dynamic_mig_devices() == []
