"""Telemetry: a node's GPUs sampled (dra_fake.gpu.telemetry), written for the in-container
nvidia-smi and served as dcgm-exporter's /metrics, with the node's faults in the readings.

A plugin's node runs its own GpuMonitor (dra_fake.gpu.monitor: the sampler, the watch of the pods
that use its prepared claims, the endpoint when a port is set). Fleet nodes share one
SharedMetrics (dra_fake.gpu.sharedmetrics: one sampler, one endpoint), only when a port is set:
they have no containers to write nvidia-smi's files for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dra_fake.gpu.runtime import Host, NodeRuntime, NodeService, SharedPart
    from dra_fake.gpu.sharedmetrics import SharedMetrics


class Telemetry:
    @staticmethod
    def for_process(host: Host) -> SharedPart | None:
        if host.settings.dcgm_port < 0:
            return None
        from dra_fake.gpu.sharedmetrics import SharedMetrics

        metrics = SharedMetrics(host.settings.driver)
        metrics.start(host.stop, host.settings.dcgm_port)
        return _Shared(metrics)

    @staticmethod
    def for_node(runtime: NodeRuntime) -> NodeService | None:
        return _OwnMonitor(runtime)


class _OwnMonitor:
    def __init__(self, runtime: NodeRuntime) -> None:
        from dra_fake.gpu.monitor import GpuMonitor

        node = runtime.node
        if node.nvidia_smi is None:
            raise ValueError(f"node {node.name}: a monitor needs the node's nvidia-smi files")
        self.runtime = runtime
        self.monitor = GpuMonitor(
            node.inventory,
            node.holdings or list,
            node.nvidia_smi,
            node.name,
            runtime.settings.driver,
            on_sample=runtime.sampled,
        )
        runtime.on_faults(lambda effects: self.monitor.set_faults(effects.gpus))

    def start(self) -> None:
        node, host = self.runtime.node, self.runtime.host
        # Pods tell the load of the devices they use only through claims prepared here.
        api = host.api() if node.holdings is not None else None
        self.monitor.start(host.stop, api, node.name, self.runtime.settings.dcgm_port)

    def stop(self) -> None:
        return  # its threads end with the host's stop event


class _Shared:
    def __init__(self, metrics: SharedMetrics) -> None:
        self.metrics = metrics

    def node_service(self, runtime: NodeRuntime) -> NodeService | None:
        return _SharedNode(self.metrics, runtime)


class _SharedNode:
    def __init__(self, metrics: SharedMetrics, runtime: NodeRuntime) -> None:
        self.metrics, self.node = metrics, runtime.node
        runtime.on_faults(lambda effects: metrics.set_faults(self.node.name, effects.gpus))

    def start(self) -> None:
        self.metrics.add(self.node.name, lambda: self.node.inventory)

    def stop(self) -> None:
        self.metrics.remove(self.node.name)
