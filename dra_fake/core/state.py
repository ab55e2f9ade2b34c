"""The prepared claims of one driver on one node: the state both kubelet plugins are built on.

A driver subclasses PreparedClaims with its checkpoint payload (a DriverData model) and writes
`prepare`; this base gives it, the same for every driver:

- the node-wide lock (dra_fake.core.locking: a process mutex + the `pu.lock` flock), whose timeout
  is a retryable ClaimError;
- the checkpoint (dra_fake.core.checkpoint), loaded on every call, so plugin instances of a rolling
  update can take turns; a corrupt checkpoint is rebuilt from the claims' CDI specs
  (`recover_entry`) and reported (`on_checkpoint_error`);
- `unprepare`: mark PrepareStarted, undo the driver's side effects (`undo`), delete the CDI spec,
  drop the entry; a claim that is not prepared is a success;
- `startup` reconciliation: stale temp files removed, PrepareStarted claims rolled back, lost CDI
  specs of completed claims rewritten, CDI specs nobody references deleted;
- crash points (dra_fake.core.crashpoints), where tests SIGKILL the process to prove each step is safe.

docs/prepare.md argues why a SIGKILL between any two steps leaves checkpoint and CDI files
consistent.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from dra_fake.core import cdi, metrics
from dra_fake.core.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointData,
    CheckpointedDevice,
    ClaimEntry,
    P,
)
from dra_fake.core.checkpointstore import DEFAULT_BOOT_ID_PATH, CheckpointStore
from dra_fake.core.claims import ClaimError, ParsedClaim, parse_claim
from dra_fake.core.crashpoints import crash_point
from dra_fake.core.groupcommit import GroupCommit
from dra_fake.core.locking import DEFAULT_TIMEOUT_SECONDS, LockTimeoutError, NodeSerializer
from dra_fake.kubelet.api import PreparedDevice

_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class StartupReport:
    checkpoint_status: str  # ok | missing | boot-id-changed | corrupt
    rolled_back: tuple[str, ...] = ()  # PrepareStarted claims undone and dropped
    orphans_removed: tuple[str, ...] = ()  # CDI specs without a checkpoint entry, deleted
    specs_restored: tuple[str, ...] = ()  # PrepareCompleted claims whose missing CDI spec was rewritten
    recovered: tuple[str, ...] = ()  # claims rebuilt from CDI specs after a corrupt checkpoint
    temp_files_removed: int = 0
    driver_files_removed: int = 0  # the driver's own files no entry needs (PreparedClaims.sweep)


@dataclass(eq=False)
class _Unprepare:
    claim_uid: str
    entry: ClaimEntry[Any] | None = None  # the claim's entry; None: not prepared
    dropped: bool = False  # nothing to undo: spec and entry went in the first step
    error: Exception | None = None  # its release failed (`release`): the claim stays


def to_prepared(d: CheckpointedDevice) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(d.requests),
        pool_name=d.poolName,
        device_name=d.deviceName,
        cdi_device_ids=tuple(d.cdiDeviceIDs),
        share_id=d.shareID,
    )


class PreparedClaims(ABC, Generic[P]):
    """Prepared claims of one driver on one node, persisted in the checkpoint and CDI root."""

    def __init__(
        self,
        driver_name: str,
        pool_name: str,
        payload: type[P],
        cdi_root: Path,
        plugin_data_dir: Path,
        boot_id_path: Path | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_checkpoint_error: Callable[[str], None] = metrics.record_checkpoint_error,
    ) -> None:
        self.driver = driver_name
        self.pool = pool_name
        self.data_dir = Path(plugin_data_dir)
        self.lock_timeout = lock_timeout
        self._serializer = NodeSerializer(self.data_dir, self.lock_timeout)
        self.cdi = cdi.CdiSpecStore(Path(cdi_root), driver_name)
        self.store: CheckpointStore[P] = CheckpointStore(
            self.data_dir, payload, boot_id_path or DEFAULT_BOOT_ID_PATH, on_corrupt=on_checkpoint_error
        )
        self._unprepare_begin = self.group(self._begin_unprepare)
        self._unprepare_end = self.group(self._drop_unprepared)

    # --- what a driver provides ---------------------------------------------------------------

    @abstractmethod
    def prepare_claim(self, parsed: ParsedClaim) -> list[PreparedDevice]:
        """Prepare the claim's devices of this driver (it has some); idempotent. Raises ClaimError."""

    def undo(self, claim_uid: str, entry: ClaimEntry[P]) -> None:
        """Reverse the side effects of a (partial) preparation; idempotent."""

    def release(self, data: CheckpointData[P], claim_uid: str, entry: ClaimEntry[P]) -> None:
        """Under the node lock, right after the claim's entry left `data` (not yet saved): release
        what it held together with other entries (a device several claims share), if no entry
        left in `data` holds it. Idempotent: a crash before the save brings the entry back, and
        its rollback releases again."""

    def has_undo(self, entry: ClaimEntry[P]) -> bool:
        """Whether `undo` has anything to do for `entry`; a claim without goes in one step (see
        `unprepare`). A driver whose undo is sometimes empty says so."""
        return True

    @abstractmethod
    def recover_entry(self, claim_uid: str, spec: Mapping[str, Any]) -> ClaimEntry[P] | None:
        """After a corrupt checkpoint: the claim's entry (PrepareStarted, recovered=True) as far as
        its CDI spec tells, or None if the spec is not one of ours."""

    def before_spec(self, spec: Mapping[str, Any]) -> None:
        """Files a spec mounts, there before a container can use the spec: written before a spec
        restored at start-up or rewritten, and by a driver's prepare before it answers."""

    def sweep(self, data: CheckpointData[P]) -> int:
        """At start-up, under the lock: remove the driver's own files that no entry of `data`
        needs (left by a crash, or by an older version); returns how many went."""
        return 0

    # --- the shared lifecycle -----------------------------------------------------------------

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        """Prepare a claim's devices of this driver; idempotent. A ClaimError comes wrapped as
        both NVIDIA drivers wrap it (docs/reference/nvidia-gpu-driver.md#45-how-errors-reach-the-kubelet):
        `error preparing devices for claim <ns>/<name>:<uid>: <cause>`."""
        parsed = parse_claim(claim, self.driver)
        if not parsed.results:
            _log.info("prepare: no devices of this driver claim=%s", parsed.uid)
            return []
        try:
            return self.prepare_claim(parsed)
        except ClaimError as err:
            outer = f"error preparing devices for claim {parsed.namespace}/{parsed.name}:{parsed.uid}"
            raise type(err)(f"{outer}: {err}") from err

    def unprepare(self, claim_uid: str) -> None:
        """Undo a claim's preparation; a claim not in the checkpoint is a success. Concurrent
        unprepares share their checkpoint writes (group commit).

        A claim whose driver has something to undo (`has_undo`) goes in two steps: its entry is
        marked PrepareStarted and `unpreparing` first, so a crash or a racing prepare sees it;
        the driver's `undo` runs outside the node lock (it may call the API server); then the
        spec and the entry go. A claim with nothing to undo goes in one step under the lock, as
        NVIDIA's plugin unprepares: spec removed, entry dropped (docs/prepare.md#unprepare)."""
        item = _Unprepare(claim_uid)
        try:
            self.submit(self._unprepare_begin, item)
            if item.entry is None:
                _log.info("Unprepare noop: claim not found in checkpoint data claim=%s", claim_uid)
                return
            if not item.dropped and item.error is None:
                self.undo(claim_uid, item.entry)
                crash_point("unprepare:after-undo")
                self.submit(self._unprepare_end, item)
            if item.error is not None:
                raise item.error
        except ClaimError:
            raise
        except Exception as exc:
            raise ClaimError(f"error unpreparing devices for claim {claim_uid}: {exc}") from exc
        crash_point("unprepare:after-dropped")
        _log.debug("claim unprepared claim=%s", claim_uid)  # the caller logs it at info level

    def _begin_unprepare(self, items: list[_Unprepare]) -> None:
        crash_point("unprepare:after-lock")
        data, _ = self.load()
        marked, dropped = [], []
        for item in items:
            item.entry = data.claims.get(item.claim_uid)
            if item.entry is None:
                continue
            if self.has_undo(item.entry):
                item.entry.state = PREPARE_STARTED  # from here on the claim is partial: roll back
                item.entry.unpreparing = True
                marked.append(item)
            else:
                item.dropped = True
                dropped.append(item)
        marks = [item.claim_uid for item in marked]
        if dropped:
            self._drop(data, dropped, marks)  # its save holds the marks too
        elif marked:
            self.store.save(data, durable=False, touched=marks)  # write-ahead: see CheckpointStore.save
        if marked:
            crash_point("unprepare:after-started")

    def _drop_unprepared(self, items: list[_Unprepare]) -> None:
        data, _ = self.load()
        self._drop(data, items)

    def _drop(self, data: CheckpointData[P], items: list[_Unprepare], marks: Sequence[str] = ()) -> None:
        """What `items`' claims hold with others released (`release`; a claim whose release fails
        stays, with that error), then their specs, then their entries (one checkpoint write). The
        removals are not made durable on their own: the entries' drop is, and a spec that a power
        cut brings back without its entry is an orphan, which start-up deletes. A crash between
        them leaves a prepared claim whose spec start-up restores (and a marked one it rolls back,
        releasing again); the kubelet, which got no answer, unprepares it again. `marks`: the
        claims marked in `data` since it was loaded (saved too)."""
        gone = []
        for uid in sorted({item.claim_uid for item in items if item.claim_uid in data.claims}):
            entry = data.claims.pop(uid)  # one by one: each release counts the holders still left
            try:
                self.release(data, uid, entry)
            except Exception as exc:  # that claim's error: it stays as it is, the kubelet retries
                data.claims[uid] = entry
                for item in items:
                    if item.claim_uid == uid:
                        item.error = exc
                continue
            gone.append(uid)
        if not gone:
            if marks:
                self.store.save(data, durable=False, touched=list(marks))
            return
        for uid in gone:
            self.cdi.remove(uid, sync_dir=False)
        crash_point("unprepare:after-cdi-removed")
        self.store.save(data, touched=[*gone, *marks])

    def startup(self) -> StartupReport:
        """Once at plugin start: roll back PrepareStarted claims, restore the CDI specs of
        completed claims that are lost or differ from the stored spec (a power cut), delete CDI
        specs no entry references, delete stale temp files."""
        with self.locked():
            data, status = self.load()
            recovered = tuple(uid for uid, e in data.claims.items() if e.recovered)
            temp = len(self.cdi.remove_temp_files()) + len(self.store.remove_temp_files())
            rolled_back = []
            for uid, entry in list(data.claims.items()):
                if entry.state == PREPARE_STARTED and not entry.recovered:
                    try:
                        self.rollback(data, uid)
                        rolled_back.append(uid)
                    except Exception as exc:  # e.g. the API server is away: the kubelet retries
                        _log.error("rollback failed, kept as PrepareStarted claim=%s error=%s", uid, exc)
            restored = []
            for uid, entry in list(data.claims.items()):
                if entry.state == PREPARE_COMPLETED and not self.spec_intact(uid, entry):
                    try:
                        if entry.cdiSpec is None:
                            raise cdi.CdiSpecError("no CDI spec recorded")
                        self.write_spec(uid, entry.cdiSpec)
                        restored.append(uid)
                    except (cdi.CdiSpecError, OSError) as exc:
                        _log.error(
                            "CDI spec of a prepared claim cannot be restored, rolling back claim=%s error=%s",
                            uid,
                            exc,
                        )
                        self.rollback(data, uid)
                        rolled_back.append(uid)
            for entry in data.claims.values():  # a new plugin version may bring new files
                if entry.state == PREPARE_COMPLETED and entry.cdiSpec:
                    self.before_spec(entry.cdiSpec)
            orphans = [uid for uid in self.cdi.claim_uids() if uid not in data.claims]
            for uid in orphans:
                self.cdi.remove(uid)
            swept = self.sweep(data)
            self.store.save(data, compact=True)  # each start begins with an empty journal
        report = StartupReport(
            checkpoint_status=status,
            rolled_back=tuple(rolled_back),
            orphans_removed=tuple(orphans),
            specs_restored=tuple(restored),
            recovered=recovered,
            temp_files_removed=temp,
            driver_files_removed=swept,
        )
        _log.info(
            "startup reconciliation driver=%s checkpoint=%s rolledBack=%s orphansRemoved=%s "
            "specsRestored=%s recovered=%s tempFilesRemoved=%d driverFilesRemoved=%d",
            self.driver,
            status,
            ",".join(report.rolled_back) or "-",
            ",".join(report.orphans_removed) or "-",
            ",".join(report.specs_restored) or "-",
            ",".join(report.recovered) or "-",
            temp,
            swept,
        )
        return report

    def prepared_claims(self) -> dict[str, str]:
        """Claim UID -> state, read without the lock (for metrics; may lag one operation)."""
        return {uid: state for uid, (state, _) in self.store.states().items()}

    def claim_counts(self) -> dict[str, int]:
        counts = {PREPARE_STARTED: 0, PREPARE_COMPLETED: 0}
        for state in self.prepared_claims().values():
            counts[state] += 1
        return counts

    def prepared_device_count(self) -> int:
        """Devices of PrepareCompleted claims (for the dra_fake_prepared_devices gauge)."""
        return sum(n for state, n in self.store.states().values() if state == PREPARE_COMPLETED)

    # --- steps for drivers --------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """This process's mutex, then the node-wide flock; a timeout is a (retryable) ClaimError."""
        try:
            with self._serializer.hold():
                try:
                    yield
                except BaseException:
                    self.store.forget()  # the loaded checkpoint may have been changed, not saved
                    raise
        except LockTimeoutError as exc:
            raise ClaimError(str(exc)) from exc

    def group(self, run: Callable[[list[T]], None]) -> GroupCommit[T]:
        """A group commit (dra_fake.core.groupcommit) of `run` under this state's node lock; a
        batch that fails leaves no half-changed checkpoint object behind."""

        def guarded(items: list[T]) -> None:
            try:
                run(items)
            except BaseException:
                self.store.forget()
                raise

        return GroupCommit(self._serializer, guarded)

    def submit(self, group: GroupCommit[T], item: T) -> None:
        """`group.submit(item)`; a lock timeout is a (retryable) ClaimError."""
        try:
            group.submit(item)
        except LockTimeoutError as exc:
            raise ClaimError(str(exc)) from exc

    def load(self) -> tuple[CheckpointData[P], str]:
        """The checkpoint (under the lock); a corrupt one is rebuilt from the CDI specs."""
        result = self.store.load()
        if result.status == "corrupt":
            recovered = []
            for uid in self.cdi.claim_uids():
                entry = self.recover_entry(uid, self.cdi.read(uid) or {})
                if entry is not None:
                    result.data.claims[uid] = entry
                    recovered.append(uid)
            _log.error(
                "checkpoint rebuilt from CDI specs driver=%s claims=%s (as PrepareStarted)",
                self.driver,
                ",".join(recovered) or "-",
            )
            self.store.save(result.data)
        elif result.status == "boot-id-changed":
            self.store.save(result.data)
        return result.data, result.status

    def rollback(self, data: CheckpointData[P], claim_uid: str) -> None:
        """Undo a partial claim and forget it (the caller saves the checkpoint)."""
        self.undo(claim_uid, data.claims[claim_uid])
        self.cdi.remove(claim_uid)
        entry = data.claims.pop(claim_uid)
        try:
            self.release(data, claim_uid, entry)
        except BaseException:
            data.claims[claim_uid] = entry  # still partial: the next call rolls it back again
            raise
        _log.info("partially prepared claim rolled back claim=%s", claim_uid)

    def abort(self, data: CheckpointData[P], claim_uid: str, exc: Exception) -> None:
        """A prepare failed after its PrepareStarted entry was written: roll it back now; if even
        that fails the entry stays PrepareStarted and the next call rolls it back."""
        _log.error("prepare failed, rolling back claim=%s error=%s", claim_uid, exc)
        try:
            self.rollback(data, claim_uid)
            self.store.save(data)
        except Exception as rollback_exc:
            _log.error("rollback failed claim=%s error=%s", claim_uid, rollback_exc)

    def write_spec(self, claim_uid: str, spec: Mapping[str, Any], durable: bool = True) -> None:
        """A prepare writes its spec with `durable=False`: the PrepareCompleted entry saved after
        it holds the spec, and startup restores a spec file a power cut lost or emptied."""
        self.before_spec(spec)
        self.cdi.write(claim_uid, spec, durable=durable)

    def spec_intact(self, claim_uid: str, entry: ClaimEntry[P]) -> bool:
        """Whether a completed claim's spec file is there and holds the stored spec."""
        if entry.cdiSpec is None:  # nothing to compare with (not written by this version)
            return self.cdi.exists(claim_uid)
        return self.cdi.holds(claim_uid, entry.cdiSpec)

    def ensure_spec(self, claim_uid: str, entry: ClaimEntry[P]) -> None:
        """A completed claim's spec file was lost (someone deleted it): write it again."""
        if entry.cdiSpec and not self.cdi.exists(claim_uid):
            _log.warning("CDI spec of a prepared claim was missing, rewritten claim=%s", claim_uid)
            try:
                self.write_spec(claim_uid, entry.cdiSpec)
            except (cdi.CdiSpecError, OSError) as exc:
                raise ClaimError(f"error restoring the CDI spec of claim {claim_uid}: {exc}") from exc

    def spec_devices(self, claim_uid: str, spec: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(CDI device name, device name) of a claim spec's devices: `<claimUID>-<device>[-<shareID>]`."""
        out = []
        for dev in spec.get("devices") or []:
            name = str(dev.get("name", "")) if isinstance(dev, dict) else ""
            rest = name.removeprefix(f"{claim_uid}-")
            if rest != name:
                out.append((name, rest))
        return out
