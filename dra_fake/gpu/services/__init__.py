"""The per-node services of a GPU node, started and stopped by its runtime (dra_fake.gpu.runtime).

Adding one: a module here with its class (dra_fake.gpu.runtime.ServiceKind: `for_node` builds the
service of a plugin's node, `for_process` the part the nodes of a fleet share, or None where it
does not run there), and its line in SERVICES. The GPU kubelet plugin, the device plugin and fleet
mode then all run it. Modules here import what talks to the API server when a service is built,
not at import: the plugins serve the kubelet before they load the kubernetes client.
"""

from __future__ import annotations

from dra_fake.gpu.services.faults import Faults
from dra_fake.gpu.services.labels import NodeLabels
from dra_fake.gpu.services.telemetry import Telemetry

# In start order. Telemetry is built before faults start, so it hears of the first ones.
SERVICES = (Telemetry, NodeLabels, Faults)
