"""Prepare and unprepare of compute-domain.nvidia.com claims on one node (§5, §7.3).

Built from the same pieces as the GPU plugin's DeviceState — claim parsing, the node-wide
`pu.lock`, the checkpoint (CheckpointStore / ClaimEntry) and CDI spec files (CdiSpecStore) — but
with the ComputeDomain lifecycle, which has a wait in the middle:

    prepare:   parse + strict configs -> look up the CD (namespace check)
               -> [locked] PrepareCompleted? return it; else record PrepareStarted (CD UID)
               -> channel: label the node (refused if another CD owns it), then require this
                  node's daemon entry Ready (retryable error otherwise) -- unlocked, so the daemon
                  claim of the same node can be prepared meanwhile
               -> daemon: create the IMEX config directory
               -> [locked] channel-0 exclusivity, CDI spec, PrepareCompleted
    unprepare: [locked] unknown? done -> channel: remove the node label (only if it carries the
               claim's CD UID) -> delete the CDI spec -> drop the entry

A PrepareStarted entry is kept while a channel waits for its daemon, so an unprepare of a claim
that never became ready still removes the node label it caused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dra_fake import cdi
from dra_fake.cd import config as cdconfig
from dra_fake.cd import imex
from dra_fake.cd.cdi import base_device_id, channel_edits, claim_spec, daemon_edits
from dra_fake.cd.domains import NAMESPACE_MISMATCH, DomainRef, NodeOwnedError
from dra_fake.checkpoint import (
    DEFAULT_BOOT_ID_PATH,
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointedDevice,
    CheckpointStore,
    ClaimEntry,
    ComputeDomainRecord,
    UndoData,
)
from dra_fake.configs import main_request
from dra_fake.kubelet.api import PreparedDevice
from dra_fake.locking import DEFAULT_TIMEOUT_SECONDS, LockTimeoutError, NodeSerializer
from dra_fake.prepare import ClaimError, PermanentClaimError, parse_claim

log = logging.getLogger(__name__)

CHANNEL_DEVICE = "channel-0"
DAEMON_DEVICE = "daemon-0"
DEVICE_TYPES = {CHANNEL_DEVICE: "channel", DAEMON_DEVICE: "daemon"}


class Domains(Protocol):
    """The API-server side (dra_fake.cd.domains.ComputeDomainApi; a fake in unit tests)."""

    def get_by_uid(self, uid: str) -> DomainRef | None: ...
    def add_node_label(self, node: str, uid: str) -> None: ...
    def remove_node_label(self, node: str, uid: str) -> bool: ...
    def node_ready(self, uid: str, clique_id: str, node: str) -> bool: ...


class DaemonNotReady(ClaimError):
    """Retryable: this node's IMEX daemon for the ComputeDomain is not Ready yet."""


@dataclass(frozen=True)
class _Plan:
    device_type: str  # channel | daemon
    request: str
    pool: str
    device: str
    config: cdconfig.CdConfig
    domain: DomainRef


def _to_prepared(d: CheckpointedDevice) -> PreparedDevice:
    return PreparedDevice(
        request_names=tuple(d.requests),
        pool_name=d.poolName,
        device_name=d.deviceName,
        cdi_device_ids=tuple(d.cdiDeviceIDs),
    )


