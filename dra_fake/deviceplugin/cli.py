"""The `dra-fake device-plugin` flags: NVIDIA's k8s-device-plugin names and environment variables
where it has them (docs/reference/nvidia-device-plugin.md, B.2), dra-fake's own for the rest.
Unset NVIDIA flags stay None, so the config file can set them."""

from __future__ import annotations

import argparse
from typing import Any


def add_device_plugin_parser(sub: Any, env_default: type[argparse.Action]) -> None:
    p = sub.add_parser(
        "device-plugin",
        help="the simulated GPUs through the kubelet's Device Plugin API, as NVIDIA's k8s-device-plugin",
        description="Register nvidia.com/gpu (and MIG resources) for the node's simulated GPUs.",
    )

    def flag(name: str, env: str, default: Any = None, **kwargs: Any) -> None:
        p.add_argument(name, action=env_default, env=env, default=default, **kwargs)

    # NVIDIA's (flag > environment > config file > its default)
    flag("--mig-strategy", "MIG_STRATEGY", help="none, single or mixed (NVIDIA default none)")
    flag(
        "--fail-on-init-error",
        "FAIL_ON_INIT_ERROR",
        help="true: exit on a start-up error; false: log and wait",
    )
    flag(
        "--device-list-strategy",
        "DEVICE_LIST_STRATEGY",
        help="envvar, volume-mounts, cdi-annotations, cdi-cri (comma-separated)",
    )
    flag("--device-id-strategy", "DEVICE_ID_STRATEGY", help="uuid or index")
    flag("--cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX", help="NVIDIA default cdi.k8s.io/")
    flag("--pass-device-specs", "PASS_DEVICE_SPECS", help="accepted; there are no host device nodes to pass")
    flag("--mps-root", "MPS_ROOT", help="required with sharing.mps")
    flag(
        "--shared-devices-allocation-policy",
        "SHARED_DEVICES_ALLOCATION_POLICY",
        help="preferred allocation of replicas and MIG devices: distributed (NVIDIA default) or packed",
    )
    flag("--config-file", "CONFIG_FILE", help="NVIDIA's config file (version v1: flags, sharing)")
    # NVIDIA's config-manager (its chart's init container and sidecar), here in the plugin itself
    flag(
        "--config-file-srcdir",
        "CONFIG_FILE_SRCDIR",
        default="",
        help="directory of named config files (a ConfigMap); the node label picks one, not CONFIG_FILE",
    )
    flag("--node-label", "NODE_LABEL", default="nvidia.com/device-plugin.config",
         help="the node label whose value names the config")  # fmt: skip
    flag("--default-config", "DEFAULT_CONFIG", default="", help="the config of a node without the label")
    flag(
        "--fallback-strategies",
        "FALLBACK_STRATEGIES",
        default="",
        help="no label, no default: named (config 'default'), single (the only one), empty; in order",
    )
    flag("--kubelet-socket", "KUBELET_SOCKET", default="/var/lib/kubelet/device-plugins/kubelet.sock",
         help="the kubelet's registration socket; the plugin's sockets go beside it")  # fmt: skip
    flag("--dp-disable-healthchecks", "DP_DISABLE_HEALTHCHECKS", default="",
         help="all or xids: no health checks; else Xids that do not make a device unhealthy")  # fmt: skip
    # dra-fake's
    flag("--node-name", "NODE_NAME", default="", help="this node")
    flag(
        "--allow-real-gpu-node",
        "ALLOW_REAL_GPU_NODE",
        default="false",
        choices=["true", "false"],
        help="start even on a node with NVIDIA PCI functions or a loaded NVIDIA driver, or whose "
        "hardware cannot be read (docs/security.md)",
    )
    flag(
        "--config",
        "DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); default: 8 x h100-sxm5-80gb",
    )
    flag("--profiles-dir", "DRA_FAKE_PROFILES_DIR", default="", help="extra directory of GPU profile files")
    flag("--driver-name", "DRIVER_NAME", default="gpu.nvidia.com",
         help="the DRA driver whose plugin must not run on the same node")  # fmt: skip
    registrar = "/var/lib/kubelet/plugins_registry"
    flag("--kubelet-registrar-directory-path", "KUBELET_REGISTRAR_DIRECTORY_PATH", default=registrar,
         help="where a DRA plugin on this node would have registered")  # fmt: skip
    flag("--cdi-root", "CDI_ROOT", default="/var/run/cdi", help="where the CDI strategies' spec is written")
    flag("--data-dir", "DATA_DIR", default="/var/lib/dra-fake/device-plugin",
         help="host directory of the simulated nvidia-smi's files (mounted into containers)")  # fmt: skip
    flag("--device-nodes", "DEVICE_NODES", default="auto", help="auto or never (as the DRA plugin's)")
    flag(
        "--dcgm-exporter-port",
        "DCGM_EXPORTER_PORT",
        default=-1,
        type=int,
        help="dcgm-exporter-compatible metrics",
    )
    flag(
        "--node-labels",
        "NODE_LABELS",
        default="false",
        choices=["true", "false"],
        help="GPU Feature Discovery's labels",
    )
    flag(
        "--kubeconfig", "KUBECONFIG", default="", help="kubeconfig file; in-cluster configuration when empty"
    )
    flag(
        "--log-level",
        "LOG_LEVEL",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    flag("--log-format", "LOG_FORMAT", default="text", choices=["text", "json"], help="log format")
