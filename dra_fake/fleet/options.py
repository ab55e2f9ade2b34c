"""What a fleet does: `FleetOptions`, from the command's flags (dra_fake.fleet.main)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_fake.gpu.api import DEFAULT_IGNORED_XIDS


@dataclass
class FleetOptions:
    driver: str = "gpu.nvidia.com"
    nodes: int = 0  # create this many nodes (0: adopt only)
    prefix: str = "fleet-"
    fleet: str = "fleet"
    adopt_selector: str = ""  # adopt existing nodes matching this label selector instead
    workers: int = 16
    mark_pods_running: bool = False
    resync_seconds: float = 300.0
    node_labels: dict[str, str] = field(default_factory=dict)
    health_check: bool = False  # NVMLDeviceHealthCheck: GpuFaults taint the fleet's devices
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    gfd_labels: bool = True  # GPU Feature Discovery's labels on created Nodes
    mig_strategy: str = "none"
    dcgm_port: int = -1  # one dcgm-exporter-compatible endpoint for the fleet; negative: none
