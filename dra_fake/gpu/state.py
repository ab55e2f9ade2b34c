"""Prepare and unprepare of `gpu.nvidia.com` claims on one node: the GPU driver's prepared state.

Built on dra_fake.core.state.PreparedClaims (lock, checkpoint, unprepare, start-up
reconciliation, crash points); this module carries out what dra_fake.gpu.plan decides a claim
gets, and records it as dra_fake.gpu.claimdata's payload. Order of prepare (docs/prepare.md
argues why a SIGKILL between any two steps is safe):

    lock -> load -> PrepareCompleted? return stored devices
         -> PrepareStarted? roll it back -> plan (pure: configs, conflicts, UUIDs, CDI spec)
         -> write PrepareStarted (with the undo data, write-ahead) -> create MIG / apply sharing
         -> write CDI spec -> write PrepareCompleted -> unlock -> the files the spec mounts
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_fake.core import cdi, metrics
from dra_fake.core.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointData,
    CheckpointedDevice,
)
from dra_fake.core.claims import ClaimError, ParsedClaim
from dra_fake.core.crashpoints import crash_point
from dra_fake.core.locking import DEFAULT_TIMEOUT_SECONDS
from dra_fake.core.state import PreparedClaims, to_prepared
from dra_fake.gpu import configs, devicefile, edits
from dra_fake.gpu.claimdata import GpuClaimData, GpuClaimEntry, MigDeviceRecord, ShareRecord
from dra_fake.gpu.configs import FeatureGates, GateLookup, Quantity
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.devnodes import DeviceNodes
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.plan import Holdings, held_part, mig_record, plan_claim
from dra_fake.gpu.shares import SharesMode
from dra_fake.gpu.workloads import ClaimHolding, HeldDevice
from dra_fake.kubelet.api import PreparedDevice

_log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Prepare:
    """One claim of a prepare batch and its outcome."""

    claim: ParsedClaim
    entry: GpuClaimEntry | None = None  # planned, or the stored one of a claim prepared already
    reused_migs: frozenset[str] = frozenset()  # UUIDs of dynamic MIG devices other shares created
    devices: list[PreparedDevice] | None = None
    error: Exception | None = None
    twin: _Prepare | None = None  # the same claim earlier in the batch


# --- The device state ----------------------------------------------------------------------------


class DeviceState(PreparedClaims[GpuClaimData]):
    """Prepared gpu.nvidia.com claims of one node, persisted in the checkpoint and CDI root."""

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
        on_checkpoint_error: Callable[[str], None] = metrics.record_checkpoint_error,
        nvidia_smi: NvidiaSmi | None = None,
        device_nodes: Callable[[], DeviceNodes | None] | None = None,
        consumable_shares: SharesMode | None = None,
        memory_view: bool = True,
        lend_state: Callable[[str], str | None] | None = None,
    ) -> None:
        super().__init__(
            driver_name,
            pool_name,
            GpuClaimData,
            cdi_root,
            plugin_data_dir,
            boot_id_path=boot_id_path,
            lock_timeout=lock_timeout,
            on_checkpoint_error=on_checkpoint_error,
        )
        self.node = node_name or pool_name
        self.devices = dict(devices)
        self.gates: GateLookup = feature_gates or FeatureGates()
        self.nvidia_smi = nvidia_smi  # when set, every claim spec mounts nvidia-smi (docs/prepare.md)
        # Asked at each prepare: the device nodes this host allows now (dra_fake.gpu.devnodes).
        self.device_nodes = device_nodes or (lambda: None)
        # --consumable-shares: MPS is refused on every device of the node (as NVIDIA); sharing per
        # device comes from the inventory (AllocatableDevice.shares), where groups may override it.
        self.consumable_shares = consumable_shares
        # --shared-memory-view=share: a share's nvidia-smi shows its memory as the total (ours)
        self.memory_view = memory_view
        # Idle-GPU lending (dra_fake.gpu.lending): a lend view -> the state that keeps its GPU from
        # being lent now (None: lendable); a spot claim is prepared only while its GPU is lendable.
        # None: lending is off here.
        self.lend_state = lend_state
        self._prepares = self.group(self._prepare_batch)
        self._held = Holdings()

    # --- public API -------------------------------------------------------------------------

    def prepare_claim(self, parsed: ParsedClaim) -> list[PreparedDevice]:
        """Errors worded as NVIDIA's (docs/reference/nvidia-gpu-driver.md#45-how-errors-reach-the-kubelet):
        `prepare devices failed: <cause>`, and `unable to prepare claim <uid>: <cause>` for a device
        another claim holds; the base class adds the outer layer. Concurrent prepares are done in
        one batch (group commit: `_prepare_batch`)."""
        item = _Prepare(parsed)
        self.submit(self._prepares, item)
        if item.error is not None:
            raise item.error
        if item.devices is None:
            raise ClaimError(f"prepare devices failed: claim {parsed.uid} was not prepared")
        # The files the spec mounts, outside the node lock (each call's own thread, not the batch's
        # serial part) and before the kubelet hears of the claim, so before any of its containers
        # can start. A failure fails this call; the kubelet's retry finds the claim prepared and
        # makes sure of them again (docs/prepare.md#group-commit).
        entry = (item.twin or item).entry
        if entry is not None and entry.cdiSpec is not None:
            try:
                self.before_spec(entry.cdiSpec)
            except OSError as exc:
                raise ClaimError(f"prepare devices failed: nvidia-smi files: {exc}") from exc
        return item.devices

    def _prepare_batch(self, items: list[_Prepare]) -> None:
        """Under the node lock, for every claim of the batch at once: PrepareStarted entries (one
        checkpoint write, not fsynced), each claim's CDI spec (not fsynced), PrepareCompleted
        (one write, fsynced). A claim that fails is rolled back alone; the others go on. The
        files each claim goes through are those of a batch of one (docs/prepare.md#group-commit)."""
        crash_point("prepare:after-lock")
        data, _ = self.load()
        # One decision for the whole batch: reading /proc/devices costs the kernel ~70 us here,
        # once per claim was a tenth of an 8-device claim's time in a burst.
        device_nodes = self.device_nodes()
        planned: dict[str, _Prepare] = {}
        rolled_back = False
        for item in items:
            uid = item.claim.uid
            if uid in planned:  # the same claim twice in one batch: one answer for both
                item.twin = planned[uid]
                continue
            entry = data.claims.get(uid)
            try:
                if entry is not None and entry.state == PREPARE_COMPLETED:
                    self.ensure_spec(uid, entry)
                    _log.info("prepare: already prepared claim=%s", uid)
                    item.devices = [to_prepared(d) for d in entry.preparedDevices]
                    item.entry = entry
                    continue
                if entry is not None:
                    _log.info("prepare: rolling back a partial prepare claim=%s", uid)
                    self.rollback(data, uid)
                    rolled_back = True
                item.entry, item.devices, item.reused_migs = plan_claim(self, item.claim, data, device_nodes)
            except Exception as exc:  # this claim's error (a bug included), not the batch's
                item.error = exc
                continue
            data.claims[uid] = item.entry
            planned[uid] = item
        if rolled_back:
            self.store.save(data)
            crash_point("prepare:after-rollback")
        if planned:
            self._commit(data, list(planned.values()))
        for item in items:
            if item.twin is not None:
                item.devices, item.error = item.twin.devices, item.twin.error
        if any(item.error is not None for item in items):
            self.store.forget()  # an error path may have left the loaded checkpoint half-changed

    def _commit(self, data: CheckpointData[GpuClaimData], items: list[_Prepare]) -> None:
        """`items`' entries are in `data`, which is saved but for them."""
        touched = [item.claim.uid for item in items]
        self.store.save(data, durable=False, touched=touched)  # write-ahead: see CheckpointStore.save
        crash_point("prepare:after-started")
        for item in items:
            try:
                if item.entry is None or item.entry.cdiSpec is None:
                    raise cdi.CdiSpecError("no CDI spec planned")
                self._apply(item.claim.uid, item.entry.driverData, item.reused_migs)
                crash_point("prepare:after-apply")
                self.cdi.write(item.claim.uid, item.entry.cdiSpec, durable=False)  # its files: prepare_claim
            except Exception as exc:
                self._fail(data, item, exc)
        crash_point("prepare:after-cdi")
        try:
            for item in items:
                if item.error is None and item.entry is not None:
                    item.entry.state = PREPARE_COMPLETED
            self.store.save(data, touched=touched)
        except Exception as exc:
            for item in items:
                if item.error is None:
                    self._fail(data, item, exc)
            return
        crash_point("prepare:after-completed")  # the caller (serving.ClaimPreparer) logs each claim

    def _fail(self, data: CheckpointData[GpuClaimData], item: _Prepare, exc: Exception) -> None:
        """A claim of the batch failed after its PrepareStarted entry was written."""
        self.abort(data, item.claim.uid, exc)
        item.devices = None
        item.error = ClaimError(f"prepare devices failed: {exc}")

    def dynamic_mig_devices(self) -> list[MigDeviceRecord]:
        """The dynamic MIG devices currently "created" on this node (each once, however many
        shares hold it)."""
        data = self.store.peek()
        if data is None:
            return []
        found = {m.uuid: m for e in data.claims.values() for m in e.driverData.migDevices}
        return list(found.values())

    def created_mig_uuids(self, claim_uid: str) -> dict[str, str]:
        """The dynamic MIG devices created for one prepared claim: device name -> UUID."""
        data = self.store.peek()
        entry = data.claims.get(claim_uid) if data is not None else None
        return {m.device: m.uuid for m in entry.driverData.migDevices} if entry is not None else {}

    def holdings(self) -> list[ClaimHolding]:
        """The prepared claims and their devices (read without the lock, for the telemetry)."""
        data = self.store.peek()
        if data is None:
            return []
        out = []
        for entry in data.claims.values():
            if entry.state != PREPARE_COMPLETED:
                continue
            migs = {m.device: m.uuid for m in entry.driverData.migDevices}
            consumed = {(s.device, s.shareID): s.consumedCapacity for s in entry.driverData.shares}
            devices = tuple(
                HeldDevice(
                    d.deviceName,
                    d.poolName,
                    tuple(d.requests),
                    migs.get(d.deviceName),
                    d.shareID,
                    self._share_view(d.deviceName, consumed.get((d.deviceName, d.shareID))),
                )
                for d in entry.preparedDevices
            )
            out.append(ClaimHolding(entry.namespace, entry.name, devices))
        return out

    def _share_view(self, device: str, consumed: Mapping[str, str] | None) -> int | None:
        """The MiB a share sees as its memory (devicefile.share_memory_mib), None: the device's."""
        if not self.memory_view:
            return None
        raw = (consumed or {}).get("memory")
        known = self.devices.get(device)
        if raw is None or known is None:
            return None
        try:
            memory = math.floor(Quantity.parse(raw).value)
        except ValueError:
            return None
        return devicefile.share_memory_mib(known.memory_bytes, memory)

    # --- steps --------------------------------------------------------------------------------

    def recover_entry(self, claim_uid: str, spec: Mapping[str, Any]) -> GpuClaimEntry | None:
        """A claim's entry read back from its CDI spec: its devices from the spec's device names
        (`<claimUID>-<device>[-<shareID>]`), a share's ID and a dynamic MIG device's UUID from the
        device's env (`DRA_FAKE_<ID>_SHARE_ID`, `_UUID`: a second share's MIG device is the first
        one's), and the dynamic MIG devices to destroy on undo."""
        prepared: list[CheckpointedDevice] = []
        migs: list[MigDeviceRecord] = []
        shares: list[ShareRecord] = []
        for cdi_name, rest in self.spec_devices(claim_uid, spec):
            name = self._device_in_cdi_name(rest)
            if name is None:
                continue
            env = _device_env(spec, cdi_name, edits.env_prefix(name))
            share_id = env.get("SHARE_ID")
            prepared.append(
                CheckpointedDevice(
                    requests=[],
                    poolName=self.pool,
                    deviceName=name,
                    cdiDeviceIDs=[cdi.cdi_device_id(self.driver, cdi_name)],
                    shareID=share_id,
                )
            )
            device = self.devices[name]
            if device.shares is not None:
                shares.append(ShareRecord(device=name, shareID=share_id))
            if device.dynamic and device.mig is not None:
                record = mig_record(self.node, device, claim_uid)
                migs.append(record.model_copy(update={"uuid": env.get("UUID") or record.uuid}))
        if not prepared:
            return None
        return GpuClaimEntry(
            state=PREPARE_STARTED,
            preparedDevices=prepared,
            driverData=GpuClaimData(migDevices=migs, shares=shares),
            recovered=True,
        )

    def _device_in_cdi_name(self, rest: str) -> str | None:
        # longest known device name that the rest starts with (a share ID may follow)
        for name in sorted(self.devices, key=len, reverse=True):
            if rest == name or rest.startswith(f"{name}-"):
                return name
        return None

    def holdings_of(self, data: CheckpointData[GpuClaimData]) -> Holdings:
        """What every claim the node holds (128 in the bench) holds. Kept from the last plan while
        the checkpoint holds the same entries (by identity) in the same order, and extended when
        it holds more after them (the claims planned since); rebuilt otherwise, from each entry's
        part, which is kept while the entry holds the same device list and payload objects (a
        saved entry changes only its state and flags). The whole pass at every plan was 15 % of
        a one-device prepare's samples with 128 claims held. This plugin never replaces a saved
        entry's device list or payload (dra_fake.core.checkpoint.ClaimEntry would allow it), so
        the same entry object holds the same devices."""
        uids, entries = list(data.claims), list(data.claims.values())
        held, known = self._held, len(self._held.entries)
        parts = held.parts
        if not (uids[:known] == list(parts) and all(map(operator.is_, entries, held.entries))):
            held = self._held = Holdings()  # from `parts` still, where an entry holds the same
            known = 0
        for uid, entry in zip(uids[known:], entries[known:], strict=True):
            part = parts.get(uid)
            if part is None or part.devices is not entry.preparedDevices or part.data is not entry.driverData:
                part = held_part(entry, self.devices)
            held.add(uid, entry, part)
        return held

    def _apply(self, claim_uid: str, undo: GpuClaimData, reused_migs: frozenset[str] = frozenset()) -> None:
        """The "hardware" side of prepare. Simulated: nothing exists outside the checkpoint, so
        this only logs what NVIDIA's driver would do."""
        for m in undo.migDevices:
            _log.info(
                "dynamic MIG device %s claim=%s device=%s uuid=%s parent=%s profile=%s placement=%d+%d",
                "shared" if m.uuid in reused_migs else "created",
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

    def undo(self, claim_uid: str, entry: GpuClaimEntry) -> None:
        """Reverse what _apply did for this claim alone; idempotent (undoing what does not exist is
        fine). What it may share with other claims goes in `release`."""
        for d in entry.driverData.mpsDaemons:
            _log.info("MPS control daemon stopped claim=%s id=%s", claim_uid, d.controlDaemonID)

    def release(self, data: CheckpointData[GpuClaimData], claim_uid: str, entry: GpuClaimEntry) -> None:
        """A dynamic MIG device is destroyed and a GPU's time slice reset only when no entry left in
        `data`, in any state, holds it (NVIDIA counts completed claims only; a partial one may be
        completed by the kubelet's retry). Counted afresh from the checkpoint on every call."""
        undo = entry.driverData
        if undo.shares and entry.cdiSpec and self.nvidia_smi is not None:
            self.nvidia_smi.remove_share_files(entry.cdiSpec)  # each share's own: not counted
        if not (undo.migDevices or undo.timeSlicing):
            return
        others = data.claims.values()
        in_use = {m.uuid for e in others for m in e.driverData.migDevices} if undo.migDevices else set()
        sliced = {t.uuid for e in others for t in e.driverData.timeSlicing} if undo.timeSlicing else set()
        for t in undo.timeSlicing:
            if t.uuid in sliced:
                _log.info(
                    "time slice still in use by other claims, not reset claim=%s uuid=%s", claim_uid, t.uuid
                )
            else:
                _log.info("time-slice interval reset claim=%s uuid=%s interval=Default", claim_uid, t.uuid)
        for m in undo.migDevices:
            if m.uuid in in_use:
                _log.info(
                    "dynamic MIG device still in use by other claims, kept claim=%s device=%s uuid=%s",
                    claim_uid,
                    m.device,
                    m.uuid,
                )
                continue
            _log.info("dynamic MIG device destroyed claim=%s device=%s uuid=%s", claim_uid, m.device, m.uuid)
            if self.nvidia_smi is not None:
                self.nvidia_smi.remove_info(m.device, m.uuid)

    def has_undo(self, entry: GpuClaimEntry) -> bool:
        """Dynamic MIG devices, MPS daemons or a time-slice interval other than the default to
        reverse; a claim of GPUs at the default interval (NVIDIA's default config for a GPU) or of
        static MIG devices has nothing (undo would reset Default to Default)."""
        undo = entry.driverData
        return bool(
            undo.migDevices
            or undo.mpsDaemons
            or any(t.interval != configs.INTERVAL_DEFAULT for t in undo.timeSlicing)
        )

    def before_spec(self, spec: Mapping[str, Any]) -> None:
        """The nvidia-smi files a spec mounts."""
        if self.nvidia_smi is not None:
            self.nvidia_smi.ensure_files(spec)

    def sweep(self, data: CheckpointData[GpuClaimData]) -> int:
        if self.nvidia_smi is None:
            return 0
        return self.nvidia_smi.sweep(e.cdiSpec for e in data.claims.values() if e.cdiSpec)


def _device_env(spec: Mapping[str, Any], cdi_name: str, prefix: str) -> dict[str, str]:
    """A spec device's `<prefix>KEY=value` env entries, as {KEY: value}."""
    for device in spec.get("devices") or []:
        if isinstance(device, dict) and device.get("name") == cdi_name:
            env = (device.get("containerEdits") or {}).get("env") or []
            return {
                e[len(prefix) :].partition("=")[0]: e.partition("=")[2]
                for e in env
                if isinstance(e, str) and e.startswith(prefix)
            }
    return {}
