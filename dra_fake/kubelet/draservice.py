"""The DRAPlugin gRPC service (v1 and v1beta1) of a kubelet plugin: NodePrepareResources and
NodeUnprepareResources translated into ``DriverHandler.prepare`` / ``unprepare``
(``dra_fake.kubelet.api``), with the request metrics and the calls in flight that the health probe
reads."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from dra_fake.kubelet.api import CallLimits, ClaimRef, DriverHandler, PreparedDevice, PrepareResult
from dra_fake.kubelet.metrics import RESULT_CLAIM_ERROR, RESULT_ERROR, RESULT_SUCCESS, RequestMetrics

log = logging.getLogger(__name__)


def strip_subrequests(names: Iterable[str]) -> tuple[str, ...]:
    """``req/sub`` -> ``req``, duplicates dropped, order kept (Go: ``stripSubrequestNames``)."""
    out: dict[str, None] = {}
    for name in names:
        out.setdefault(name.split("/", 1)[0], None)
    return tuple(out)


def _limits(context: grpc.ServicerContext) -> CallLimits:
    """The kubelet's deadline (it sends one with every call: 45 s) and its cancellation."""
    remaining = context.time_remaining()
    deadline = None if remaining is None else time.monotonic() + remaining
    return CallLimits(deadline=deadline, waiting=context.is_active)


def _claim_refs(claims: Iterable[Any]) -> list[ClaimRef]:
    """Request claims -> ClaimRefs, first occurrence of each UID kept."""
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name))
    return list(seen.values())


def _claim_names(claims: Sequence[ClaimRef]) -> list[str]:
    return [f"{c.namespace}/{c.name}:{c.uid}" for c in claims]


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


class Observed:
    """Request metrics around one call: inflight gauge, duration histogram, result counter."""

    def __init__(self, metrics: RequestMetrics, method: str, enabled: bool) -> None:
        self._metrics, self._method, self._enabled = metrics, method, enabled
        self.result = RESULT_ERROR
        self._start = 0.0

    def __enter__(self) -> Observed:
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


class DRAServicer:
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
            return self._fill_prepare(response, claims, self._handler.prepare(list(claims), _limits(context)))

        return self._serve(
            context, "prepare", request, response, handle, self._metrics.node_prepare_errors_total
        )

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self._pb.NodeUnprepareResourcesResponse()

        def handle(claims: Sequence[ClaimRef]) -> int:
            results = self._handler.unprepare(list(claims), _limits(context))
            return self._fill_unprepare(response, claims, results)

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
        with Observed(self._metrics, f"{self._version}.{name}", enabled=bool(claims)) as obs:
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

    def _no_result(self, verb: str, claim: ClaimRef) -> str:
        """The claim's error when the handler returned nothing for it (logged: a driver's bug)."""
        log.error(
            f"driver returned no {verb} result for a claim",
            extra={"driver": self._driver, "claim": _claim_names([claim])[0]},
        )
        return f"driver {self._driver} returned no result for claim {claim.namespace}/{claim.name}"

    def _fill_prepare(
        self, response: Any, claims: Sequence[ClaimRef], results: dict[str, PrepareResult]
    ) -> int:
        failed = 0
        for claim in claims:
            entry = response.claims[claim.uid]
            result = results.get(claim.uid)
            if result is None:
                entry.error = self._no_result("prepare", claim)
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
            entry.error = self._no_result("unprepare", claim) if error is None else error
            failed += bool(entry.error)
        self._warn_unrequested("NodeUnprepareResources", claims, results)
        return failed
