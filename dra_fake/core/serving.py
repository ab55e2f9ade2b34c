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
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dra_fake.core import metrics, trials
from dra_fake.core.claims import ClaimError
from dra_fake.core.cpuaffinity import pin_to_one_cpu
from dra_fake.core.kubeconfig import StartupError
from dra_fake.kubelet.api import ClaimRef, PreparedDevice, PrepareResult

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.publisher import Publisher
    from dra_fake.core.resourceapi import ResourceApi, ServerInfo
    from dra_fake.core.slices import DesiredSlice
    from dra_fake.kubelet.device_health import DeviceHealthBoard

log = logging.getLogger(__name__)


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


class ClaimPreparer:
    """The kubelet's DriverHandler: fetch each claim from the API server, check it, prepare it in
    the state. Every claim gets its own result."""

    def __init__(self, resources: Callable[[], ResourceApi], state: ClaimState) -> None:
        self.resources = resources  # PluginContext.resources: built on the first call
        self.state = state

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        return {ref.uid: self._prepare_one(ref) for ref in claims}

    def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        """One claim; whatever fails is this claim's error, never the whole call's."""
        fields = {"claim": f"{ref.namespace}/{ref.name}", "claimUID": ref.uid}
        get = f"get ResourceClaim {ref.namespace}/{ref.name}"
        try:
            claim = self.resources().get_claim(ref.namespace, ref.name)
        except ClaimError as err:  # not found, an error status
            return self._failed(fields, str(err))
        except Exception as err:  # a connection error, a timeout: the API server is unreachable
            return self._failed(fields, f"{get}: {_describe(err)}")
        try:
            uid = claim.get("metadata", {}).get("uid")
            if uid != ref.uid:
                raise ClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: UID is {uid}, the kubelet asked for "
                    f"{ref.uid} (the claim was deleted and re-created)"
                )
            if not claim.get("status", {}).get("allocation"):
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: claim not yet allocated")
            devices = self.state.prepare(claim)
        except ClaimError as err:
            return self._failed(fields, str(err))
        except Exception as err:  # a bug or an environment failure: still only this claim's
            log.exception("prepare failed unexpectedly", extra=fields)
            return self._failed(fields, f"prepare ResourceClaim {ref.namespace}/{ref.name}: {_describe(err)}")
        log.info("claim prepared", extra={**fields, "devices": [d.device_name for d in devices]})
        return PrepareResult(devices=devices)

    @staticmethod
    def _failed(fields: dict[str, str], error: str) -> PrepareResult:
        log.warning("prepare failed", extra={**fields, "error": error})
        return PrepareResult(error=error)

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        results: dict[str, str] = {}
        for ref in claims:
            fields = {"claim": f"{ref.namespace}/{ref.name}", "claimUID": ref.uid}
            try:
                self.state.unprepare(ref.uid)
                results[ref.uid] = ""
                log.info("claim unprepared", extra=fields)
            except ClaimError as err:
                results[ref.uid] = str(err)
            except Exception as err:
                log.exception("unprepare failed unexpectedly", extra=fields)
                results[ref.uid] = f"unprepare ResourceClaim {ref.namespace}/{ref.name}: {_describe(err)}"
        return results

    def export_gauges(self) -> None:
        """The prepared claims and devices gauges, read from the state when scraped: computing
        them after every call cost a read of the whole checkpoint whenever a concurrent call had
        just written it."""
        metrics.PREPARED_CLAIMS.set_function(lambda: len(self.state.prepared_claims()))
        metrics.PREPARED_DEVICES.set_function(self.state.prepared_device_count)


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
    handler = ClaimPreparer(lambda: ctx.resources, state)
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
