"""Standard gRPC health service (``grpc.health.v1.Health``) for the kubelet plugin's liveness probe.

``Check`` probes the plugin over its own unix sockets, as the kubelet reaches it:

1. ``pluginregistration.Registration/GetInfo`` on the registration socket (answer must name our driver;
   that server has its own workers, which only the kubelet's rare GetInfo uses);
2. the DRA socket accepts a gRPC connection (the HTTP/2 handshake is done by gRPC's I/O threads, not
   by the DRA workers), and no DRA call has been running longer than ``stuck_after``.

Point 2 differs from NVIDIA's check, which sends an empty NodePrepareResources: that call queues
behind the kubelet's own calls, so a burst of prepares (a 64-pod job landing on the node) would fail
the liveness probe and get a busy plugin killed. A busy plugin is alive; a hung one (a call far past
the kubelet's 45 s timeout) is not.

SERVING only when both hold and the kubelet has not reported a failed registration
(NotifyRegistrationStatus with plugin_registered=false); otherwise NOT_SERVING. The service name
``kubelet-registered`` (the chart's readiness probe) also needs the kubelet to have confirmed the
registration: a new plugin pod of a rolling update is Ready only once the kubelet can call it.
``Watch`` is not implemented (UNIMPLEMENTED), which the health protocol allows.

The messages come from our own proto/dra/health/v1/health.proto (same package, names and field
numbers as grpc/grpc-proto's health.proto), so no grpcio-health-checking dependency is needed.
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from typing import Any

import grpc

from dra_fake.kubelet import sockets
from dra_fake.kubelet.pb.health.v1 import health_pb2, health_pb2_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc
from dra_fake.kubelet.server import (
    DRA_V1_SERVICE,
    DRA_V1BETA1_SERVICE,
    PROBE_METADATA_KEY,
    REGISTRATION_SERVICE,
    KubeletPlugin,
)

log = logging.getLogger(__name__)

HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
ServingStatus = health_pb2.HealthCheckResponse.ServingStatus
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

# Service names Check answers for; "" is the server as a whole. All share the end-to-end result;
# READINESS_SERVICE additionally needs the kubelet's confirmation of the registration.
READINESS_SERVICE = "kubelet-registered"
KNOWN_SERVICES = frozenset({"", REGISTRATION_SERVICE, DRA_V1_SERVICE, DRA_V1BETA1_SERVICE, READINESS_SERVICE})

_PROBE_METADATA = ((PROBE_METADATA_KEY, "1"),)
# A DRA call running this long is hung: the kubelet gave up on it at 45 s, and every API call a
# handler makes has its own timeout (docs/reliability.md#timeouts).
STUCK_AFTER = 120.0
_StubFactory = Any  # generated stub classes are untyped


def _describe(exc: grpc.RpcError) -> str:
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code()}: {details()}"
    return repr(exc)


class HealthServer:
    """``grpc.health.v1.Health`` on ``host:port`` (TCP) probing ``plugin``.

    ``port`` 0 picks a free port (see ``bound_port``). ``probe_timeout`` bounds each of the two
    socket checks; keep it below the liveness probe's ``timeoutSeconds``.
    """

    def __init__(
        self,
        plugin: KubeletPlugin,
        port: int,
        host: str = "127.0.0.1",
        probe_timeout: float = 1.0,
        stuck_after: float = STUCK_AFTER,
    ) -> None:
        self.plugin, self.host, self.port, self.probe_timeout = plugin, host, port, probe_timeout
        self.stuck_after = stuck_after
        self.bound_port: int | None = None
        self._lock = threading.Lock()
        self._server: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None

    # -- probing -------------------------------------------------------------------------------

    def check(self, service: str = "") -> ServingStatus:
        """Run the end-to-end probe; SERVING or NOT_SERVING."""
        state = self.plugin.registration_status
        if state.registered is False:
            log.warning("health: kubelet reported failed registration", extra={"error": state.error})
            return NOT_SERVING
        if service == READINESS_SERVICE and state.registered is not True:
            return NOT_SERVING  # not registered with the kubelet yet
        # Fresh channels per probe: a long-lived channel would sit in reconnect backoff after a
        # failure and report NOT_SERVING for a while after the server is back.
        with (
            grpc.insecure_channel(sockets.grpc_unix_target(self.plugin.registration_socket)) as reg_channel,
            grpc.insecure_channel(sockets.grpc_unix_target(self.plugin.dra_socket)) as dra_channel,
        ):
            reg_factory: _StubFactory = regpb_grpc.RegistrationStub
            if not self._registration_answers(reg_factory(reg_channel)):
                return NOT_SERVING
            return SERVING if self._dra_alive(dra_channel) else NOT_SERVING

    def _registration_answers(self, reg: Any) -> bool:
        try:
            info = reg.GetInfo(regpb.InfoRequest(), timeout=self.probe_timeout, metadata=_PROBE_METADATA)
        except grpc.RpcError as exc:
            log.warning(
                "health: GetInfo failed",
                extra={"socket": self.plugin.registration_socket, "error": _describe(exc)},
            )
            return False
        if info.name != self.plugin.driver_name:
            log.warning("health: GetInfo names another driver", extra={"got": info.name})
            return False
        return True

    def _dra_alive(self, channel: grpc.Channel) -> bool:
        try:
            grpc.channel_ready_future(channel).result(timeout=self.probe_timeout)
        except grpc.FutureTimeoutError:
            log.warning(
                "health: DRA socket does not accept connections", extra={"socket": self.plugin.dra_socket}
            )
            return False
        oldest = self.plugin.in_flight.oldest_age()
        if oldest > self.stuck_after:
            log.warning(
                "health: a DRA call is hung",
                extra={"socket": self.plugin.dra_socket, "runningSeconds": round(oldest, 1)},
            )
            return False
        return True

    # -- grpc.health.v1.Health -----------------------------------------------------------------

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=self.check(request.service))

    def Watch(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Watch is not implemented; use Check")

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            executor = futures.ThreadPoolExecutor(2, thread_name_prefix="grpc-health")
            server = grpc.server(executor)
            add: Any = health_pb2_grpc.add_HealthServicer_to_server
            add(self, server)
            address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
            try:
                self.bound_port = int(server.add_insecure_port(address))
                server.start()
            except Exception:
                server.stop(None)
                executor.shutdown(wait=False)
                raise
            self._server, self._executor = server, executor
        log.info("health service listening", extra={"address": f"{self.host}:{self.bound_port}"})

    def stop(self, grace: float | None = 1.0) -> None:
        with self._lock:
            server, executor = self._server, self._executor
            self._server, self._executor = None, None
        if server is not None:
            server.stop(grace).wait((grace or 0.0) + 5.0)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
