"""Prepare and unprepare of `gpu.nvidia.com` claims on one node: the device state.

Every operation runs under the node-wide flock (locking.py) and is stateless between calls: it
loads the checkpoint, acts, and writes the checkpoint back, so plugin instances of a rolling update
can take turns. Order (docs/prepare.md argues why a SIGKILL between any two steps is safe):

    prepare:   lock -> load -> PrepareCompleted? return stored devices
               -> PrepareStarted? roll it back -> plan (pure: configs, conflicts, UUIDs, CDI spec)
               -> write PrepareStarted (with the undo data, write-ahead) -> create MIG / apply sharing
               -> write CDI spec -> write PrepareCompleted
    unprepare: lock -> load -> unknown? done -> mark PrepareStarted -> undo -> delete CDI spec
               -> drop the entry
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_fake import cdi, configs
from dra_fake.checkpoint import (
    DEFAULT_BOOT_ID_PATH,
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointData,
    CheckpointedDevice,
    CheckpointStore,
    ClaimEntry,
    MigDeviceRecord,
    MpsDaemonRecord,
    TimeSliceRecord,
    UndoData,
    report_to_metrics,
)
from dra_fake.configs import FeatureGates, GateLookup
from dra_fake.devices import AllocatableDevice, mig_uuid
from dra_fake.kubelet.api import PreparedDevice
from dra_fake.locking import DEFAULT_TIMEOUT_SECONDS, LockTimeoutError, NodeSerializer
from dra_fake.nvidia_smi import NvidiaSmi

_log = logging.getLogger(__name__)

# --- Crash points (tests) ----------------------------------------------------------------------

CRASH_ENV = "DRA_FAKE_CRASH_AT"
CRASH_POINTS = (
    "prepare:after-lock",
    "prepare:after-rollback",
    "prepare:after-started",
    "prepare:after-apply",
    "prepare:after-cdi",
    "prepare:after-completed",
    "unprepare:after-lock",
    "unprepare:after-started",
    "unprepare:after-undo",
    "unprepare:after-cdi-removed",
    "unprepare:after-dropped",
)


def crash_point(name: str) -> None:
    """SIGKILL this process if `name` is listed (comma-separated) in $DRA_FAKE_CRASH_AT."""
    wanted = os.environ.get(CRASH_ENV)
    if wanted and name in wanted.split(","):
        _log.warning("crash point reached, killing the process point=%s", name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


# --- Errors and results ------------------------------------------------------------------------


class ClaimError(Exception):
    """Preparing or unpreparing one claim failed; the kubelet retries later."""


class PermanentClaimError(ClaimError):
    """The claim itself is unusable (not allocated, bad config, unknown device): retrying the same
    claim cannot succeed."""


@dataclass(frozen=True)
class StartupReport:
    checkpoint_status: str  # ok | missing | boot-id-changed | corrupt
    rolled_back: tuple[str, ...] = ()  # PrepareStarted claims undone and dropped
    orphans_removed: tuple[str, ...] = ()  # CDI specs without a checkpoint entry, deleted
    specs_restored: tuple[str, ...] = ()  # PrepareCompleted claims whose missing CDI spec was rewritten
    recovered: tuple[str, ...] = ()  # claims rebuilt from CDI specs after a corrupt checkpoint
    temp_files_removed: int = 0


@dataclass(frozen=True)
class _Result:
    """One `status.allocation.devices.results[]` entry."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool
    share_id: str | None


@dataclass(frozen=True)
class _Claim:
    uid: str
    name: str
    namespace: str
    results: tuple[_Result, ...]  # this driver's only
    config: tuple[Mapping[str, object], ...]


