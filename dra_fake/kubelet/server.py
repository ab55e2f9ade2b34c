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
sees the registration socket) and stops after it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Protocol

import grpc

from dra_fake.kubelet import sockets
from dra_fake.kubelet.api import ClaimRef, DriverHandler, PreparedDevice, PrepareResult
from dra_fake.kubelet.device_health import HEALTH_VERSIONS, DeviceHealthBoard, health_servicers
from dra_fake.kubelet.metrics import RESULT_CLAIM_ERROR, RESULT_ERROR, RESULT_SUCCESS, RequestMetrics
from dra_fake.kubelet.pb.dra.v1 import api_pb2 as drapb_v1
from dra_fake.kubelet.pb.dra.v1 import api_pb2_grpc as drapb_v1_grpc
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2 as drapb_v1beta1
from dra_fake.kubelet.pb.dra.v1beta1 import api_pb2_grpc as drapb_v1beta1_grpc
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2 as regpb
from dra_fake.kubelet.pb.pluginregistration.v1 import api_pb2_grpc as regpb_grpc

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

SIGNAL_POLL_INTERVAL = 0.5  # seconds; bounds the delay between SIGTERM and the start of shutdown

_AddServicer = Callable[[Any, Any], None]


def strip_subrequests(names: Iterable[str]) -> tuple[str, ...]:
    """``req/sub`` -> ``req``, duplicates dropped, order kept (Go: ``stripSubrequestNames``)."""
    out: dict[str, None] = {}
    for name in names:
        out.setdefault(name.split("/", 1)[0], None)
    return tuple(out)


def _is_probe(context: grpc.ServicerContext) -> bool:
    return any(key == PROBE_METADATA_KEY for key, _ in context.invocation_metadata() or ())


def _claim_refs(claims: Iterable[Any]) -> list[ClaimRef]:
    """Request claims -> ClaimRefs, first occurrence of each UID kept."""
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name))
    return list(seen.values())


def _claim_names(claims: Sequence[ClaimRef]) -> list[str]:
    return [f"{c.namespace}/{c.name}:{c.uid}" for c in claims]


@dataclass(frozen=True)
class RegistrationState:
    """What the kubelet last said in NotifyRegistrationStatus (``registered`` None: nothing yet)."""

    registered: bool | None = None
    error: str = ""
    updated: float | None = None  # time.time() of the last notification


