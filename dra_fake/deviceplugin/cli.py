"""The `dra-fake device-plugin` flags: NVIDIA's k8s-device-plugin names and environment variables
where it has them (docs/reference/nvidia-device-plugin.md, B.2), dra-fake's own for the rest.
Unset NVIDIA flags stay None, so the config file can set them."""

from __future__ import annotations

from typing import Any

from dra_fake.core.flags import add_log_flags, env_flag


def add_device_plugin_parser(sub: Any) -> None:
    p = sub.add_parser(
        "device-plugin",
        help="the simulated GPUs through the kubelet's Device Plugin API, as NVIDIA's k8s-device-plugin",
        description="Register nvidia.com/gpu (and MIG resources) for the node's simulated GPUs.",
    )

    # NVIDIA's (flag > environment > config file > its default)
    env_flag(p, "--mig-strategy", help="none, single or mixed (NVIDIA default none)")
    env_flag(p, "--fail-on-init-error", help="true: exit on a start-up error; false: log and wait")
    env_flag(
        p, "--device-list-strategy", help="envvar, volume-mounts, cdi-annotations, cdi-cri (comma-separated)"
    )
    env_flag(p, "--device-id-strategy", help="uuid or index")
    env_flag(p, "--cdi-annotation-prefix", help="NVIDIA default cdi.k8s.io/")
    env_flag(p, "--pass-device-specs", help="accepted; there are no host device nodes to pass")
    env_flag(p, "--mps-root", help="required with sharing.mps")
    env_flag(
        p,
        "--shared-devices-allocation-policy",
        help="preferred allocation of replicas and MIG devices: distributed (NVIDIA default) or packed",
    )
    env_flag(p, "--config-file", help="NVIDIA's config file (version v1: flags, sharing)")
    # NVIDIA's config-manager (its chart's init container and sidecar), here in the plugin itself
    env_flag(
        p,
        "--config-file-srcdir",
        default="",
        help="directory of named config files (a ConfigMap); the node label picks one, not CONFIG_FILE",
    )
    env_flag(
        p,
        "--node-label",
        default="nvidia.com/device-plugin.config",
        help="the node label whose value names the config",
    )
    env_flag(p, "--default-config", default="", help="the config of a node without the label")
    env_flag(
        p,
        "--fallback-strategies",
        default="",
        help="no label, no default: named (config 'default'), single (the only one), empty; in order",
    )
    env_flag(
        p,
        "--kubelet-socket",
        default="/var/lib/kubelet/device-plugins/kubelet.sock",
        help="the kubelet's registration socket; the plugin's sockets go beside it",
    )
    env_flag(
        p,
        "--dp-disable-healthchecks",
        default="",
        help="all or xids: no health checks; else Xids that do not make a device unhealthy",
    )
    # dra-fake's
    env_flag(p, "--node-name", default="", help="this node")
    env_flag(
        p,
        "--allow-real-gpu-node",
        default="false",
        choices=["true", "false"],
        help="start even on a node with NVIDIA PCI functions or a loaded NVIDIA driver, or whose "
        "hardware cannot be read (docs/security.md)",
    )
    env_flag(
        p,
        "--config",
        env="DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); default: 8 x h100-sxm5-80gb",
    )
    env_flag(
        p,
        "--profiles-dir",
        env="DRA_FAKE_PROFILES_DIR",
        default="",
        help="extra directory of GPU profile files",
    )
    env_flag(
        p,
        "--driver-name",
        default="gpu.nvidia.com",
        help="the DRA driver whose plugin must not run on the same node",
    )
    registrar = "/var/lib/kubelet/plugins_registry"
    env_flag(
        p,
        "--kubelet-registrar-directory-path",
        default=registrar,
        help="where a DRA plugin on this node would have registered",
    )
    env_flag(p, "--cdi-root", default="/var/run/cdi", help="where the CDI strategies' spec is written")
    env_flag(
        p,
        "--data-dir",
        default="/var/lib/dra-fake/device-plugin",
        help="host directory of the simulated nvidia-smi's files (mounted into containers)",
    )
    env_flag(p, "--device-nodes", default="auto", help="auto or never (as the DRA plugin's)")
    env_flag(p, "--dcgm-exporter-port", default=-1, type=int, help="dcgm-exporter-compatible metrics")
    env_flag(
        p, "--node-labels", default="false", choices=["true", "false"], help="GPU Feature Discovery's labels"
    )
    env_flag(p, "--kubeconfig", default="", help="kubeconfig file; in-cluster configuration when empty")
    add_log_flags(p)