def _str_field(obj: Mapping[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise PermanentClaimError(f"invalid claim: {what} has no {key}")
    return value


def parse_claim(claim: Mapping[str, Any], driver: str) -> _Claim:
    """The parts of a ResourceClaim (v1, v1beta2 or v1beta1 JSON) that prepare reads."""
    metadata = claim.get("metadata") or {}
    uid = _str_field(metadata, "uid", "metadata")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PermanentClaimError("claim not yet allocated")
    devices = allocation.get("devices") or {}
    results = []
    for raw in devices.get("results") or []:
        if raw.get("driver") != driver:
            continue
        share_id = raw.get("shareID")
        results.append(
            _Result(
                request=_str_field(raw, "request", "allocation result"),
                driver=driver,
                pool=_str_field(raw, "pool", "allocation result"),
                device=_str_field(raw, "device", "allocation result"),
                admin_access=bool(raw.get("adminAccess")),
                share_id=share_id if isinstance(share_id, str) and share_id else None,
            )
        )
    return _Claim(
        uid=uid,
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        results=tuple(results),
        config=tuple(devices.get("config") or []),
    )


def _to_prepared(d: CheckpointedDevice) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(d.requests),
        pool_name=d.poolName,
        device_name=d.deviceName,
        cdi_device_ids=tuple(d.cdiDeviceIDs),
        share_id=d.shareID,
    )


def _overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


@dataclass
class _Holdings:
    """What other prepared claims hold, for conflict checks."""

    devices: dict[str, str]  # device name -> claim UID (non-admin, unshared)
    full_gpus: dict[str, tuple[str, str]]  # gpu UUID -> (device, claim UID)
    migs: list[tuple[MigDeviceRecord, str]]  # dynamic MIG devices -> claim UID


# --- The device state ----------------------------------------------------------------------------


class DeviceState:
    """Prepared claims of one driver on one node, persisted in the checkpoint and CDI root."""

    def __init__(
        self,
        driver_name: str,
        pool_name: str,
        devices: Mapping[str, AllocatableDevice],
        cdi_root: Path,
        plugin_data_dir: Path,
        feature_gates: GateLookup | None = None,
        node_name: str | None = None,
        boot_id_path: Path | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_checkpoint_error: Callable[[str], None] = report_to_metrics,
        nvidia_smi: NvidiaSmi | None = None,
    ) -> None:
        self.driver = driver_name
        self.pool = pool_name
        self.node = node_name or pool_name
        self.devices = dict(devices)
        self.gates: GateLookup = feature_gates or FeatureGates()
        self.data_dir = Path(plugin_data_dir)
        self.lock_timeout = lock_timeout
        self._serializer = NodeSerializer(self.data_dir, self.lock_timeout)
        self.cdi = cdi.CdiSpecStore(Path(cdi_root), driver_name)
        self.nvidia_smi = nvidia_smi  # when set, every claim spec mounts nvidia-smi (docs/prepare.md)
        self.store = CheckpointStore(
            self.data_dir, boot_id_path or DEFAULT_BOOT_ID_PATH, on_corrupt=on_checkpoint_error
        )

    # --- public API -------------------------------------------------------------------------

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        """Prepare a claim's devices of this driver; idempotent. Raises ClaimError."""
        parsed = parse_claim(claim, self.driver)
        if not parsed.results:
            _log.info("prepare: no devices of this driver claim=%s", parsed.uid)
            return []
        with self._locked():
            crash_point("prepare:after-lock")
            data, _ = self._load()
            entry = data.claims.get(parsed.uid)
            if entry is not None and entry.state == PREPARE_COMPLETED:
                self._ensure_spec(parsed.uid, entry)
                _log.info("prepare: already prepared claim=%s", parsed.uid)
                return [_to_prepared(d) for d in entry.preparedDevices]
            if entry is not None:
                _log.info("prepare: rolling back a partial prepare claim=%s", parsed.uid)
                self._rollback(data, parsed.uid)
                self.store.save(data)
                crash_point("prepare:after-rollback")

            new_entry, prepared = self._plan(parsed, data)
            data.claims[parsed.uid] = new_entry
            self.store.save(data)
            crash_point("prepare:after-started")
            try:
                self._apply(parsed.uid, new_entry.undo)
                crash_point("prepare:after-apply")
                assert new_entry.cdiSpec is not None
                self._write_spec(parsed.uid, new_entry.cdiSpec)
                crash_point("prepare:after-cdi")
                new_entry.state = PREPARE_COMPLETED
                self.store.save(data)
            except Exception as exc:
                self._abort(data, parsed.uid, exc)
                raise ClaimError(f"error preparing devices for claim {parsed.uid}: {exc}") from exc
            crash_point("prepare:after-completed")
            _log.info(
                "claim prepared claim=%s namespace=%s name=%s devices=%s",
                parsed.uid,
                parsed.namespace,
                parsed.name,
                ",".join(p.device_name for p in prepared),
            )
            return prepared

    def unprepare(self, claim_uid: str) -> None:
        """Undo a claim's preparation; a claim not in the checkpoint is a success."""
        with self._locked():
            crash_point("unprepare:after-lock")
            data, _ = self._load()
            entry = data.claims.get(claim_uid)
            if entry is None:
                _log.info("Unprepare noop: claim not found in checkpoint data claim=%s", claim_uid)
                return
            try:
                if entry.state == PREPARE_COMPLETED:
                    entry.state = PREPARE_STARTED  # from here on the claim is partial: roll back
                    self.store.save(data)
                    crash_point("unprepare:after-started")
                self._undo(claim_uid, entry.undo)
                crash_point("unprepare:after-undo")
                self.cdi.remove(claim_uid)
                crash_point("unprepare:after-cdi-removed")
                del data.claims[claim_uid]
                self.store.save(data)
            except OSError as exc:
                raise ClaimError(f"error unpreparing devices for claim {claim_uid}: {exc}") from exc
            crash_point("unprepare:after-dropped")
            _log.info("claim unprepared claim=%s", claim_uid)

    def startup(self) -> StartupReport:
        """Once at plugin start: roll back PrepareStarted claims, restore lost CDI specs of
        completed claims, delete CDI specs no entry references, delete stale temp files."""
        with self._locked():
            data, status = self._load()
            recovered = tuple(uid for uid, e in data.claims.items() if e.recovered)
            temp = len(self.cdi.remove_temp_files()) + len(self.store.remove_temp_files())
            rolled_back = []
            for uid, entry in list(data.claims.items()):
                if entry.state == PREPARE_STARTED and not entry.recovered:
                    self._rollback(data, uid)
                    rolled_back.append(uid)
            restored = []
            for uid, entry in list(data.claims.items()):
                if entry.state == PREPARE_COMPLETED and not self.cdi.exists(uid):
                    try:
                        assert entry.cdiSpec is not None, "no CDI spec recorded"
                        self._write_spec(uid, entry.cdiSpec)
                        restored.append(uid)
                    except (AssertionError, cdi.CdiSpecError, OSError) as exc:
                        _log.error(
                            "CDI spec of a prepared claim cannot be restored, rolling back claim=%s error=%s",
                            uid,
                            exc,
                        )
                        self._rollback(data, uid)
                        rolled_back.append(uid)
            if self.nvidia_smi is not None:  # a new plugin version may bring a new script
                for entry in data.claims.values():
                    if entry.state == PREPARE_COMPLETED and entry.cdiSpec:
                        self.nvidia_smi.ensure_files(entry.cdiSpec)
            orphans = [uid for uid in self.cdi.claim_uids() if uid not in data.claims]
            for uid in orphans:
                self.cdi.remove(uid)
            self.store.save(data)
        report = StartupReport(
            checkpoint_status=status,
            rolled_back=tuple(rolled_back),
            orphans_removed=tuple(orphans),
            specs_restored=tuple(restored),
            recovered=recovered,
            temp_files_removed=temp,
        )
        _log.info(
            "startup reconciliation checkpoint=%s rolledBack=%s orphansRemoved=%s specsRestored=%s "
            "recovered=%s tempFilesRemoved=%d",
            status,
            ",".join(report.rolled_back) or "-",
            ",".join(report.orphans_removed) or "-",
            ",".join(report.specs_restored) or "-",
            ",".join(report.recovered) or "-",
            temp,
        )
        return report

    def prepared_claims(self) -> dict[str, str]:
        """Claim UID -> state, read without the lock (for metrics; may lag one operation)."""
        data = self.store.peek()
        return {} if data is None else {uid: e.state for uid, e in data.claims.items()}

    def claim_counts(self) -> dict[str, int]:
        counts = {PREPARE_STARTED: 0, PREPARE_COMPLETED: 0}
        for state in self.prepared_claims().values():
            counts[state] += 1
        return counts

    def prepared_device_count(self) -> int:
        """Devices of PrepareCompleted claims (for the dra_fake_prepared_devices gauge)."""
        data = self.store.peek()
        if data is None:
            return 0
        return sum(len(e.preparedDevices) for e in data.claims.values() if e.state == PREPARE_COMPLETED)

    def dynamic_mig_devices(self) -> list[MigDeviceRecord]:
        """The dynamic MIG devices currently "created" on this node."""
        data = self.store.peek()
        if data is None:
            return []
        return [m for e in data.claims.values() for m in e.undo.migDevices]

    # --- steps --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's mutex, then the node-wide flock; a timeout is a (retryable) ClaimError."""
        try:
            with self._serializer.hold():
                yield
        except LockTimeoutError as exc:
            raise ClaimError(str(exc)) from exc

    def _load(self) -> tuple[CheckpointData, str]:
        result = self.store.load()
        if result.status == "corrupt":
            recovered = self._recover_from_specs(result.data)
            _log.error(
                "checkpoint rebuilt from CDI specs claims=%s (prepared-but-unknown, PrepareStarted)",
                ",".join(recovered) or "-",
            )
            self.store.save(result.data)
        elif result.status == "boot-id-changed":
            self.store.save(result.data)
        return result.data, result.status

    def _recover_from_specs(self, data: CheckpointData) -> list[str]:
        """After corruption: every claim with a CDI spec becomes a recovered PrepareStarted entry,
        its devices read back from the spec's device names (`<claimUID>-<device>`)."""
        recovered = []
        for uid in self.cdi.claim_uids():
            spec = self.cdi.read(uid) or {}
            prepared: list[CheckpointedDevice] = []
            migs: list[MigDeviceRecord] = []
            for dev in spec.get("devices") or []:
                cdi_name = str(dev.get("name", "")) if isinstance(dev, dict) else ""
                name = self._device_in_cdi_name(uid, cdi_name)
                if name is None:
                    continue
                prepared.append(
                    CheckpointedDevice(
                        requests=[],
                        poolName=self.pool,
                        deviceName=name,
                        cdiDeviceIDs=[cdi.cdi_device_id(self.driver, cdi_name)],
                    )
                )
                device = self.devices[name]
                if device.dynamic and device.mig is not None:
                    migs.append(self._mig_record(device, uid))
            data.claims[uid] = ClaimEntry(
                state=PREPARE_STARTED,
                preparedDevices=prepared,
                undo=UndoData(migDevices=migs),
                recovered=True,
            )
            recovered.append(uid)
        return recovered

    def _device_in_cdi_name(self, uid: str, cdi_name: str) -> str | None:
        rest = cdi_name.removeprefix(f"{uid}-")
        if rest == cdi_name:
            return None
        # longest known device name that the rest starts with (a share ID may follow)
        for name in sorted(self.devices, key=len, reverse=True):
            if rest == name or rest.startswith(f"{name}-"):
                return name
        return None

    def _mig_record(self, device: AllocatableDevice, claim_uid: str) -> MigDeviceRecord:
        assert device.mig is not None
        return MigDeviceRecord(
            device=device.name,
            uuid=mig_uuid(self.node, device.index, device.mig, nonce=claim_uid),
            parentUUID=device.gpu_uuid,
            gpuIndex=device.index,
            profile=device.mig.profile,
            giProfileID=device.mig.gi_profile_id,
            placementStart=device.mig.start,
            placementSize=device.mig.size,
        )

    def _holdings(self, data: CheckpointData, claim_uid: str) -> _Holdings:
        held = _Holdings(devices={}, full_gpus={}, migs=[])
        for uid, entry in data.claims.items():
            if uid == claim_uid:
                continue
            for d in entry.preparedDevices:
                if d.adminAccess or d.shareID:
                    continue
                held.devices.setdefault(d.deviceName, uid)
                known = self.devices.get(d.deviceName)
                if known is not None and known.kind == "gpu":
                    held.full_gpus.setdefault(known.gpu_uuid, (d.deviceName, uid))
            held.migs.extend((m, uid) for m in entry.undo.migDevices)
        return held

    def _check_conflicts(self, claim: _Claim, held: _Holdings) -> None:
        """No device of another claim; no dynamic MIG placement overlapping another claim's MIG
        devices or a full GPU (and no full GPU with MIG devices on it) — nor within this claim."""
        migs = list(held.migs)
        full_gpus = dict(held.full_gpus)
        for r in claim.results:
            if r.admin_access or r.share_id:
                continue
            other = held.devices.get(r.device)
            if other is not None:
                raise ClaimError(
                    f"requested device {r.device} is already allocated to different claim {other}"
                )
            device = self.devices[r.device]
            if device.kind == "gpu":
                for m, uid in migs:
                    if m.parentUUID == device.gpu_uuid and m.device != r.device:
                        raise ClaimError(
                            f"requested device {r.device} conflicts with MIG device {m.device} "
                            f"prepared for claim {uid} on the same GPU"
                        )
                full_gpus.setdefault(device.gpu_uuid, (r.device, claim.uid))
            elif device.dynamic and device.mig is not None:
                gpu = full_gpus.get(device.gpu_uuid)
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
                migs.append((self._mig_record(device, claim.uid), claim.uid))

    def _plan(self, claim: _Claim, data: CheckpointData) -> tuple[ClaimEntry, list[PreparedDevice]]:
        """Decide everything without side effects: the entry to write and the devices to return."""
        for r in claim.results:
            if r.pool != self.pool:
                raise PermanentClaimError(
                    f"requested device is not allocatable: {r.device} "
                    f"(pool {r.pool}; this node's pool is {self.pool})"
                )
            if r.device not in self.devices:
                raise PermanentClaimError(f"requested device is not allocatable: {r.device}")
        held = self._holdings(data, claim.uid)

        uuids: list[str] = []
        migs: dict[str, MigDeviceRecord] = {}
        for r in claim.results:
            device = self.devices[r.device]
            if device.dynamic and device.mig is not None:
                existing = next(
                    (m for m, _ in held.migs if m.device == r.device and r.admin_access), None
                )  # admin access observes a MIG device another claim created
                record = existing or self._mig_record(device, claim.uid)
                if existing is None and not r.admin_access:
                    migs.setdefault(r.device, record)
                uuids.append(record.uuid)
            elif device.uuid is not None:
                uuids.append(device.uuid)
            else:
                raise PermanentClaimError(f"requested device {r.device} has no UUID")

        try:
            sharing = configs.apply_configs(
                self.driver,
                claim.config,
                [
                    configs.ResultDevice(r.request, r.device, self.devices[r.device].kind, uuid)
                    for r, uuid in zip(claim.results, uuids, strict=True)
                ],
                self.gates,
                claim.uid,
            )
        except configs.ConfigError as exc:
            raise PermanentClaimError(str(exc)) from None
        self._check_conflicts(claim, held)

        undo = UndoData(migDevices=list(migs.values()))
        seen_ts: set[str] = set()
        seen_mps: set[str] = set()
        spec_devices: list[cdi.SpecDevice] = []
        checkpointed: list[CheckpointedDevice] = []
        for r, uuid, applied in zip(claim.results, uuids, sharing, strict=True):
            device = self.devices[r.device]
            if applied.time_slice_interval is not None and device.kind == "gpu" and uuid not in seen_ts:
                seen_ts.add(uuid)
                undo.timeSlicing.append(TimeSliceRecord(uuid=uuid, interval=applied.time_slice_interval))
            if applied.mps is not None and applied.mps.control_daemon_id not in seen_mps:
                seen_mps.add(applied.mps.control_daemon_id)
                undo.mpsDaemons.append(
                    MpsDaemonRecord(
                        controlDaemonID=applied.mps.control_daemon_id, uuids=list(applied.mps.uuids)
                    )
                )
            name = cdi.cdi_device_name(claim.uid, r.device, r.share_id)
            spec_devices.append(cdi.SpecDevice(name, device, uuid, r.admin_access, applied))
            checkpointed.append(
                CheckpointedDevice(
                    requests=[configs.main_request(r.request)],
                    poolName=r.pool,
                    deviceName=r.device,
                    cdiDeviceIDs=[cdi.cdi_device_id(self.driver, name)],
                    shareID=r.share_id,
                    adminAccess=r.admin_access,
                )
            )
        spec = cdi.build_claim_spec(self.driver, claim.uid, spec_devices, self.nvidia_smi)
        try:
            cdi.validate_spec(spec)
        except cdi.CdiSpecError as exc:
            raise ClaimError(f"error building the CDI spec: {exc}") from None
        entry = ClaimEntry(
            state=PREPARE_STARTED,
            name=claim.name,
            namespace=claim.namespace,
            preparedDevices=checkpointed,
            undo=undo,
            cdiSpec=spec,
        )
        return entry, [_to_prepared(d) for d in checkpointed]

    def _apply(self, claim_uid: str, undo: UndoData) -> None:
        """The "hardware" side of prepare. Simulated: nothing exists outside the checkpoint, so
        this only logs what NVIDIA's driver would do."""
        for m in undo.migDevices:
            _log.info(
                "dynamic MIG device created claim=%s device=%s uuid=%s parent=%s profile=%s placement=%d+%d",
                claim_uid,
                m.device,
                m.uuid,
                m.parentUUID,
                m.profile,
                m.placementStart,
                m.placementSize,
            )
        for t in undo.timeSlicing:
            _log.info("time-slice interval set claim=%s uuid=%s interval=%s", claim_uid, t.uuid, t.interval)
        for d in undo.mpsDaemons:
            _log.info(
                "MPS control daemon started claim=%s id=%s uuids=%s", claim_uid, d.controlDaemonID, d.uuids
            )

    def _undo(self, claim_uid: str, undo: UndoData) -> None:
        """Reverse _apply; idempotent (undoing what does not exist is fine)."""
        for d in undo.mpsDaemons:
            _log.info("MPS control daemon stopped claim=%s id=%s", claim_uid, d.controlDaemonID)
        for t in undo.timeSlicing:
            _log.info("time-slice interval reset claim=%s uuid=%s interval=Default", claim_uid, t.uuid)
        for m in undo.migDevices:
            _log.info("dynamic MIG device destroyed claim=%s device=%s uuid=%s", claim_uid, m.device, m.uuid)
            if self.nvidia_smi is not None:
                self.nvidia_smi.remove_info(m.device, m.uuid)

    def _rollback(self, data: CheckpointData, claim_uid: str) -> None:
        """Undo a partial claim and forget it (the caller saves the checkpoint)."""
        entry = data.claims[claim_uid]
        self._undo(claim_uid, entry.undo)
        self.cdi.remove(claim_uid)
        del data.claims[claim_uid]
        _log.info("partially prepared claim rolled back claim=%s", claim_uid)

    def _abort(self, data: CheckpointData, claim_uid: str, exc: Exception) -> None:
        _log.error("prepare failed, rolling back claim=%s error=%s", claim_uid, exc)
        try:
            self._rollback(data, claim_uid)
            self.store.save(data)
        except Exception as rollback_exc:  # left as PrepareStarted: the next call rolls it back
            _log.error("rollback failed claim=%s error=%s", claim_uid, rollback_exc)

    def _write_spec(self, claim_uid: str, spec: Mapping[str, Any]) -> None:
        """The files a spec mounts first (nvidia-smi), then the spec: a runtime never sees a
        spec whose mounts are missing."""
        if self.nvidia_smi is not None:
            self.nvidia_smi.ensure_files(spec)
        self.cdi.write(claim_uid, spec)

    def _ensure_spec(self, claim_uid: str, entry: ClaimEntry) -> None:
        if entry.cdiSpec and not self.cdi.exists(claim_uid):
            _log.warning("CDI spec of a prepared claim was missing, rewritten claim=%s", claim_uid)
            try:
                self._write_spec(claim_uid, entry.cdiSpec)
            except (cdi.CdiSpecError, OSError) as exc:
                raise ClaimError(f"error restoring the CDI spec of claim {claim_uid}: {exc}") from exc
