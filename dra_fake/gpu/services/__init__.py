"""The per-node services of a GPU node, started and stopped by its runtime (dra_fake.gpu.runtime).

Adding one: a module here with its class (dra_fake.gpu.runtime.ServiceKind: `for_node` builds the
service of a plugin's node, `for_process` the part the nodes of a fleet share, or None where it
does not run there), and its line in SERVICES. The GPU kubelet plugin, the device plugin and fleet
mode then all run it. Modules here import what talks to the API server when a service is built,
not at import: the plugins serve the kubelet before they load the kubernetes client.
"""

from __future__ import annotations

from dra_fake.gpu.services.attach import Attach
from dra_fake.gpu.services.faults import Faults
from dra_fake.gpu.services.labels import NodeLabels
from dra_fake.gpu.services.lending import Lending
from dra_fake.gpu.services.telemetry import Telemetry

# In start order. A node's services are all built (and listening for faults) before any starts.
SERVICES = (Telemetry, NodeLabels, Faults, Attach, Lending)
