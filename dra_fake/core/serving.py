"""Serving a driver to the kubelet: what every kubelet plugin process of this project does, and
the small interface a driver implements for it.

A driver (dra_fake.gpu.plugin.GpuDriver, computedomain.plugin.plugin.ComputeDomainDriver) says
what it publishes and builds its prepared-claims state; `run_plugin` does the rest, the same for
both: API discovery and the Node's UID (retried while the API server is away), the plugin data
directory, start-up reconciliation, corrupt-checkpoint Events, metrics, the ResourceSlice
publisher, the kubelet's registration and DRA sockets, the health service, and a clean stop on
SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from dra_fake.core import metrics, trials
from dra_fake.core.claims import ClaimError, PermanentClaimError
from dra_fake.core.cpuaffinity import pin_to_one_cpu
from dra_fake.core.kubeconfig import StartupError
from dra_fake.core.retry import Backoff
from dra_fake.kubelet.api import NO_LIMITS, CallLimits, ClaimRef, PreparedDevice, PrepareResult

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.publisher import Publisher
    from dra_fake.core.resourceapi import ResourceApi, ServerInfo
    from dra_fake.core.slices import DesiredSlice
    from dra_fake.kubelet.device_health import DeviceHealthBoard

log = logging.getLogger(__name__)
R = TypeVar("R")


class ClaimState(Protocol):
    """What ClaimPreparer drives: a driver's PreparedClaims (dra_fake.core.state)."""

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]: ...
    def unprepare(self, claim_uid: str) -> None: ...
    def startup(self) -> object: ...
    def prepared_claims(self) -> dict[str, str]: ...
    def prepared_device_count(self) -> int: ...


@dataclass
class PluginContext:
    """What a driver gets to build its state from. The state is built and serves the kubelet
    from local files before the API server is reached; `node_uid` is filled in once it is."""

    kubeconfig: str  # --kubeconfig ("": $KUBECONFIG, else in-cluster)
    node: str
    data_dir: Path  # <kubelet plugins dir>/<driver>, created (0750)
    cdi_root: Path
    stop: threading.Event
    device_health: DeviceHealthBoard
    node_uid: str = ""
    failure: str = ""  # why the plugin refused to go on (run_plugin then exits 1)
    # Set once the slices are published: ask the publisher to sync again now (the desired slices
    # changed, e.g. a fault tainted a device).
    republish: Callable[[], None] = lambda: None
    _api: client.ApiClient | None = field(default=None, init=False, repr=False)
    _resources: ResourceApi | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def api(self) -> client.ApiClient:
        """The API client, built on first use: importing the kubernetes client takes ~0.3 s,
        which run_plugin spends after the sockets serve (docs/benchmarks/history.md#start-up).
        StartupError if the kubeconfig is unusable."""
        with self._lock:
            if self._api is None:
                from dra_fake.core.kube import load_kube_client

                self._api = load_kube_client(self.kubeconfig)
            return self._api

    @property
    def resources(self) -> ResourceApi:
        """resource.k8s.io access through `api` (one for the process; discovery fills it in)."""
        api = self.api
        with self._lock:
            if self._resources is None:
                from dra_fake.core.resourceapi import ResourceApi

                self._resources = ResourceApi(api)
            return self._resources

    def checkpoint_error_hook(self, driver: str) -> Any:
        """A corrupt checkpoint: counted, logged by the store, and shown as an Event on the Node
        (posted in the background: start-up does not wait for the API server)."""

        def post(reason: str) -> None:
            from dra_fake.core.events import post_node_event

            try:
                api = self.api
            except StartupError as err:
                log.warning("could not record a Node event", extra={"error": str(err)})
                return
            post_node_event(
                api,
                self.node,
                self.node_uid,
                reason="CheckpointCorrupt",
                message=f"{driver}: the plugin checkpoint was unusable ({reason}); it was moved aside and "
                "the prepared claims were recovered from the CDI specs (see the plugin log)",
                component=f"{driver}-kubelet-plugin",
            )

        def report(reason: str) -> None:
            metrics.record_checkpoint_error(reason)
            threading.Thread(target=post, args=(reason,), name="checkpoint-event", daemon=True).start()

        return report


