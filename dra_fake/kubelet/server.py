"""The kubelet-facing gRPC servers of a DRA kubelet plugin.

``KubeletPlugin`` serves, like Go's ``kubeletplugin`` library
(docs/reference/kubernetes-dra.md#plugin-registration, #dra-grpc-services,
#kubeletplugin-serving-and-prepare):

* ``pluginregistration.Registration`` on ``<registrar_dir>/<driver>-reg.sock`` (rolling update:
  ``<driver>-<podUID>-reg.sock`` or a shorter fallback), which the kubelet's plugin watcher discovers;
* ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and ``...v1beta1.DRAPlugin`` on
  ``<plugins_dir>/<driver>/dra.sock`` (rolling update: ``dra-<podUID>.sock``), translating calls into
  ``DriverHandler.prepare`` / ``unprepare`` (``dra_fake.kubelet.api``).

The DRA server starts before the registration server (the kubelet dials the endpoint as soon as it
sees the registration socket) and stops after it. The DRAPlugin service itself is
``dra_fake.kubelet.draservice``; each server, ``dra_fake.kubelet.socketserver``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc

from dra_fake.kubelet import sockets
from dra_fake.kubelet.api import DriverHandler
from dra_fake.kubelet.device_health import HEALTH_VERSIONS, DeviceHealthBoard, health_servicers
from dra_fake.kubelet.draservice import DRAServicer, InFlight, Observed
from dra_fake.kubelet.metrics import RESULT_SUCCESS, RequestMetrics
from dra_fake.kubelet.pb.dra.v1 import api_pb2 as drapb_v1
from dra_fake.kubelet.pb.dra.v1 import api_pb2_grpc as drapb_v1_grpc
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2 as drapb_v1beta1
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2_grpc as drapb_v1beta1_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.socketserver import SocketServer

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# Advertisement names, not gRPC service names (docs/reference/kubernetes-dra.md#advertised-versions). v1
# first: 1.34+ kubelets take the
# first entry they support; 1.32/1.33 kubelets ignore "v1.DRAPlugin" and pick v1beta1.
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")

REGISTRATION_SERVICE: str = regpb.DESCRIPTOR.services_by_name["Registration"].full_name
DRA_V1_SERVICE: str = drapb_v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
DRA_V1BETA1_SERVICE: str = drapb_v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name

# Calls carrying this metadata key (the health probe's) are served normally but not counted in
# the request metrics, so liveness probing does not drown the kubelet's traffic.
PROBE_METADATA_KEY = "dra-fake-probe"

DEFAULT_MAX_WORKERS = 8  # concurrent DRA calls; the kubelet sends one batch per pod start/stop
HEALTH_STREAM_WORKERS = 2
REGISTRATION_MAX_WORKERS = 2  # GetInfo has a 1 s timeout in the kubelet: never queue behind DRA calls


def _is_probe(context: grpc.ServicerContext) -> bool:
    return any(key == PROBE_METADATA_KEY for key, _ in context.invocation_metadata() or ())


@dataclass(frozen=True)
class RegistrationState:
    """What the kubelet last said in NotifyRegistrationStatus (``registered`` None: nothing yet)."""

    registered: bool | None = None
    error: str = ""
    updated: float | None = None  # time.time() of the last notification


class _RegistrationServicer:
    def __init__(self, plugin: KubeletPlugin) -> None:
        self._plugin = plugin

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        p = self._plugin
        with Observed(p.metrics, "GetInfo", enabled=not _is_probe(context)) as obs:
            info = regpb.PluginInfo(
                type=PLUGIN_TYPE,
                name=p.driver_name,
                endpoint=p.endpoint,
                supported_versions=list(self._plugin.supported_versions),
            )
            obs.result = RESULT_SUCCESS
            return info

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        p = self._plugin
        with Observed(p.metrics, "NotifyRegistrationStatus", enabled=True) as obs:
            registered, error = bool(request.plugin_registered), str(request.error)
            p._set_registration(registered, error)
            obs.result = RESULT_SUCCESS
            if not registered:
                # Like the Go library: answer with an error, which the kubelet only logs.
                context.abort(grpc.StatusCode.UNKNOWN, f"registration failed: {error}")
            return regpb.RegistrationStatusResponse()


class KubeletPlugin:
    """Registration + DRAPlugin (v1, v1beta1) servers for one driver on one node.

    ``endpoint`` overrides the DRA socket path reported in GetInfo, for setups where the kubelet
    sees the socket under another path (the Go library's 1.32 ``KubeletPluginSocketPath``); by
    default it is the absolute DRA socket path, which must then be the same in the container
    and on the host. ``metrics``: where the calls are counted (run_plugin passes the plugin's,
    dra_fake.core.metrics.METRICS); by default a registry of their own that nothing serves.
    """

    def __init__(
        self,
        driver_name: str,
        handler: DriverHandler,
        registrar_dir: str,
        plugins_dir: str,
        pod_uid: str | None = None,
        *,
        metrics: RequestMetrics | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        endpoint: str | None = None,
        socket_mode: int = sockets.SOCKET_MODE,
        device_health: DeviceHealthBoard | None = None,
    ) -> None:
        if not driver_name or "/" in driver_name:
            raise ValueError(f"invalid driver name {driver_name!r}")
        self.driver_name = driver_name
        self.handler = handler
        self.pod_uid = pod_uid or None
        self.metrics = metrics if metrics is not None else RequestMetrics()
        self.registration_socket = sockets.registration_socket_path(registrar_dir, driver_name, self.pod_uid)
        self.dra_socket = sockets.dra_socket_path(plugins_dir, driver_name, self.pod_uid)
        self.plugin_data_dir = os.path.dirname(self.dra_socket)
        self.endpoint = endpoint or self.dra_socket
        self.registered = threading.Event()  # set while the kubelet reports a successful registration
        self._state = RegistrationState()
        self._state_lock = threading.Lock()
        self.in_flight = InFlight()
        self.device_health = device_health
        served = device_health is not None
        self.supported_versions = SUPPORTED_VERSIONS + (HEALTH_VERSIONS if served else ())
        health = health_servicers(device_health, driver_name) if device_health is not None else []
        self.dra_server = SocketServer(
            "dra",
            self.dra_socket,
            [
                *health,
                (
                    drapb_v1_grpc.add_DRAPluginServicer_to_server,
                    DRAServicer("v1", drapb_v1, driver_name, handler, self.metrics, self.in_flight),
                ),
                (
                    drapb_v1beta1_grpc.add_DRAPluginServicer_to_server,
                    DRAServicer("v1beta1", drapb_v1beta1, driver_name, handler, self.metrics, self.in_flight),
                ),
            ],
            # An open health stream holds a worker: the kubelet keeps one open, a second during a retry.
            max_workers=max_workers + (HEALTH_STREAM_WORKERS if served else 0),
            socket_mode=socket_mode,
        )
        self.registration_server = SocketServer(
            "registration",
            self.registration_socket,
            [(regpb_grpc.add_RegistrationServicer_to_server, _RegistrationServicer(self))],
            max_workers=REGISTRATION_MAX_WORKERS,
            socket_mode=socket_mode,
        )

    @property
    def registration_status(self) -> RegistrationState:
        with self._state_lock:
            return self._state

    def _set_registration(self, registered: bool, error: str) -> None:
        with self._state_lock:
            self._state = RegistrationState(registered, error, time.time())
        fields = {"driver": self.driver_name, "socket": self.registration_socket, "registered": registered}
        self.metrics.kubelet_registered.set(1 if registered else 0)
        if registered:
            self.registered.set()
            log.info("kubelet registered the plugin", extra=fields)
        else:
            self.registered.clear()
            log.error("kubelet rejected the plugin registration", extra={**fields, "error": error})

    def wait_registered(self, timeout: float | None = None) -> bool:
        return self.registered.wait(timeout)

    @property
    def running(self) -> bool:
        return self.dra_server.running and self.registration_server.running

    def start(self) -> None:
        """Start serving: the DRA socket first, then the registration socket."""
        sockets.ensure_dir(self.plugin_data_dir)
        self.dra_server.start()
        try:
            self.registration_server.start()
        except Exception:
            self.dra_server.stop(None)
            raise
        log.info(
            "kubelet plugin started",
            extra={
                "driver": self.driver_name,
                "registration_socket": self.registration_socket,
                "dra_socket": self.dra_socket,
                "versions": list(self.supported_versions),
            },
        )

    def stop(self, grace: float | None = 5.0) -> None:
        """Remove the registration socket (the kubelet deregisters this instance), then let in-flight
        DRA calls finish within ``grace`` seconds and remove the DRA socket. Idempotent."""
        self.registration_server.stop(grace)
        if self.device_health is not None:
            self.device_health.close()  # open streams end now, not after the grace period
        self.dra_server.stop(grace)

    def __enter__(self) -> KubeletPlugin:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
