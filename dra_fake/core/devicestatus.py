"""Prepared devices' status in their claims (`--device-status`): after a prepare, each of the claim's
devices prepared here gets a `Ready` condition and the driver's data in `status.devices`, as a
driver implementing DRAResourceClaimDeviceStatus writes it (docs/prepare.md#device-status).

Off the prepare path: the kubelet has its answer before the status is written. A `ReportingState`
wraps a driver's state; each prepared claim is queued and one thread applies its status
(dra_fake.core.claimstatus). A write that fails is logged, and the claim keeps its prepare.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dra_fake.core import claimstatus

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.serving import ClaimState
    from dra_fake.kubelet.api import PreparedDevice

log = logging.getLogger(__name__)

READY = claimstatus.Condition("Ready", "True", "Prepared", "prepared by the kubelet plugin")

# A device's data: (claim, prepared device) -> the JSON object of its `data`.
DataOf = Callable[[Mapping[str, Any], "PreparedDevice"], dict[str, Any]]


def entries(
    claim: Mapping[str, Any], devices: list[PreparedDevice], driver: str, data_of: DataOf
) -> list[dict[str, Any]]:
    """The status entries of the devices prepared for `claim`, each Ready with its data."""
    found = []
    for device in devices:
        entry: dict[str, Any] = {"driver": driver, "pool": device.pool_name, "device": device.device_name}
        if device.share_id:
            entry["shareID"] = device.share_id
        found.append(entry)
    with_ready = claimstatus.with_conditions(found, [READY], claim)
    for entry, device in zip(with_ready, devices, strict=True):
        data = data_of(claim, device)
        if data:
            entry["data"] = data
    return claimstatus.merged(with_ready, claim, driver)


class ReportingState:
    """A driver's ClaimState whose prepares are reported into the claims' status."""

    def __init__(
        self,
        state: ClaimState,
        driver: str,
        data_of: DataOf,
        api: Callable[[], client.ApiClient],
        version: Callable[[], str],
        stop: threading.Event,
    ) -> None:
        self.state, self.driver, self.data_of = state, driver, data_of
        self.api, self.version, self.stop = api, version, stop
        self._queue: queue.Queue[tuple[Mapping[str, Any], list[PreparedDevice]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        devices = self.state.prepare(claim)
        if devices:
            self._queue.put((claim, devices))
            self._ensure_thread()
        return devices

    def unprepare(self, claim_uid: str) -> None:
        self.state.unprepare(claim_uid)

    def startup(self) -> object:
        return self.state.startup()

    def prepared_claims(self) -> dict[str, str]:
        return self.state.prepared_claims()

    def prepared_device_count(self) -> int:
        return self.state.prepared_device_count()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="device-status", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                claim, devices = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            self.write(claim, devices)

    def write(self, claim: Mapping[str, Any], devices: list[PreparedDevice]) -> bool:
        meta = claim.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            found = entries(claim, devices, self.driver, self.data_of)
            claimstatus.apply(self.api(), claim, found, self.driver, self.version())
        except Exception as err:  # a deallocated or deleted claim, the API server away, RBAC
            log.warning(
                "could not write the devices' status", extra={"claim": where, "error": str(err)[:300]}
            )
            return False
        log.debug("devices' status written", extra={"claim": where, "devices": len(found)})
        return True