class KubeletDriver(Protocol):
    """The interface a driver implements for run_plugin."""

    display_name: str  # e.g. "GPU kubelet plugin", for logs
    retry_window: float  # seconds a kubelet call retries a claim's retryable errors (ClaimPreparer)

    def create_state(self, ctx: PluginContext) -> ClaimState:
        """The driver's prepared-claims state (before start-up reconciliation)."""

    def desired_slices(self, server: ServerInfo) -> list[DesiredSlice]:
        """What the node's pool publishes, for this server's version; called at every sync, so
        it may change (call ctx.republish) and should be cheap when nothing changed."""

    def start_background(self, ctx: PluginContext, server: ServerInfo) -> None:
        """Start what the driver runs beside serving once the API server is reached (threads that
        end when ctx.stop is set)."""

    def refusal(self, node: dict[str, Any]) -> str | None:
        """Why the driver must not serve this node (its Node object, read before publishing), or None."""


# NVIDIA's compute-domain plugin retries a claim's retryable errors inside the kubelet's call, for
# up to 45 s (ErrorRetryMaxTimeout), through a work queue with client-go's default rate limiter
# (5 ms, doubling); its GPU plugin answers at once
# (docs/reference/nvidia-compute-domains.md#74-unprepare-retries-and-checkpoint-rules).
RETRY_FIRST_DELAY = 0.005
# Retries end this long before the kubelet's deadline, so that the claim's last error reaches it
# (past the deadline the kubelet reports only DeadlineExceeded).
ANSWER_MARGIN = 1.0


@dataclass
class _Outcome(Generic[R]):
    """One attempt at one claim: what the kubelet gets, and whether trying again may change it."""

    result: R
    error: str = ""
    retryable: bool = False
    logged: Mapping[str, Any] = field(default_factory=dict)  # more fields for the success's log line


