"""Prepare and unprepare of compute-domain.nvidia.com claims on one node
(docs/reference/nvidia-compute-domains.md#7-compute-domain-kubelet-plugin).

Built on dra_fake.core.state.PreparedClaims like the GPU driver (lock, checkpoint, unprepare,
start-up reconciliation and recovery from CDI specs), with the ComputeDomain lifecycle, which has
a wait in the middle:

    prepare:   parse + strict configs -> look up the CD (namespace check)
               -> [locked] PrepareCompleted? return it; else record PrepareStarted (CD UID)
               -> channel: label the node (refused if another CD owns it), then require this
                  node's daemon entry Ready (retryable error otherwise) -- unlocked, so the daemon
                  claim of the same node can be prepared meanwhile
               -> daemon: create the IMEX config directory
               -> [locked] channel-0 exclusivity, CDI spec, PrepareCompleted
    unprepare: (core) [locked] unknown? done -> PrepareStarted -> undo: channel: remove the node
               label (only if it carries the claim's CD UID) -> delete the CDI spec -> drop the entry

A PrepareStarted entry is kept while a channel waits for its daemon, so an unprepare of a claim
that never became ready still removes the node label it caused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from computedomain import imex
from computedomain.plugin import configs as cdconfig
from computedomain.plugin.domains import NAMESPACE_MISMATCH, DomainRef, NodeOwnedError
from computedomain.plugin.edits import base_device_id, channel_edits, claim_spec, daemon_edits
from dra_fake.core import cdi, metrics
from dra_fake.core.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointData,
    CheckpointedDevice,
    ClaimEntry,
    DriverData,
)
from dra_fake.core.claims import AllocationResult, ClaimError, ParsedClaim, PermanentClaimError
from dra_fake.core.locking import DEFAULT_TIMEOUT_SECONDS
from dra_fake.core.opaque import main_request
from dra_fake.core.state import PreparedClaims, to_prepared
from dra_fake.kubelet.api import PreparedDevice

log = logging.getLogger(__name__)

# NVIDIA's wording (docs/reference/nvidia-compute-domains.md#72-channel-claims).
APPLYING = "error applying config: "
NODE_NOT_READY = "current node not ready in ComputeDomain"
CHANNEL_DEVICE = "channel-0"
DAEMON_DEVICE = "daemon-0"
DEVICE_TYPES = {CHANNEL_DEVICE: "channel", DAEMON_DEVICE: "daemon"}


class Domains(Protocol):
    """The API-server side (computedomain.plugin.domains.ComputeDomainApi; a fake in unit tests)."""

    def get_by_uid(self, uid: str) -> DomainRef | None: ...
    def add_node_label(self, node: str, uid: str) -> None: ...
    def remove_node_label(self, node: str, uid: str) -> bool: ...
    def node_ready(self, uid: str, clique_id: str, node: str) -> bool: ...


def daemon_namespace_refused(namespace: str, driver_namespace: str) -> str:
    return (
        f"daemon claims are only prepared in the driver namespace {driver_namespace!r}, not in {namespace!r}"
    )


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


class DomainClaimData(DriverData):
    """A compute-domain.nvidia.com claim: which ComputeDomain it belongs to (a channel claim
    labels the node with this UID; unprepare removes the label only while it carries it)."""

    type: Literal["channel", "daemon"]
    domainID: str
    allocationMode: str = ""

    @classmethod
    def from_v1_undo(cls, undo: dict[str, Any]) -> DomainClaimData:
        return cls.model_validate(undo.get("computeDomain") or {})


DomainClaimEntry = ClaimEntry[DomainClaimData]


class ComputeDomainState(PreparedClaims[DomainClaimData]):
    def __init__(
        self,
        driver_name: str,
        node_name: str,
        cdi_root: Path,
        plugin_data_dir: Path,
        domains: Domains,
        clique_id: str,
        driver_namespace: str,
        daemon_gid: int = 65532,
        boot_id_path: Path | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        on_checkpoint_error: Callable[[str], None] = metrics.record_checkpoint_error,
    ) -> None:
        super().__init__(
            driver_name,
            node_name,
            DomainClaimData,
            cdi_root,
            plugin_data_dir,
            boot_id_path=boot_id_path,
            lock_timeout=lock_timeout,
            on_checkpoint_error=on_checkpoint_error,
        )
        self.node = node_name
        self.domains = domains
        self.clique_id = clique_id
        self.daemon_gid = daemon_gid
        self.driver_namespace = driver_namespace

    # --- public API ---------------------------------------------------------------------------

    def domain_of(self, claim_uid: str) -> str | None:
        """The ComputeDomain UID of a prepared claim (None: not prepared here)."""
        data = self.store.peek()
        entry = data.claims.get(claim_uid) if data is not None else None
        return entry.driverData.domainID if entry is not None else None

    def prepare_claim(self, parsed: ParsedClaim) -> list[PreparedDevice]:
        """Errors worded as NVIDIA's (docs/reference/nvidia-compute-domains.md#72-channel-claims):
        `prepare devices failed: <cause>`, a step of applying the config adding `error applying
        config: `; the base class adds the outer layer."""
        try:
            return self._prepare(parsed)
        except ClaimError as err:
            raise type(err)(f"prepare devices failed: {err}") from err

    def _prepare(self, parsed: ParsedClaim) -> list[PreparedDevice]:
        plan = self._plan(parsed.namespace, parsed.results, parsed.config)
        record = DomainClaimData(
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
                raise ClaimError(f"{APPLYING}error adding Node label for ComputeDomain: {err}") from None
            self._still_preparing(parsed.uid, plan.domain.uid)
            if not self.domains.node_ready(plan.domain.uid, self.clique_id, self.node):
                raise DaemonNotReady(f"{APPLYING}error asserting ComputeDomain Ready: {NODE_NOT_READY}")
        else:
            directory = imex.domain_dir(self.data_dir, plan.domain.uid)
            try:
                imex.write_template(directory, self.daemon_gid)
            except PermissionError as err:
                raise ClaimError(
                    f"{APPLYING}error preparing ComputeDomain daemon settings for requests "
                    f"'[{plan.request}]' in claim '{parsed.uid}': cannot give {directory} to the "
                    f"daemon's group {self.daemon_gid} (the plugin needs the CHOWN capability): {err}"
                ) from None
        return self._complete(parsed.uid, plan)

    def undo(self, claim_uid: str, entry: DomainClaimEntry) -> None:
        """A channel claim's node label goes (only while it carries the claim's ComputeDomain); a
        daemon claim's IMEX directory goes (the kubelet unprepares once the daemon has stopped)."""
        record = entry.driverData
        if record.type == "channel":
            self.domains.remove_node_label(self.node, record.domainID)
        elif record.domainID:
            imex.remove_domain_dir(self.data_dir, record.domainID)

    def sweep(self, data: CheckpointData[DomainClaimData]) -> int:
        """IMEX directories of domains no daemon claim here holds."""
        held = {e.driverData.domainID for e in data.claims.values() if e.driverData.type == "daemon"}
        gone = [uid for uid in imex.domain_uids(self.data_dir) if uid not in held]
        return sum(imex.remove_domain_dir(self.data_dir, uid) for uid in gone)

    def recover_entry(self, claim_uid: str, spec: Mapping[str, Any]) -> DomainClaimEntry | None:
        """From the spec: the device (channel-0 / daemon-0) and the domain (COMPUTE_DOMAIN_UUID)."""
        for cdi_name, device in self.spec_devices(claim_uid, spec):
            device_type = DEVICE_TYPES.get(device)
            if device_type is None:
                continue
            env = [
                e
                for d in spec.get("devices") or []
                if isinstance(d, dict) and d.get("name") == cdi_name
                for e in (d.get("containerEdits") or {}).get("env") or []
            ]
            uid = next((e.split("=", 1)[1] for e in env if e.startswith("COMPUTE_DOMAIN_UUID=")), "")
            if not uid:
                continue
            ids = [cdi.cdi_device_id(self.driver, cdi_name)]
            if device_type == "daemon":
                ids.insert(0, base_device_id(self.driver))
            return DomainClaimEntry(
                state=PREPARE_STARTED,
                preparedDevices=[
                    CheckpointedDevice(requests=[], poolName=self.pool, deviceName=device, cdiDeviceIDs=ids)
                ],
                driverData=DomainClaimData(
                    type="channel" if device_type == "channel" else "daemon", domainID=uid
                ),
                recovered=True,
            )
        return None

    # --- steps --------------------------------------------------------------------------------

    def _plan(
        self, namespace: str, results: tuple[AllocationResult, ...], configs: tuple[Mapping[str, object], ...]
    ) -> _Plan:
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
        asserting = (
            f"{APPLYING}error asserting ComputeDomain's namespace: " if device_type == "channel" else ""
        )
        if domain is None:
            raise ClaimError(f"{asserting}ComputeDomain not found: {config.domain_id}")
        if device_type == "channel" and domain.namespace != namespace:
            raise PermanentClaimError(f"{asserting}{NAMESPACE_MISMATCH}")
        if device_type == "daemon" and namespace != self.driver_namespace:
            # A daemon claim mounts the domain's IMEX directory read-write: only the controller's
            # daemon pods (in the driver namespace) may have one.
            raise PermanentClaimError(daemon_namespace_refused(namespace, self.driver_namespace))
        return _Plan(device_type, r.request, r.pool, r.device, config, domain)

    def _still_preparing(self, uid: str, domain_uid: str) -> None:
        """After labelling the node (no lock held): if an unprepare of this claim began meanwhile,
        its label removal may already have run, so take the label back and give up."""
        with self.locked():
            data, _ = self.load()
            entry = data.claims.get(uid)
            gone = entry is None or entry.unpreparing
        if gone:
            self.domains.remove_node_label(self.node, domain_uid)
            raise ClaimError(f"claim {uid} was unprepared while it was being prepared")

    def _begin(
        self, uid: str, name: str, namespace: str, record: DomainClaimData
    ) -> list[PreparedDevice] | None:
        with self.locked():
            data, _ = self.load()
            entry = data.claims.get(uid)
            interrupted = entry is not None and entry.unpreparing
            if entry is not None and not interrupted and entry.state == PREPARE_COMPLETED:
                self.ensure_spec(uid, entry)
                return [to_prepared(d) for d in entry.preparedDevices]
            if not interrupted:
                data.claims[uid] = DomainClaimEntry(
                    state=PREPARE_STARTED, name=name, namespace=namespace, driverData=record
                )
                self.store.save(data, durable=False)  # write-ahead: see CheckpointStore.save
                return None
        # An unprepare that failed half-way (the API server away while it removed the node
        # label): the kubelet, which serialises a claim's calls, now wants the claim again. Finish
        # the unprepare (its error, if it fails again, is this prepare's), then prepare afresh.
        self.unprepare(uid)
        return self._begin(uid, name, namespace, record)

    def _complete(self, uid: str, plan: _Plan) -> list[PreparedDevice]:
        domain = plan.domain
        if plan.device_type == "channel":
            if not isinstance(plan.config, cdconfig.ChannelConfig):
                raise PermanentClaimError(f"no channel config for request {plan.request}")
            edits = channel_edits(
                domain.uid,
                domain.name,
                domain.namespace,
                plan.config.allocation_mode,
                self.clique_id,
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
        with self.locked():
            data, _ = self.load()
            entry = data.claims.get(uid)
            if entry is None:  # unprepared while we waited: the kubelet gave up on this claim
                raise ClaimError(f"claim {uid} was unprepared while it was being prepared")
            if entry.state == PREPARE_COMPLETED:
                return [to_prepared(d) for d in entry.preparedDevices]
            if plan.device_type == "channel":
                for other_uid, other in data.claims.items():
                    if (
                        other_uid != uid
                        and other.state == PREPARE_COMPLETED
                        and any(d.deviceName == CHANNEL_DEVICE for d in other.preparedDevices)
                    ):
                        raise ClaimError(
                            f"{APPLYING}allocation failed: channel 0 already allocated by claim "
                            f"{other_uid} (according to checkpoint)"
                        )
            self.write_spec(uid, spec, durable=False)
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
        return [to_prepared(device)]
