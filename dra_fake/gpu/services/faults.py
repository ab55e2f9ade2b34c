"""GpuFaults applied to a node: a FaultTracker over its devices (dra_fake.gpu.faults), fed its
GpuFault objects and writing their status back (NodeFaults, dra_fake.gpu.faultwatch); what the
faults do goes to the runtime's fault listeners (the owner's slices and device health, telemetry).

A plugin's node watches its own faults (FaultWatcher); fleet nodes share one informer of every
GpuFault (FaultInformer), and build their tracker only when they first have a fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dra_fake.gpu.faults import FaultTracker

if TYPE_CHECKING:
    from dra_fake.gpu.faultwatch import FaultInformer, NodeFaults
    from dra_fake.gpu.runtime import Host, NodeRuntime, NodeService, SharedPart


class Faults:
    @staticmethod
    def for_process(host: Host) -> SharedPart | None:
        if not host.settings.faults:
            return None
        from dra_fake.gpu.faultwatch import FaultInformer

        informer = FaultInformer(host.api(), host.stop)
        informer.start()
        return _Shared(informer)

    @staticmethod
    def for_node(runtime: NodeRuntime) -> NodeService | None:
        return _OwnWatch(runtime) if runtime.settings.faults else None


def node_faults(runtime: NodeRuntime) -> NodeFaults:
    from dra_fake.gpu.faultwatch import NodeFaults

    node, settings = runtime.node, runtime.settings
    tracker = FaultTracker(node.inventory.devices, settings.ignored_xids)
    return NodeFaults(runtime.host.api(), node.name, tracker, runtime.faults_changed)


class _OwnWatch:
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime

    def start(self) -> None:
        from dra_fake.gpu.faultwatch import FaultWatcher

        FaultWatcher(node_faults(self.runtime), self.runtime.host.stop).start()

    def stop(self) -> None:
        return  # the watch ends with the host's stop event


class _Shared:
    def __init__(self, informer: FaultInformer) -> None:
        self.informer = informer

    def node_service(self, runtime: NodeRuntime) -> NodeService | None:
        return _Informed(self.informer, runtime)


class _Informed:
    def __init__(self, informer: FaultInformer, runtime: NodeRuntime) -> None:
        self.informer, self.runtime = informer, runtime

    def start(self) -> None:
        self.informer.add(self.runtime.node.name, lambda: node_faults(self.runtime))

    def stop(self) -> None:
        self.informer.remove(self.runtime.node.name)
