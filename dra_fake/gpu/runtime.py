"""A GPU node's runtime: its per-node services started and stopped in one place.

The GPU kubelet plugin, the device-plugin mode and every fleet node are made of the same parts: an
inventory, what the device state holds (the DRA plugin's prepared claims), and the per-node
services of dra_fake.gpu.services (GpuFaults applied, telemetry and dcgm-exporter's metrics, GPU
Feature Discovery's labels), run over a `Host`: what the process gives its nodes (the flags'
settings, the API client, the stop event).

A process with one node (the two plugins) runs each service's own threads. Fleet mode serves many
nodes from one process: there a service runs through the part of it the process shares (one
GpuFault informer for every node, one metrics endpoint), created when the host starts; a service
without such a part does not run there (fleet nodes are created with their labels).

What faults do to a node reaches its owner through `NodeRuntime.on_faults`: the DRA plugin taints
its slices and reports device health to the kubelet, the device plugin takes devices out of
ListAndWatch, fleet mode re-publishes the node's slices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dra_fake.gpu.faults import DEFAULT_IGNORED_XIDS, Effects
from dra_fake.gpu.gfd import NOT_SHARED, Shared

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.gpu.inventory import Inventory
    from dra_fake.gpu.lending import LendingSettings, Owners
    from dra_fake.gpu.lendingfile import KeptLending
    from dra_fake.gpu.nvidia_smi import NvidiaSmi
    from dra_fake.gpu.workloads import ClaimHolding


@dataclass(frozen=True)
class NodeSettings:
    """What the process's flags say about its nodes' services (the same for every node of it)."""

    driver: str  # the DRA driver's name (dcgm-exporter's labels name it)
    faults: bool = True  # apply the node's GpuFaults
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS  # Xids that neither taint nor mark unhealthy
    dcgm_port: int = -1  # dcgm-exporter-compatible /metrics; negative: not served
    node_labels: bool = False  # GPU Feature Discovery's labels patched onto the Node
    mig_strategy: str = "none"  # GFD's MIG strategy for those labels
    sharing: Shared = NOT_SHARED  # GPU sharing as the device plugin's config sets it, for the labels
    attach: bool = False  # simulate the attach of fabric-attached GPUs (the DRA plugin only)
    lending: LendingSettings | None = None  # idle-GPU lending (dra_fake.gpu.lending); None: off


class Node:
    """One node as its services see it."""

    def __init__(
        self,
        name: str,
        inventory: Inventory | Callable[[], Inventory],
        *,
        holdings: Callable[[], list[ClaimHolding]] | None = None,
        nvidia_smi: NvidiaSmi | None = None,
        lending: KeptLending | None = None,
    ) -> None:
        self.name = name
        # A callable is called on first use: a fleet node's inventory is built only if a service
        # needs it (most fleet nodes never have a fault), once for all of them.
        self._inventory = inventory
        self._lock = threading.Lock()
        # The device state's prepared claims; None: no claims are prepared here (the device
        # plugin: the kubelet allocates), so pods say nothing about the load of a device.
        self.holdings = holdings
        self.nvidia_smi = nvidia_smi  # the in-container nvidia-smi's files; None: no containers
        # Idle-GPU lending's state as the node's owner restored it (None: the service starts afresh).
        self.lending = lending

    @property
    def inventory(self) -> Inventory:
        with self._lock:
            if callable(self._inventory):
                self._inventory = self._inventory()
            return self._inventory


class NodeService(Protocol):
    """One service of one node."""

    def start(self) -> None:
        """Start it (threads end with the host's stop event)."""

    def stop(self) -> None:
        """Stop what it runs for this node alone (fleet mode forgets a node; a plugin process
        just ends)."""


class SharedPart(Protocol):
    """The part of a service that the nodes of a many-node process share (started with the host)."""

    def node_service(self, runtime: NodeRuntime) -> NodeService | None:
        """This node's use of it (None: not on this node)."""


class ServiceKind(Protocol):
    """What dra_fake.gpu.services.SERVICES lists (a service's class)."""

    def for_process(self, host: Host) -> SharedPart | None:
        """The started part a many-node host shares, or None (the service does not run there)."""

    def for_node(self, runtime: NodeRuntime) -> NodeService | None:
        """The service of a node of a one-node host (its own threads), or None (turned off)."""


class Host:
    """What a process gives its nodes: the settings, the API client (`api()`, built on first use),
    the stop event, and in a many-node process the services' shared parts."""

    def __init__(
        self,
        settings: NodeSettings,
        api: Callable[[], client.ApiClient],
        stop: threading.Event,
        *,
        many_nodes: bool = False,
        services: Sequence[ServiceKind] | None = None,
    ) -> None:
        from dra_fake.gpu.services import SERVICES

        self.settings, self.api, self.stop, self.many_nodes = settings, api, stop, many_nodes
        self.services: tuple[ServiceKind, ...] = tuple(SERVICES if services is None else services)
        self._shared: dict[ServiceKind, SharedPart] = {}

    def start(self) -> None:
        """Start the shared parts (a many-node host; nothing for one node)."""
        if not self.many_nodes:
            return
        for kind in self.services:
            part = kind.for_process(self)
            if part is not None:
                self._shared[kind] = part

    def node(self, node: Node) -> NodeRuntime:
        """`node`'s runtime on this host (its services built, not started)."""
        return NodeRuntime(node, self)

    def _service(self, kind: ServiceKind, runtime: NodeRuntime) -> NodeService | None:
        if not self.many_nodes:
            return kind.for_node(runtime)
        part = self._shared.get(kind)
        return part.node_service(runtime) if part is not None else None


class NodeRuntime:
    """One node's services: built together, started and stopped together. Services and the
    node's owner hear of fault changes through `on_faults`; register before `start`."""

    def __init__(self, node: Node, host: Host) -> None:
        self.node, self.host, self.settings = node, host, host.settings
        self._listeners: list[Callable[[Effects], None]] = []
        self._sample_listeners: list[Callable[[float, Mapping[str, Owners]], None]] = []
        self._lending_listeners: list[Callable[[dict[str, list[dict[str, str]]]], None]] = []
        self.services = [s for kind in host.services if (s := host._service(kind, self)) is not None]

    def on_faults(self, listener: Callable[[Effects], None]) -> None:
        """Call `listener` with the node's fault effects whenever they change."""
        self._listeners.append(listener)

    def faults_changed(self, effects: Effects) -> None:
        for listener in self._listeners:
            listener(effects)

    def on_sample(self, listener: Callable[[float, Mapping[str, Owners]], None]) -> None:
        """Call `listener` with each telemetry sample's owners per GPU (time, GPU name -> Owners)."""
        self._sample_listeners.append(listener)

    def sampled(self, now: float, owners: Mapping[str, Owners]) -> None:
        for listener in self._sample_listeners:
            listener(now, owners)

    def on_lending(self, listener: Callable[[dict[str, list[dict[str, str]]]], None]) -> None:
        """Call `listener` with the lend views' taints (device name -> taints) whenever they change."""
        self._lending_listeners.append(listener)

    def lending_changed(self, taints: dict[str, list[dict[str, str]]]) -> None:
        for listener in self._lending_listeners:
            listener(taints)

    def start(self) -> None:
        for service in self.services:
            service.start()

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
