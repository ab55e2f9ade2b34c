"""Planning a `gpu.nvidia.com` claim's preparation, without side effects: its configs, conflicts
with what the node's other claims hold, the UUIDs of its devices, its CDI spec and the entry the
checkpoint will hold (dra_fake.gpu.state carries it out)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from dra_fake.core import cdi
from dra_fake.core.checkpoint import PREPARE_STARTED, CheckpointData, CheckpointedDevice
from dra_fake.core.claims import ClaimError, ParsedClaim, PermanentClaimError
from dra_fake.core.opaque import main_request
from dra_fake.core.state import to_prepared
from dra_fake.gpu import configresolve, configs, edits
from dra_fake.gpu.claimdata import (
    GpuClaimData,
    GpuClaimEntry,
    MigDeviceRecord,
    MpsDaemonRecord,
    ShareRecord,
    TimeSliceRecord,
)
from dra_fake.gpu.configs import Quantity
from dra_fake.gpu.devices import AllocatableDevice, mig_uuid
from dra_fake.gpu.devnodes import DeviceNodes
from dra_fake.gpu.lending import SPOT_SUFFIX, lending_off, refusal, tolerated_forever, unreclaimable
from dra_fake.gpu.shares import MPS_REFUSED
from dra_fake.kubelet.api import PreparedDevice

if TYPE_CHECKING:
    from dra_fake.gpu.state import DeviceState


def _overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


@dataclass
class Holdings:
    """What the prepared claims hold, for conflict checks, and the entries it was built from
    (in the checkpoint's order: a prepare adds its claim last, so the next plan adds one part)."""

    parts: dict[str, HeldPart] = field(default_factory=dict)  # claim UID -> its part
    entries: list[GpuClaimEntry] = field(default_factory=list)  # of the same claims, in order
    devices: dict[str, list[Holder]] = field(default_factory=dict)  # device -> its holders (no admin access)
    full_gpus: dict[str, list[tuple[str, str]]] = field(
        default_factory=dict
    )  # GPU UUID -> (device, claim UID)
    migs: list[tuple[MigDeviceRecord, str]] = field(default_factory=list)  # dynamic MIG devices, claim UID

    def add(self, uid: str, entry: GpuClaimEntry, part: HeldPart) -> None:
        self.parts[uid] = part
        self.entries.append(entry)
        for name, gpu_uuid, shared, config in part.held:
            self.devices.setdefault(name, []).append(Holder(uid, shared, config))
            if gpu_uuid is not None:
                self.full_gpus.setdefault(gpu_uuid, []).append((name, uid))
        self.migs.extend((m, uid) for m in part.data.migDevices)

    def holders(self, device: str, other_than: str) -> list[Holder]:
        """The claims but `other_than` that hold `device`, in checkpoint order."""
        return [h for h in self.devices.get(device, ()) if h.uid != other_than]

    def full_gpu(self, gpu_uuid: str, other_than: str) -> tuple[str, str] | None:
        """(device, claim UID) of the first claim but `other_than` holding the full GPU."""
        return next((held for held in self.full_gpus.get(gpu_uuid, ()) if held[1] != other_than), None)

    def migs_of_others(self, claim_uid: str) -> list[tuple[MigDeviceRecord, str]]:
        return [(m, uid) for m, uid in self.migs if uid != claim_uid]


class Holder(NamedTuple):
    uid: str
    shared: bool  # holds a share of the device (else the whole device)
    config: str | None  # the share's normalized config; None: unknown


class HeldPart(NamedTuple):
    """One entry's part of the holdings, and the objects it was made from."""

    devices: list[CheckpointedDevice]
    data: GpuClaimData
    # (device, its GPU UUID if a full GPU, held as a share, the share's config)
    held: tuple[tuple[str, str | None, bool, str | None], ...]


def held_part(entry: GpuClaimEntry, devices: Mapping[str, AllocatableDevice]) -> HeldPart:
    """The devices an entry holds (not admin access), with the GPU UUID of each full GPU, and
    whether it holds a share (a share record, or a share ID from a version before them)."""
    records = {r.device: r for r in entry.driverData.shares}
    held = []
    for d in entry.preparedDevices:
        if d.adminAccess:
            continue
        known = devices.get(d.deviceName)
        record = records.get(d.deviceName)
        held.append(
            (
                d.deviceName,
                known.gpu_uuid if known is not None and known.kind == "gpu" else None,
                record is not None or d.shareID is not None,
                record.config if record is not None else None,
            )
        )
    return HeldPart(entry.preparedDevices, entry.driverData, tuple(held))


def mig_record(node: str, device: AllocatableDevice, claim_uid: str) -> MigDeviceRecord:
    """The record of the dynamic MIG device `device` created for a claim (its UUID from the claim's)."""
    if device.mig is None:
        raise PermanentClaimError(f"device {device.name} is not a MIG device")
    return MigDeviceRecord(
        device=device.name,
        uuid=mig_uuid(node, device.index, device.mig, nonce=claim_uid),
        parentUUID=device.gpu_uuid,
        gpuIndex=device.index,
        profile=device.mig.profile,
        giProfileID=device.mig.gi_profile_id,
        placementStart=device.mig.start,
        placementSize=device.mig.size,
    )


def check_conflicts(
    claim: ParsedClaim,
    held: Holdings,
    configs_of: list[str],
    devices: Mapping[str, AllocatableDevice],
    node: str,
) -> None:
    """No device of another claim, unless both hold shares of a shared device with equal
    normalized configs (`configs_of`, per result; NVIDIA's rule, checked here against entries in
    any state); no dynamic MIG placement overlapping another claim's MIG devices or a full GPU
    (and no full GPU with MIG devices on it) — nor within this claim."""
    migs = held.migs_of_others(claim.uid)
    own_gpus: dict[str, str] = {}  # GPU UUID -> this claim's full GPU on it
    for r, config in zip(claim.results, configs_of, strict=True):
        if r.admin_access:
            continue
        device = devices[r.device]
        for other in held.holders(r.device, claim.uid):
            if device.shares is None or not other.shared:
                raise ClaimError(
                    f"requested device {r.device} is already allocated to different claim {other.uid}"
                )
            if other.config is not None and other.config != config:
                raise ClaimError(
                    f"requested device {r.device} has conflicting configuration with already "
                    f"prepared claim {other.uid}"
                )
        if device.kind == "gpu":
            for m, uid in migs:
                if m.parentUUID == device.gpu_uuid and m.device != r.device:
                    raise ClaimError(
                        f"requested device {r.device} conflicts with MIG device {m.device} "
                        f"prepared for claim {uid} on the same GPU"
                    )
            own_gpus.setdefault(device.gpu_uuid, r.device)
        elif device.dynamic and device.mig is not None:
            gpu = held.full_gpu(device.gpu_uuid, claim.uid)
            if gpu is None and device.gpu_uuid in own_gpus:
                gpu = (own_gpus[device.gpu_uuid], claim.uid)
            if gpu is not None:
                raise ClaimError(
                    f"requested device {r.device} conflicts with full GPU {gpu[0]} "
                    f"prepared for claim {gpu[1]}"
                )
            for m, uid in migs:
                if (
                    m.parentUUID == device.gpu_uuid
                    and m.device != r.device
                    and _overlaps(m.placementStart, m.placementSize, device.mig.start, device.mig.size)
                ):
                    raise ClaimError(
                        f"requested device {r.device} overlaps MIG device {m.device} "
                        f"prepared for claim {uid} on the same GPU"
                    )
            migs.append((mig_record(node, device, claim.uid), claim.uid))


def plan_claim(
    state: DeviceState,
    claim: ParsedClaim,
    data: CheckpointData[GpuClaimData],
    device_nodes: DeviceNodes | None,
) -> tuple[GpuClaimEntry, list[PreparedDevice], frozenset[str]]:
    """Decide everything without side effects: the entry to write, the devices to return, and
    the dynamic MIG devices this claim shares with others (they exist already)."""
    for r in claim.results:
        if r.pool != state.pool:
            raise PermanentClaimError(
                f"prepare devices failed: requested device is not allocatable: {r.device} "
                f"(pool {r.pool}; this node's pool is {state.pool})"
            )
        device = state.devices.get(r.device)
        if device is None:
            lender = r.device.removesuffix(SPOT_SUFFIX)
            if state.lend_state is None and lender != r.device and lender in state.devices:
                raise PermanentClaimError(lending_off(r.device, lender))  # allocated before a restart
            raise PermanentClaimError(
                f"prepare devices failed: requested device is not allocatable: {r.device}"
            )
        if device.lends is not None and not r.admin_access:  # a spot claim borrows the GPU now
            busy = None if state.lend_state is None else state.lend_state(r.device)
            if busy is not None:
                raise ClaimError(refusal(r.device, device.lends, busy))  # retried: it may be lent later
            if (forever := tolerated_forever(r.tolerations)) is not None:
                raise PermanentClaimError(unreclaimable(r.device, forever))
    held = state.holdings_of(data)

    uuids: list[str] = []
    migs: dict[str, MigDeviceRecord] = {}
    reused: set[str] = set()
    for r in claim.results:
        device = state.devices[r.device]
        if device.dynamic and device.mig is not None:
            # Admin access observes a MIG device another claim created; a share uses the one
            # the device's first share created (NVIDIA: getPreparedMigDevice).
            existing = None
            if r.admin_access or device.shares is not None:
                existing = next(
                    (m for m, uid in held.migs if m.device == r.device and uid != claim.uid), None
                )
            record = existing or mig_record(state.node, device, claim.uid)
            if not r.admin_access:
                migs.setdefault(r.device, record)  # each share keeps a copy: released by the last
                if existing is not None:
                    reused.add(record.uuid)
            uuids.append(record.uuid)
        elif device.uuid is not None:
            uuids.append(device.uuid)
        else:
            raise PermanentClaimError(f"prepare devices failed: requested device {r.device} has no UUID")

    try:
        resolved = configresolve.resolve_configs(
            state.driver,
            claim.config,
            [
                configresolve.ResultDevice(r.request, r.device, state.devices[r.device].kind, uuid)
                for r, uuid in zip(claim.results, uuids, strict=True)
            ],
            state.gates,
            claim.uid,
        )
    except configs.ConfigError as exc:
        raise PermanentClaimError(f"prepare devices failed: {exc}") from None
    for r, c in zip(claim.results, resolved, strict=True):
        if c.sharing.strategy == configs.STRATEGY_MPS and (
            state.consumable_shares is not None or state.devices[r.device].shares is not None
        ):
            raise PermanentClaimError(f"prepare devices failed: error applying config: {MPS_REFUSED}")
    fingerprints = [c.fingerprint for c in resolved]
    try:
        check_conflicts(claim, held, fingerprints, state.devices, state.node)
    except ClaimError as exc:
        raise ClaimError(f"unable to prepare claim {claim.uid}: {exc}") from None

    undo = GpuClaimData(migDevices=list(migs.values()))
    seen_ts: set[str] = set()
    seen_mps: set[str] = set()
    spec_devices: list[edits.SpecDevice] = []
    checkpointed: list[CheckpointedDevice] = []
    # A claim's share is its own CDI device by the claim UID; only two shares of one device in
    # one claim need the share ID in the name too (NVIDIA's name would repeat; sharing-design §1.5).
    shares_per_device = Counter(r.device for r in claim.results if r.share_id)
    for r, uuid, c, config in zip(claim.results, uuids, resolved, fingerprints, strict=True):
        device, applied = state.devices[r.device], c.sharing
        if applied.time_slice_interval is not None and device.kind == "gpu" and uuid not in seen_ts:
            seen_ts.add(uuid)
            undo.timeSlicing.append(TimeSliceRecord(uuid=uuid, interval=applied.time_slice_interval))
        if applied.mps is not None and applied.mps.control_daemon_id not in seen_mps:
            seen_mps.add(applied.mps.control_daemon_id)
            undo.mpsDaemons.append(
                MpsDaemonRecord(controlDaemonID=applied.mps.control_daemon_id, uuids=list(applied.mps.uuids))
            )
        if device.shares is not None and not r.admin_access:
            undo.shares.append(
                ShareRecord(
                    device=r.device,
                    shareID=r.share_id,
                    config=config,
                    consumedCapacity=dict(r.consumed_capacity),
                )
            )
        suffix = r.share_id if shares_per_device[r.device] > 1 else None
        name = cdi.cdi_device_name(claim.uid, r.device, suffix)
        share = share_of(r.share_id, r.consumed_capacity, state.memory_view) if r.share_id else None
        spec_devices.append(edits.SpecDevice(name, device, uuid, r.admin_access, applied, share))
        checkpointed.append(
            CheckpointedDevice(
                requests=[main_request(r.request)],
                poolName=r.pool,
                deviceName=r.device,
                cdiDeviceIDs=[cdi.cdi_device_id(state.driver, name)],
                shareID=r.share_id,
                adminAccess=r.admin_access,
            )
        )
    spec = edits.build_claim_spec(state.driver, claim.uid, spec_devices, state.nvidia_smi, device_nodes)
    try:
        cdi.checked(spec)
    except cdi.CdiSpecError as exc:
        raise ClaimError(f"error building the CDI spec: {exc}") from None
    entry = GpuClaimEntry(
        state=PREPARE_STARTED,
        name=claim.name,
        namespace=claim.namespace,
        preparedDevices=checkpointed,
        driverData=undo,
        cdiSpec=spec,
    )
    return entry, [to_prepared(d) for d in checkpointed], frozenset(reused)


def share_of(share_id: str, consumed: Mapping[str, str], memory_view: bool = True) -> edits.Share:
    """What a share consumes, as its container's env shows it: memory in bytes (rounded down: the
    scheduler's amounts are whole MiB), shares as a count; `memory_view`: its nvidia-smi shows its
    memory as the total (--shared-memory-view=share)."""

    def amount(name: str) -> int | None:
        raw = consumed.get(name)
        if raw is None:
            return None
        try:
            return math.floor(Quantity.parse(raw).value)
        except ValueError as exc:
            raise PermanentClaimError(
                f"prepare devices failed: consumedCapacity.{name} of share {share_id}: {exc}"
            ) from None

    return edits.Share(share_id, amount("memory"), amount("shares"), memory_view)
