"""GPU Feature Discovery's labels (dra_fake.gpu.gfd) patched onto a plugin's Node
(dra_fake.gpu.nodelabels), retried until the API server takes them. Fleet nodes are created with
their labels (dra_fake.fleet), so the service has no shared part.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from dra_fake.core.retry import with_backoff
from dra_fake.gpu.gfd import gfd_labels

if TYPE_CHECKING:
    from dra_fake.gpu.runtime import Host, NodeRuntime, NodeService, SharedPart


class NodeLabels:
    @staticmethod
    def for_process(host: Host) -> SharedPart | None:
        return None

    @staticmethod
    def for_node(runtime: NodeRuntime) -> NodeService | None:
        return _Labeller(runtime) if runtime.settings.node_labels else None


class _Labeller:
    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime

    def start(self) -> None:
        from dra_fake.gpu.nodelabels import apply_labels, machine_type

        node, host, settings = self.runtime.node, self.runtime.host, self.runtime.settings
        labels = gfd_labels(node.inventory, settings.mig_strategy, machine_type(), settings.sharing)
        threading.Thread(
            target=with_backoff,
            args=(f"label Node {node.name}", lambda: apply_labels(host.api(), node.name, labels), host.stop),
            name="node-labels",
            daemon=True,
        ).start()

    def stop(self) -> None:
        return  # the thread ends with the host's stop event, or once the labels are on