class ClaimPreparer:
    """The kubelet's DriverHandler: fetch each claim from the API server, check it, prepare it in
    the state. Every claim gets its own result. With a retry window (the compute-domain plugin),
    a claim whose error is retryable (a ClaimError that is not a PermanentClaimError, or an
    unexpected failure of the state) is tried again with exponential backoff until it succeeds,
    the window or the kubelet's deadline ends, or the kubelet cancels the call."""

    def __init__(
        self,
        resources: Callable[[], ResourceApi],
        state: ClaimState,
        retry_window: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.resources = resources  # PluginContext.resources: built on the first call
        self.state = state
        self.retry_window = retry_window
        self.clock, self.sleep = clock, sleep

    def prepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, PrepareResult]:
        # Each claim is read once (as the kubelet's helper hands NVIDIA's plugin the claims); only
        # the state's prepare is retried.
        attempts = {ref.uid: self._prepare_attempt(ref) for ref in claims}
        return self._each(claims, attempts, limits, "prepare")

    def unprepare(self, claims: list[ClaimRef], limits: CallLimits = NO_LIMITS) -> dict[str, str]:
        attempts = {ref.uid: functools.partial(self._unprepare_one, ref) for ref in claims}
        return self._each(claims, attempts, limits, "unprepare")

    def _each(
        self,
        claims: list[ClaimRef],
        attempts: Mapping[str, Callable[[], _Outcome[R]]],
        limits: CallLimits,
        verb: str,
    ) -> dict[str, R]:
        """Every claim once, then the retryable ones again, each on its own backoff, until done."""
        end = self.clock() + self.retry_window
        if limits.deadline is not None:
            end = min(end, limits.deadline - ANSWER_MARGIN)
        outcomes = {uid: attempt() for uid, attempt in attempts.items()}
        tries = dict.fromkeys(outcomes, 1)
        retrying = [uid for uid, o in outcomes.items() if o.retryable] if self.retry_window > 0 else []
        backoffs = {uid: Backoff(RETRY_FIRST_DELAY, self.retry_window) for uid in retrying}
        due = {uid: self.clock() + backoffs[uid].next() for uid in retrying}
        while due:
            uid = min(due, key=due.__getitem__)
            if due[uid] > end:
                break
            self.sleep(max(0.0, due[uid] - self.clock()))
            if not limits.waiting():
                break
            log.debug(f"{verb} failed, retrying", extra={"claimUID": uid, "error": outcomes[uid].error})
            outcomes[uid] = attempts[uid]()
            tries[uid] += 1
            if outcomes[uid].retryable:
                due[uid] = self.clock() + backoffs[uid].next()
            else:
                del due[uid]
        for ref in claims:
            outcome = outcomes[ref.uid]
            fields = {"claim": f"{ref.namespace}/{ref.name}", "claimUID": ref.uid, "attempts": tries[ref.uid]}
            if outcome.error:
                log.warning(f"{verb} failed", extra={**fields, "error": outcome.error})
            else:
                log.info(f"claim {verb}d", extra={**fields, **outcome.logged})
        return {uid: o.result for uid, o in outcomes.items()}

    def _prepare_attempt(self, ref: ClaimRef) -> Callable[[], _Outcome[PrepareResult]]:
        """The claim read and checked (a failure here is final), then the state's prepare to try."""
        get = f"get ResourceClaim {ref.namespace}/{ref.name}"
        try:
            claim = self.resources().get_claim(ref.namespace, ref.name)
            uid = claim.get("metadata", {}).get("uid")
            if uid != ref.uid:
                raise ClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: UID is {uid}, the kubelet asked for "
                    f"{ref.uid} (the claim was deleted and re-created)"
                )
            if not claim.get("status", {}).get("allocation"):
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: claim not yet allocated")
        except ClaimError as err:  # not found, an error status, not the claim asked for
            return functools.partial(_prepare_failed, str(err), retryable=False)
        except Exception as err:  # a connection error, a timeout: the API server is unreachable
            return functools.partial(_prepare_failed, f"{get}: {_describe(err)}", retryable=False)
        return functools.partial(self._prepare_claim, ref, claim)

    def _prepare_claim(self, ref: ClaimRef, claim: Mapping[str, Any]) -> _Outcome[PrepareResult]:
        """One try of the state's prepare; whatever fails is this claim's error, never the call's."""
        try:
            devices = self.state.prepare(claim)
        except ClaimError as err:
            return _prepare_failed(str(err), retryable=not isinstance(err, PermanentClaimError))
        except Exception as err:  # a bug or an environment failure: still only this claim's
            log.exception("prepare failed unexpectedly", extra={"claimUID": ref.uid})
            error = f"prepare ResourceClaim {ref.namespace}/{ref.name}: {_describe(err)}"
            return _prepare_failed(error, retryable=True)
        return _Outcome(PrepareResult(devices=devices), logged={"devices": [d.device_name for d in devices]})

    def _unprepare_one(self, ref: ClaimRef) -> _Outcome[str]:
        try:
            self.state.unprepare(ref.uid)
        except ClaimError as err:
            return _Outcome(str(err), str(err), retryable=not isinstance(err, PermanentClaimError))
        except Exception as err:
            log.exception("unprepare failed unexpectedly", extra={"claimUID": ref.uid})
            error = f"unprepare ResourceClaim {ref.namespace}/{ref.name}: {_describe(err)}"
            return _Outcome(error, error, retryable=True)
        return _Outcome("")

    def export_gauges(self) -> None:
        """The prepared claims and devices gauges, read from the state when scraped: computing
        them after every call cost a read of the whole checkpoint whenever a concurrent call had
        just written it."""
        metrics.PREPARED_CLAIMS.set_function(lambda: len(self.state.prepared_claims()))
        metrics.PREPARED_DEVICES.set_function(self.state.prepared_device_count)