class InFlight:
    """Start times of the DRA calls being handled, so the health probe can tell a hung handler (a
    call older than any timeout allows) from a busy one without needing a worker thread itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self._next = 0

    def begin(self) -> int:
        with self._lock:
            self._next += 1
            self._started[self._next] = time.monotonic()
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            self._started.pop(token, None)

    def oldest_age(self) -> float:
        """Seconds the longest-running call has been running (0 when idle)."""
        with self._lock:
            return time.monotonic() - min(self._started.values()) if self._started else 0.0


class _Observed:
    """Request metrics around one call: inflight gauge, duration histogram, result counter."""

    def __init__(self, metrics: RequestMetrics, method: str, enabled: bool) -> None:
        self._metrics, self._method, self._enabled = metrics, method, enabled
        self.result = RESULT_ERROR
        self._start = 0.0

    def __enter__(self) -> _Observed:
        if self._enabled:
            self._metrics.requests_inflight.labels(self._method).inc()
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._enabled:
            return
        self._metrics.requests_inflight.labels(self._method).dec()
        self._metrics.request_duration_seconds.labels(self._method).observe(time.monotonic() - self._start)
        self._metrics.requests_total.labels(self._method, self.result).inc()


class _DRAServicer:
    """One DRAPlugin service version (v1 or v1beta1); the wire messages differ only in share_id."""

    def __init__(
        self,
        version: str,
        pb: Any,
        driver_name: str,
        handler: DriverHandler,
        metrics: RequestMetrics,
        in_flight: InFlight,
    ) -> None:
        self._version, self._pb, self._driver = version, pb, driver_name
        self._handler, self._metrics, self._in_flight = handler, metrics, in_flight
        self._share_id = version == "v1"

    # gRPC method names are fixed by the proto.
    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self._pb.NodePrepareResourcesResponse()

        def handle(claims: Sequence[ClaimRef]) -> int:
            return self._fill_prepare(response, claims, self._handler.prepare(list(claims)))

        return self._serve(
            context, "prepare", request, response, handle, self._metrics.node_prepare_errors_total
        )

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self._pb.NodeUnprepareResourcesResponse()

        def handle(claims: Sequence[ClaimRef]) -> int:
            return self._fill_unprepare(response, claims, self._handler.unprepare(list(claims)))

        return self._serve(
            context, "unprepare", request, response, handle, self._metrics.node_unprepare_errors_total
        )

    def _serve(
        self,
        context: grpc.ServicerContext,
        verb: str,
        request: Any,
        response: Any,
        handle: Callable[[Sequence[ClaimRef]], int],
        errors: Any,
    ) -> Any:
        """One Node(Un)PrepareResources call: metrics, the handler (which fills `response` and returns the
        number of failed claims), and a gRPC error only when the whole call fails."""
        name = f"Node{verb.capitalize()}Resources"
        claims = _claim_refs(request.claims)
        fields = {"driver": self._driver, "api": self._version, "claims": _claim_names(claims)}
        with _Observed(self._metrics, f"{self._version}.{name}", enabled=bool(claims)) as obs:
            if not claims:  # the kubelet never sends empty batches
                obs.result = RESULT_SUCCESS
                return response
            token = self._in_flight.begin()
            try:
                failed = handle(claims)
            except Exception as exc:
                errors.inc(len(claims))
                log.exception(f"{name} failed", extra=fields)
                context.abort(grpc.StatusCode.INTERNAL, f"{verb} resources: {type(exc).__name__}: {exc}")
            finally:
                self._in_flight.end(token)
            errors.inc(failed)
            obs.result = RESULT_CLAIM_ERROR if failed else RESULT_SUCCESS
            # Each claim's outcome is logged at info level by the handler (as NVIDIA's plugin logs
            # per claim); the call itself only when some claim failed.
            log.log(logging.INFO if failed else logging.DEBUG, name, extra={**fields, "failed": failed})
            return response

    def _warn_unrequested(self, method: str, claims: Sequence[ClaimRef], results: Iterable[str]) -> None:
        extra = sorted(set(results) - {c.uid for c in claims})
        if extra:
            log.warning(
                "driver returned results for claims that were not requested; dropped",
                extra={"driver": self._driver, "method": method, "uids": extra},
            )

    def _fill_prepare(
        self, response: Any, claims: Sequence[ClaimRef], results: dict[str, PrepareResult]
    ) -> int:
        failed = 0
        for claim in claims:
            entry = response.claims[claim.uid]
            result = results.get(claim.uid)
            if result is None:
                entry.error = (
                    f"driver {self._driver} returned no result for claim {claim.namespace}/{claim.name}"
                )
                log.error(
                    "driver returned no prepare result for a claim",
                    extra={"driver": self._driver, "claim": _claim_names([claim])[0]},
                )
            elif result.error:
                entry.error = result.error
            else:
                for device in result.devices:
                    self._add_device(entry.devices, device)
            failed += bool(entry.error)
        self._warn_unrequested("NodePrepareResources", claims, results)
        return failed

    def _add_device(self, devices: Any, device: PreparedDevice) -> None:
        msg = devices.add(
            request_names=strip_subrequests(device.request_names),
            pool_name=device.pool_name,
            device_name=device.device_name,
            cdi_device_ids=list(device.cdi_device_ids),
        )
        if self._share_id and device.share_id is not None:
            msg.share_id = device.share_id

    def _fill_unprepare(self, response: Any, claims: Sequence[ClaimRef], results: dict[str, str]) -> int:
        failed = 0
        for claim in claims:
            entry = response.claims[claim.uid]
            error = results.get(claim.uid)
            if error is None:
                entry.error = (
                    f"driver {self._driver} returned no result for claim {claim.namespace}/{claim.name}"
                )
                log.error(
                    "driver returned no unprepare result for a claim",
                    extra={"driver": self._driver, "claim": _claim_names([claim])[0]},
                )
            else:
                entry.error = error
            failed += bool(entry.error)
        self._warn_unrequested("NodeUnprepareResources", claims, results)
        return failed


class _RegistrationServicer:
    def __init__(self, plugin: KubeletPlugin) -> None:
        self._plugin = plugin

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        p = self._plugin
        with _Observed(p.metrics, "GetInfo", enabled=not _is_probe(context)) as obs:
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
        with _Observed(p.metrics, "NotifyRegistrationStatus", enabled=True) as obs:
            registered, error = bool(request.plugin_registered), str(request.error)
            p._set_registration(registered, error)
            obs.result = RESULT_SUCCESS
            if not registered:
                # Like the Go library: answer with an error, which the kubelet only logs.
                context.abort(grpc.StatusCode.UNKNOWN, f"registration failed: {error}")
            return regpb.RegistrationStatusResponse()


class SocketServer:
    """A gRPC server on one unix socket.

    The socket is bound under a hidden temporary name in the same directory (the kubelet's plugin
    watcher ignores names starting with "."), chmod-ed, served, and only then renamed to ``path``:
    it appears fully set up, never with umask permissions. grpc-core unlinks the path it bound when
    the server stops, which after the rename is the (gone) temporary name, so a successor's socket
    at ``path`` is never removed by accident; ``stop`` removes ``path`` only if it is still our inode.
    A stale socket at ``path`` is removed before the new one is renamed into place.
    """

    def __init__(
        self,
        name: str,
        path: str,
        register: Sequence[tuple[_AddServicer, object]],
        max_workers: int,
        socket_mode: int = sockets.SOCKET_MODE,
    ) -> None:
        self.name, self.path = name, path
        self._register, self._max_workers, self._socket_mode = list(register), max_workers, socket_mode
        self._lock = threading.Lock()
        self._server: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._identity: sockets.SocketIdentity | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            sockets.ensure_dir(os.path.dirname(self.path))
            bind_path = sockets.temporary_socket_path(self.path)
            executor = futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix=f"grpc-{self.name}")
            server = grpc.server(executor)
            for add, servicer in self._register:
                add(servicer, server)
            try:
                server.add_insecure_port(sockets.grpc_unix_target(bind_path))  # binds and listens
                os.chmod(bind_path, self._socket_mode)
                server.start()
                sockets.remove_stale_socket(self.path)
                os.rename(bind_path, self.path)
                self._identity = sockets.SocketIdentity.of(self.path)
            except Exception:
                server.stop(None)
                executor.shutdown(wait=False)
                sockets.remove_own_socket(bind_path, None)
                raise
            self._server, self._executor = server, executor
            log.info(
                "serving", extra={"server": self.name, "socket": self.path, "mode": oct(self._socket_mode)}
            )

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls; in-flight calls get up to ``grace`` seconds, then are cancelled."""
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
        if server is None:
            return
        log.info("stopping", extra={"server": self.name, "socket": self.path, "grace": grace})
        server.stop(grace).wait((grace or 0.0) + 5.0)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        sockets.remove_own_socket(self.path, self._identity)
        log.info("stopped", extra={"server": self.name, "socket": self.path})


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
                    _DRAServicer("v1", drapb_v1, driver_name, handler, self.metrics, self.in_flight),
                ),
                (
                    drapb_v1beta1_grpc.add_DRAPluginServicer_to_server,
                    _DRAServicer(
                        "v1beta1", drapb_v1beta1, driver_name, handler, self.metrics, self.in_flight
                    ),
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


class Stoppable(Protocol):
    def stop(self, grace: float | None = ...) -> None: ...


def install_signal_handlers(
    stop: threading.Event, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
) -> Callable[[], None]:
    """Make ``signals`` set ``stop``; returns a function restoring the previous handlers.
    Main thread only (a Python restriction)."""
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        log.info("signal received, shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in signals}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def serve_forever(
    *components: Stoppable,
    grace: float = 10.0,
    stop_event: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> None:
    """Block until SIGTERM/SIGINT (or ``stop_event``), then stop the already started ``components``
    in reverse order, each with ``grace`` seconds for in-flight calls. ``ready`` is set once the
    signal handlers are installed. Call from the main thread."""
    stop = stop_event if stop_event is not None else threading.Event()
    restore = install_signal_handlers(stop)
    try:
        if ready is not None:
            ready.set()
        # Wake up periodically: a process-directed signal may be delivered to a gRPC thread, and the
        # Python-level handler only runs once the main thread returns to the interpreter loop.
        while not stop.wait(SIGNAL_POLL_INTERVAL):
            pass
    finally:
        try:
            for component in reversed(components):
                component.stop(grace)
        finally:
            restore()
