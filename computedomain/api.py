"""NVIDIA's names for `compute-domain.nvidia.com`: API group and kinds, labels, finalizer, device
classes, config kinds, limits (docs/computedomain.md). Shared by the controller, the plugin and
the daemon, so manifests written for NVIDIA's driver work unchanged."""

from __future__ import annotations

DRIVER_NAME = "compute-domain.nvidia.com"
GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "computedomains"
CLIQUE_PLURAL = "computedomaincliques"

# Label and finalizer keys (docs/reference/nvidia-compute-domains.md#31-controller-objects).
CD_LABEL = "resource.nvidia.com/computeDomain"
FINALIZER = "resource.nvidia.com/computeDomain"
CLIQUE_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON = "Daemon"
TARGET_WORKLOAD = "Workload"

DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"

CHANNEL_KIND = "ComputeDomainChannelConfig"
DAEMON_KIND = "ComputeDomainDaemonConfig"

STATUS_READY = "Ready"
STATUS_NOT_READY = "NotReady"
ALLOCATION_SINGLE = "Single"
ALLOCATION_ALL = "All"
# The daemon image's non-root user; the compute-domain plugin hands each domain's IMEX directory to it.
DEFAULT_DAEMON_UID = 65532

IMEX_CHANNEL_COUNT = 2048  # getImexChannelCount() hard-codes 2048
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN = 18  # GB200/GB300 NVL72
DEFAULT_DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"  # fixed by the controller, as NVIDIA's


def daemon_object_name(cd_uid: str) -> str:
    """The daemon ResourceClaimTemplate and DaemonSet: `computedomain-daemon-<cdUID>`."""
    return f"computedomain-daemon-{cd_uid}"


def clique_object_name(cd_uid: str, clique_id: str) -> str:
    return f"{cd_uid}.{clique_id}"