def _prepare_failed(error: str, retryable: bool) -> _Outcome[PrepareResult]:
    return _Outcome(PrepareResult(error=error), error, retryable)


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def run_plugin(args: argparse.Namespace, driver: KubeletDriver) -> int:
    """Serve `driver` on this node until SIGTERM/SIGINT (flags: dra_fake.cli's plugin flags).

    The kubelet is served from local state first: the checkpoint is reconciled and the sockets
    are up before the API server is reached (before the kubernetes client is even imported), so
    unprepare works through an API outage (prepare needs the claim from the server and fails per
    claim until it is reached). Discovery, the Node's UID and the ResourceSlices follow in the
    background (`Publishing`, below), retried until they succeed."""
    from dra_fake.kubelet.device_health import DeviceHealthBoard
    from dra_fake.kubelet.health import HealthServer
    from dra_fake.kubelet.server import KubeletPlugin
    from dra_fake.kubelet.signals import serve_forever

    started = time.monotonic()
    # Before the plugin starts its threads (they inherit it); docs in dra_fake.core.cpuaffinity.
    cpu = pin_to_one_cpu() if args.cpu_affinity == "one" else None
    stop = threading.Event()
    data_dir = Path(args.kubelet_plugins_directory_path) / args.driver_name
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    board = DeviceHealthBoard()
    ctx = PluginContext(args.kubeconfig, args.node_name, data_dir, Path(args.cdi_root), stop, board)
    try:
        state = driver.create_state(ctx)
    except StartupError as err:
        print(f"dra-fake {driver.display_name}: error: {err}", file=sys.stderr)
        return 2
    state.startup()
    if args.metrics_port >= 0:
        metrics.start_metrics_server(args.metrics_port)
    handler = ClaimPreparer(lambda: ctx.resources, state, retry_window=driver.retry_window)
    handler.export_gauges()
    kubelet = KubeletPlugin(
        args.driver_name,
        handler,
        args.kubelet_registrar_directory_path,
        args.kubelet_plugins_directory_path,
        args.pod_uid or None,
        metrics=metrics.METRICS,
        device_health=board,
    )
    kubelet.start()
    components: list[Any] = [kubelet]
    if args.healthcheck_port >= 0:
        # In a pod HEALTHCHECK_ADDRESS is the pod IP, where the kubelet's gRPC probes dial.
        health = HealthServer(kubelet, args.healthcheck_port, host=args.healthcheck_address)
        health.start()
        components.append(health)
    publishing = Publishing(args.driver_name, driver, ctx)
    threading.Thread(target=publishing.run, name="api-connect", daemon=True).start()
    components.insert(0, publishing)
    log.info(
        f"{driver.display_name} serving the kubelet",
        extra={
            "startupSeconds": round(time.monotonic() - started, 3),
            "cpu": cpu,
            **({"without": ",".join(sorted(off))} if (off := trials.switched_off()) else {}),
        },
    )
    serve_forever(*components, stop_event=stop)
    log.info(f"{driver.display_name} stopped")
    if ctx.failure:
        log.error(f"{driver.display_name} refused to run", extra={"reason": ctx.failure})
        return 1
    return 0


class Publishing:
    """Reach the API server (retried while it is away), then publish the node's slices and start
    the driver's background work. Runs in its own thread, after the sockets serve: the modules
    that talk to the API server (and the kubernetes client they import) are loaded there."""

    def __init__(self, driver_name: str, driver: KubeletDriver, ctx: PluginContext) -> None:
        self.driver_name, self.driver, self.ctx = driver_name, driver, ctx
        self.publisher: Publisher | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        """The thread's body: whatever ends it unexpectedly stops the plugin (exit code 1) rather
        than leaving it serving without slices."""
        try:
            self._run()
        except Exception as err:
            log.exception("reaching the API server failed")
            self.ctx.failure = f"reaching the API server failed: {type(err).__name__}: {err}"
            self.ctx.stop.set()

    def _run(self) -> None:
        from dra_fake.core.kube import read_node
        from dra_fake.core.publisher import Publisher
        from dra_fake.core.resourceapi import discover_dra
        from dra_fake.core.retry import with_backoff

        try:
            api, resources = self.ctx.api, self.ctx.resources
        except StartupError as err:
            self.ctx.failure = str(err)
            self.ctx.stop.set()
            return
        try:
            server: ServerInfo = with_backoff("API discovery", lambda: discover_dra(api), self._stopped)
            resources.discovered(server)
            node = with_backoff(
                f"get Node {self.ctx.node}", lambda: read_node(api, self.ctx.node), self._stopped
            )
        except Exception:
            if self._stopped.is_set():
                return
            raise
        self.ctx.node_uid = str(node["metadata"]["uid"])
        refusal = self.driver.refusal(node)
        if refusal:
            self.ctx.failure = refusal
            self.ctx.stop.set()
            return
        log.info(
            "API server",
            extra={"version": "{}.{}".format(*server.version), "resourceApi": resources.version},
        )

        def desired() -> list[DesiredSlice]:
            slices = self.driver.desired_slices(server)
            self.ctx.device_health.set_devices(self.ctx.node, (d["name"] for s in slices for d in s.devices))
            return slices

        publisher = Publisher(resources, self.driver_name, self.ctx.node, self.ctx.node_uid, desired)
        self.publisher = publisher
        self.ctx.republish = publisher.resync
        if not self._stopped.is_set():
            publisher.start()
            self.driver.start_background(self.ctx, server)

    def stop(self, grace: float | None = None) -> None:
        self._stopped.set()
        if self.publisher is not None:
            self.publisher.stop()
