"""The kubelet's device health stream (DRAResourceHealth, KEP-4680): what the kubelet shows in
``pod.status.containerStatuses[].allocatedResourcesStatus``.

``DeviceHealthBoard`` holds the health of every device the plugin publishes (Healthy unless a
fault says otherwise); the servicer streams the complete list when the kubelet opens
``NodeWatchResources``, again on every change, and every ``resend_seconds`` so the kubelet's
per-device timeout (30 s by default) never turns a quiet device Unknown.

Served in both versions the kubelet knows (docs/reference/kubernetes-dra.md#device-health-service):
``v1alpha1.DRAResourceHealth`` (kubelets 1.34-1.36 open it without looking at the advertised list)
and ``v1.DRAResourceHealth`` (1.37 prefers it). Each open stream holds one worker thread of the DRA
server until the kubelet cancels it or the board is closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc

from dra_fake.kubelet.pb.drahealth.v1 import api_pb2 as health_v1
from dra_fake.kubelet.pb.drahealth.v1 import api_pb2_grpc as health_v1_grpc
from dra_fake.kubelet.pb.drahealth.v1alpha1 import api_pb2 as health_v1alpha1
from dra_fake.kubelet.pb.drahealth.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc

log = logging.getLogger(__name__)

# Advertisement names (registration GetInfo), in the kubelet's order of preference.
HEALTH_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
RESEND_SECONDS = 10.0
MAX_MESSAGE = 1024  # the kubelet truncates longer messages

HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
_WIRE = {UNKNOWN: 0, HEALTHY: 1, UNHEALTHY: 2}  # enum HealthStatus, the same in both versions


@dataclass(frozen=True)
class DeviceStatus:
    pool: str
    device: str
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str
    since: int  # Unix seconds of the last change


class DeviceHealthBoard:
    """The health of this plugin's devices; thread-safe. Version numbers let streams wait for news."""

    def __init__(self, resend_seconds: float = RESEND_SECONDS) -> None:
        self.resend_seconds = resend_seconds
        self._cond = threading.Condition()
        self._version = 0
        self._closed = False
        self._devices: dict[tuple[str, str], DeviceStatus] = {}
        self._health: dict[str, tuple[str, str]] = {}  # device name -> (health, message); others Healthy

    def set_devices(self, pool: str, names: Iterable[str]) -> None:
        """The devices the plugin publishes (replaces the previous list)."""
        with self._cond:
            old = self._devices
            self._devices = {}
            for name in names:
                self._devices[(pool, name)] = old.get((pool, name)) or DeviceStatus(
                    pool, name, HEALTHY, "", int(time.time())
                )
            self._apply()

    def set_health(self, health: Mapping[str, tuple[str, str]]) -> None:
        """Device name -> (UNHEALTHY or UNKNOWN, why); every device not named is Healthy."""
        for name, (status, _) in health.items():
            if status not in _WIRE:
                raise ValueError(f"{name}: health {status!r} is not one of {', '.join(_WIRE)}")
        with self._cond:
            self._health = dict(health)
            self._apply()

    def _apply(self) -> None:
        now = int(time.time())
        changed = False
        for key, status in self._devices.items():
            health, message = self._health.get(key[1], (HEALTHY, ""))
            text = message[:MAX_MESSAGE]
            if (status.health, status.message) != (health, text):
                self._devices[key] = DeviceStatus(status.pool, status.device, health, text, now)
                changed = True
        if changed or not self._version:
            self._version += 1
            self._cond.notify_all()

    def snapshot(self) -> tuple[int, list[DeviceStatus]]:
        with self._cond:
            return self._version, sorted(self._devices.values(), key=lambda s: (s.pool, s.device))

    def wait_newer(self, version: int, timeout: float) -> bool:
        """Wait until the board is newer than `version`; False on timeout or once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version > version, timeout)
            return not self._closed and self._version > version

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def close(self) -> None:
        """End every open stream (the plugin is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class _HealthServicer:
    def __init__(self, pb: ModuleType, board: DeviceHealthBoard, driver: str) -> None:
        self.pb, self.board, self.driver = pb, board, driver

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        package = self.pb.DESCRIPTOR.package
        log.info("kubelet opened the device health stream", extra={"driver": self.driver, "version": package})
        version = -1
        while context.is_active() and not self.board.closed:
            version, devices = self.board.snapshot()
            yield self.pb.NodeWatchResourcesResponse(devices=[self._device(s) for s in devices])
            self.board.wait_newer(version, self.board.resend_seconds)
        log.info("device health stream ended", extra={"driver": self.driver, "version": package})

    def _device(self, status: DeviceStatus) -> Any:
        return self.pb.DeviceHealth(
            device=self.pb.DeviceIdentifier(pool_name=status.pool, device_name=status.device),
            health=_WIRE[status.health],
            last_updated_time=status.since,
            message=status.message,
        )


def health_servicers(board: DeviceHealthBoard, driver: str) -> list[tuple[Any, object]]:
    """(add_to_server, servicer) pairs for both versions, for the DRA socket's server."""
    return [
        (health_v1_grpc.add_DRAResourceHealthServicer_to_server, _HealthServicer(health_v1, board, driver)),
        (
            health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server,
            _HealthServicer(health_v1alpha1, board, driver),
        ),
    ]