class ComputeDomainState:
    def __init__(
        self,
        driver_name: str,
        node_name: str,
        cdi_root: Path,
        plugin_data_dir: Path,
        domains: Domains,
        clique_id: str,
        channel_major: int | None,
        daemon_gid: int = 65532,
        boot_id_path: Path | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.driver = driver_name
        self.node = node_name
        self.data_dir = Path(plugin_data_dir)
        self.domains = domains
        self.clique_id = clique_id
        self.channel_major = channel_major
        self.daemon_gid = daemon_gid
        self.lock_timeout = lock_timeout
        self.cdi = cdi.CdiSpecStore(Path(cdi_root), driver_name)
        self.store = CheckpointStore(self.data_dir, boot_id_path or DEFAULT_BOOT_ID_PATH)
        self._serializer = NodeSerializer(self.data_dir, self.lock_timeout)

    # --- public API ---------------------------------------------------------------------------

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        parsed = parse_claim(claim, self.driver)
        if not parsed.results:
            return []
        plan = self._plan(parsed.namespace, parsed.results, parsed.config)
        record = ComputeDomainRecord(
            type="channel" if plan.device_type == "channel" else "daemon",
            domainID=plan.domain.uid,
            allocationMode=getattr(plan.config, "allocation_mode", ""),
        )
        done = self._begin(parsed.uid, parsed.name, parsed.namespace, record)
        if done is not None:
            return done
        if plan.device_type == "channel":
            try:
                self.domains.add_node_label(self.node, plan.domain.uid)
            except NodeOwnedError as err:
                raise ClaimError(
                    f"error adding node label for ComputeDomain {plan.domain.uid}: {err}"
                ) from None
            if not self.domains.node_ready(plan.domain.uid, self.clique_id, self.node):
                raise DaemonNotReady(
                    f"error preparing channel for ComputeDomain {plan.domain.namespace}/{plan.domain.name}: "
                    f"the IMEX daemon on node {self.node} is not Ready yet (retrying)"
                )
        else:
            directory = imex.domain_dir(self.data_dir, plan.domain.uid)
            try:
                imex.write_template(directory, self.daemon_gid)
            except PermissionError as err:
                raise ClaimError(
                    f"error preparing daemon for ComputeDomain {plan.domain.namespace}/{plan.domain.name}: "
                    f"cannot give {directory} to the daemon's group {self.daemon_gid} "
                    f"(the plugin needs the CHOWN capability): {err}"
                ) from None
        return self._complete(parsed.uid, plan)

    def unprepare(self, claim_uid: str) -> None:
        with self._locked():
            data = self.store.load().data
            entry = data.claims.get(claim_uid)
            if entry is None:
                log.info("Unprepare noop: claim not found in checkpoint data", extra={"claimUID": claim_uid})
                return
            record = entry.undo.computeDomain
            try:
                if record is not None and record.type == "channel":
                    self.domains.remove_node_label(self.node, record.domainID)
                self.cdi.remove(claim_uid)
            except Exception as err:
                raise ClaimError(f"error unpreparing claim {claim_uid}: {err}") from err
            del data.claims[claim_uid]
            self.store.save(data)
        log.info("claim unprepared", extra={"claimUID": claim_uid})

    def startup(self) -> dict[str, list[str]]:
        """Restore lost CDI specs of prepared claims; delete specs nobody references."""
        with self._locked():
            data = self.store.load().data
            self.cdi.remove_temp_files()
            self.store.remove_temp_files()
            restored = []
            for uid, entry in data.claims.items():
                if entry.state == PREPARE_COMPLETED and entry.cdiSpec and not self.cdi.exists(uid):
                    self.cdi.write(uid, entry.cdiSpec)
                    restored.append(uid)
            orphans = [uid for uid in self.cdi.claim_uids() if uid not in data.claims]
            for uid in orphans:
                self.cdi.remove(uid)
            self.store.save(data)
        report = {"specsRestored": restored, "orphansRemoved": orphans, "claims": sorted(data.claims)}
        log.info("startup reconciliation", extra=report)
        return report

    def prepared_claims(self) -> dict[str, str]:
        data = self.store.peek()
        return {} if data is None else {uid: e.state for uid, e in data.claims.items()}

    def prepared_device_count(self) -> int:
        data = self.store.peek()
        if data is None:
            return 0
        return sum(len(e.preparedDevices) for e in data.claims.values() if e.state == PREPARE_COMPLETED)

    # --- steps --------------------------------------------------------------------------------

    def _plan(self, namespace: str, results: Any, configs: Any) -> _Plan:
        if len(results) != 1:
            raise PermanentClaimError(
                f"exactly one {self.driver} device per claim is supported, got {len(results)}"
            )
        r = results[0]
        if r.pool != self.node:
            raise PermanentClaimError(f"requested device is not allocatable: {r.device} (pool {r.pool})")
        device_type = DEVICE_TYPES.get(r.device)
        if device_type is None:
            raise PermanentClaimError(f"requested device is not allocatable: {r.device}")
        try:
            config = cdconfig.config_for(
                cdconfig.decode_claim_configs(self.driver, configs), r.request, device_type
            )
        except cdconfig.CdConfigError as err:
            raise PermanentClaimError(str(err)) from None
        domain = self.domains.get_by_uid(config.domain_id)
        if domain is None:
            raise ClaimError(f"ComputeDomain with UID {config.domain_id} not found")
        if device_type == "channel" and domain.namespace != namespace:
            raise PermanentClaimError(NAMESPACE_MISMATCH)
        return _Plan(device_type, r.request, r.pool, r.device, config, domain)

    def _begin(
        self, uid: str, name: str, namespace: str, record: ComputeDomainRecord
    ) -> list[PreparedDevice] | None:
        with self._locked():
            data = self.store.load().data
            entry = data.claims.get(uid)
            if entry is not None and entry.state == PREPARE_COMPLETED:
                if entry.cdiSpec and not self.cdi.exists(uid):
                    self.cdi.write(uid, entry.cdiSpec)
                return [_to_prepared(d) for d in entry.preparedDevices]
            data.claims[uid] = ClaimEntry(
                state=PREPARE_STARTED, name=name, namespace=namespace, undo=UndoData(computeDomain=record)
            )
            self.store.save(data)
        return None

    def _complete(self, uid: str, plan: _Plan) -> list[PreparedDevice]:
        domain = plan.domain
        if plan.device_type == "channel":
            assert isinstance(plan.config, cdconfig.ChannelConfig)
            edits = channel_edits(
                domain.uid,
                domain.name,
                domain.namespace,
                plan.config.allocation_mode,
                self.clique_id,
                self.channel_major,
                self.data_dir,
            )
        else:
            edits = daemon_edits(
                domain.uid,
                domain.name,
                domain.namespace,
                self.clique_id,
                imex.domain_dir(self.data_dir, domain.uid),
            )
        name = cdi.cdi_device_name(uid, plan.device)
        spec = claim_spec(self.driver, [(name, edits)])
        ids = [cdi.cdi_device_id(self.driver, name)]
        if plan.device_type == "daemon":
            ids.insert(0, base_device_id(self.driver))
        device = CheckpointedDevice(
            requests=[main_request(plan.request)],
            poolName=plan.pool,
            deviceName=plan.device,
            cdiDeviceIDs=ids,
        )
        with self._locked():
            data = self.store.load().data
            entry = data.claims.get(uid)
            if entry is None:  # unprepared while we waited: the kubelet gave up on this claim
                raise ClaimError(f"claim {uid} was unprepared while it was being prepared")
            if entry.state == PREPARE_COMPLETED:
                return [_to_prepared(d) for d in entry.preparedDevices]
            if plan.device_type == "channel":
                for other_uid, other in data.claims.items():
                    if (
                        other_uid != uid
                        and other.state == PREPARE_COMPLETED
                        and any(d.deviceName == CHANNEL_DEVICE for d in other.preparedDevices)
                    ):
                        raise ClaimError(f"channel 0 already allocated by claim {other_uid}")
            self.cdi.write(uid, spec)
            entry.state = PREPARE_COMPLETED
            entry.preparedDevices = [device]
            entry.cdiSpec = spec
            self.store.save(data)
        log.info(
            "claim prepared",
            extra={
                "claimUID": uid,
                "device": plan.device,
                "computeDomain": domain.uid,
                "cliqueID": self.clique_id,
            },
        )
        return [_to_prepared(device)]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            with self._serializer.hold():
                yield
        except LockTimeoutError as exc:
            raise ClaimError(str(exc)) from exc
