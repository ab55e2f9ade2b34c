"""The GPU kubelet plugin process: inventory -> ResourceSlices, kubelet gRPC -> DeviceState."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import logs, metrics
from .apiserver import ClaimNotFound, ResourceApi, ServerInfo, discover
from .checkpoint import report_to_metrics
from .configs import FeatureGates
from .events import post_node_event
from .inventory import Inventory, InventoryError, load_inventory
from .kubelet.api import ClaimRef, PreparedDevice, PrepareResult
from .nvidia_smi import NvidiaSmi
from .prepare import ClaimError, DeviceState
from .publisher import Publisher
from .slices import DesiredSlice, desired_slices

log = logging.getLogger("dra_fake.plugin")
T = TypeVar("T")
KNOWN_GATES = ("TimeSlicingSettings", "MPSSupport", "DynamicMIG")


class StartupError(Exception):
    """A bad flag, config or environment: reported as one line before any socket exists."""


class ClaimState(Protocol):
    """What ClaimPreparer drives: DeviceState (GPUs) or ComputeDomainState (dra_fake.cd)."""

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]: ...
    def unprepare(self, claim_uid: str) -> None: ...
    def prepared_claims(self) -> dict[str, str]: ...
    def prepared_device_count(self) -> int: ...


class ClaimPreparer:
    """DriverHandler: fetch each claim from the API server, check it, prepare it in the state."""

    def __init__(self, resources: ResourceApi, state: ClaimState) -> None:
        self.resources = resources
        self.state = state

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        results = {ref.uid: self._prepare_one(ref) for ref in claims}
        self.update_gauges()
        return results

    def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        fields = {"claim": f"{ref.namespace}/{ref.name}", "claimUID": ref.uid}
        try:
            claim = self.resources.get_claim(ref.namespace, ref.name)
            uid = claim.get("metadata", {}).get("uid")
            if uid != ref.uid:
                raise ClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: UID is {uid}, the kubelet asked for "
                    f"{ref.uid} (the claim was deleted and re-created)"
                )
            if not claim.get("status", {}).get("allocation"):
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: claim not yet allocated")
            devices = self.state.prepare(claim)
        except (ClaimNotFound, ClaimError) as err:
            log.warning("prepare failed", extra={**fields, "error": str(err)})
            return PrepareResult(error=str(err))
        except ApiException as err:
            log.warning("prepare failed: API server", extra={**fields, "status": err.status})
            return PrepareResult(
                error=f"get ResourceClaim {ref.namespace}/{ref.name}: {err.status} {err.reason}"
            )
        log.info("claim prepared", extra={**fields, "devices": [d.device_name for d in devices]})
        return PrepareResult(devices=devices)

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        results: dict[str, str] = {}
        for ref in claims:
            try:
                self.state.unprepare(ref.uid)
                results[ref.uid] = ""
                log.info(
                    "claim unprepared", extra={"claim": f"{ref.namespace}/{ref.name}", "claimUID": ref.uid}
                )
            except ClaimError as err:
                results[ref.uid] = str(err)
        self.update_gauges()
        return results

    def update_gauges(self) -> None:
        metrics.PREPARED_CLAIMS.set(len(self.state.prepared_claims()))
        metrics.PREPARED_DEVICES.set(self.state.prepared_device_count())


def parse_feature_gates(raw: str) -> FeatureGates:
    enabled = set()
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, _, value = item.partition("=")
        if name not in KNOWN_GATES:
            raise StartupError(
                f"--feature-gates: unknown feature gate {name!r} (known: {', '.join(KNOWN_GATES)})"
            )
        if value.lower() not in ("true", "false"):
            raise StartupError(f"--feature-gates: {name}={value!r}: the value must be true or false")
        if value.lower() == "true":
            enabled.add(name)
    return FeatureGates(frozenset(enabled))


def load_kube_client(kubeconfig: str) -> client.ApiClient:
    try:
        if kubeconfig:
            return cast(client.ApiClient, config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    except (config.ConfigException, OSError) as err:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster configuration (set --kubeconfig)"
        raise StartupError(f"{where}: {err}") from err


def read_node_uid(api: client.ApiClient, node: str) -> str:
    """GET /api/v1/nodes/<node> as plain JSON. `client.CoreV1Api` would import the client's
    ~250 typed models on first use: 1.2-2 s of plugin start-up (bench/results/latest.md)."""
    method, url, headers, body, _ = api.param_serialize(
        "GET",
        "/api/v1/nodes/{name}",
        path_params={"name": node},
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=body)
    data = resp.read() or b""  # type: ignore[no-untyped-call]
    if resp.status != 200:
        raise ApiException(status=resp.status, reason=f"get Node {node}: {data[:200]!r}")
    return str(json.loads(data)["metadata"]["uid"])


def with_backoff(what: str, fn: Callable[[], T], stop: threading.Event, limit: float = 30.0) -> T:
    """Retry fn until it succeeds: the API server may be starting or restarting."""
    delay = 0.5
    while True:
        try:
            return fn()
        except Exception as err:
            if stop.is_set():
                raise
            log.warning("%s failed, retrying", what, extra={"error": str(err), "retryIn": delay})
            stop.wait(delay)
            delay = min(delay * 2, limit)


def run_gpu_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        gates = parse_feature_gates(args.feature_gates)
        profile_dirs = [Path(args.profiles_dir)] if args.profiles_dir else []
        inventory = load_inventory(Path(args.config) if args.config else None, args.node_name, profile_dirs)
        api = load_kube_client(args.kubeconfig)
    except (StartupError, InventoryError, ValueError, OSError) as err:
        print(f"dra-fake gpu-kubelet-plugin: error: {err}", file=sys.stderr)
        return 2
    return GpuPlugin(args, inventory, gates, api).run()


class GpuPlugin:
    def __init__(
        self, args: argparse.Namespace, inventory: Inventory, gates: FeatureGates, api: client.ApiClient
    ) -> None:
        self.args = args
        self.inventory = inventory
        self.gates = gates
        self.api = api
        self.driver = args.driver_name
        self.node = args.node_name
        self.stop_event = threading.Event()

    def _checkpoint_error(self, reason: str, node_uid: str) -> None:
        """A corrupt checkpoint: counted, logged by the store, and shown as an Event on the Node."""
        report_to_metrics(reason)
        post_node_event(
            self.api,
            self.node,
            node_uid,
            reason="CheckpointCorrupt",
            message=f"{self.driver}: the plugin checkpoint was unusable ({reason}); it was moved aside and "
            "the prepared claims were recovered from the CDI specs (see the plugin log)",
            component=f"{self.driver}-kubelet-plugin",
        )

    def run(self) -> int:
        started = time.monotonic()
        info: ServerInfo = with_backoff("API discovery", lambda: discover(self.api), self.stop_event)
        node_uid: str = with_backoff(
            f"get Node {self.node}",
            lambda: read_node_uid(self.api, self.node),
            self.stop_event,
        )
        resources = ResourceApi(self.api, info)
        log.info(
            "API server",
            extra={
                "version": "{}.{}".format(*info.version),
                "resourceApi": resources.version,
                "devices": len(self.inventory.devices),
            },
        )

        data_dir = Path(self.args.kubelet_plugins_directory_path) / self.driver
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        state = DeviceState(
            self.driver,
            self.node,
            self.inventory.devices,
            Path(self.args.cdi_root),
            data_dir,
            feature_gates=self.gates,
            node_name=self.node,
            nvidia_smi=NvidiaSmi.from_inventory(data_dir, self.inventory),
            on_checkpoint_error=lambda reason: self._checkpoint_error(reason, node_uid),
        )
        report = state.startup()
        log.info("checkpoint recovered", extra={"report": str(report)})

        slices = desired_slices(self.inventory, self.driver, info.version)
        return serve_driver(
            self.args, resources, state, slices, node_uid, self.stop_event, "GPU kubelet plugin", started
        )


def serve_driver(
    args: argparse.Namespace,
    resources: ResourceApi,
    state: ClaimState,
    slices: list[DesiredSlice],
    node_uid: str,
    stop: threading.Event,
    name: str,
    started: float,
) -> int:
    """What every kubelet plugin of this driver does once its state is ready: metrics, its
    ResourceSlices, the kubelet's sockets and the health service, until SIGTERM/SIGINT."""
    from .kubelet.health import HealthServer
    from .kubelet.server import KubeletPlugin, serve_forever

    if args.metrics_port >= 0:
        metrics.start_metrics_server(args.metrics_port)
    publisher = Publisher(resources, args.driver_name, args.node_name, node_uid, lambda: slices)
    publisher.start()
    handler = ClaimPreparer(resources, state)
    handler.update_gauges()  # initial values from the checkpoint
    kubelet = KubeletPlugin(
        args.driver_name,
        handler,
        args.kubelet_registrar_directory_path,
        args.kubelet_plugins_directory_path,
        args.pod_uid or None,
    )
    kubelet.start()
    components: list[Any] = [_PublisherStopper(publisher), kubelet]
    if args.healthcheck_port >= 0:
        # In a pod HEALTHCHECK_ADDRESS is the pod IP, where the kubelet's gRPC liveness probe dials.
        health = HealthServer(kubelet, args.healthcheck_port, host=args.healthcheck_address)
        health.start()
        components.append(health)
    log.info(f"{name} running", extra={"startupSeconds": round(time.monotonic() - started, 3)})
    serve_forever(*components, stop_event=stop)
    log.info(f"{name} stopped")
    return 0


class _PublisherStopper:
    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def stop(self, grace: float | None = None) -> None:
        self.publisher.stop()
