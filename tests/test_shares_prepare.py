"""Consumable shares (NVIDIA's ConsumableShares) at prepare and unprepare, per share: each share its
own CDI device with its share ID, exclusive and whole holders, time-slicing and MPS on a shared
GPU, dynamic MIG devices created by the first share and released with the last, recovery and
failing releases (dra_fake.gpu.shares, state; tests/sharesnode.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import NODE, P1_0, make_claim, make_state, opaque, result

from dra_fake.core.claims import ClaimError, PermanentClaimError, parse_claim
from dra_fake.gpu.claimdata import GpuClaimData, ShareRecord
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.shares import SharesMode
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.api import PreparedDevice
from tests.sharesnode import API, KIND, MIB, SHARE1, SHARE2, SHARED_GPU, SHARED_MIG, UID1, UID2, UID3


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
