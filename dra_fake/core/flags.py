"""The one way a command declares a flag with an environment variable (`env_flag`), as NVIDIA's and
the reference driver's binaries do, so a Helm chart can set it either way; and the flags both
kubelet plugins share. Building a parser imports nothing else (every command's parser is built on
each start)."""

from __future__ import annotations

import argparse
import os
from typing import Any

LOG_LEVELS = ["debug", "info", "warning", "error"]


class EnvDefault(argparse.Action):
    """An option whose default comes from an environment variable."""

    def __init__(self, env: str, required: bool = False, default: Any = None, **kwargs: Any) -> None:
        if env in os.environ:
            default = os.environ[env]
            required = False
        kwargs["help"] = f"{kwargs.get('help', '')} [env {env}]" + (
            f" (default {default})" if default not in (None, "") else ""
        )
        super().__init__(default=default, required=required, **kwargs)
        self.env = env

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def env_flag(p: argparse._ActionsContainer, name: str, *, env: str = "", **kwargs: Any) -> None:
    """The flag `name`, whose default the environment variable `env` overrides (by default the
    flag's name in capitals: `--node-name`, NODE_NAME); kwargs as argparse's."""
    env = env or name.removeprefix("--").replace("-", "_").upper()
    p.add_argument(name, action=EnvDefault, env=env, **kwargs)


def add_log_flags(p: argparse._ActionsContainer) -> None:
    env_flag(p, "--log-level", default="info", choices=LOG_LEVELS, help="log level")
    env_flag(p, "--log-format", default="text", choices=["text", "json"], help="log format")


def add_plugin_flags(p: argparse.ArgumentParser, driver_default: str) -> None:
    """The flags of both kubelet plugins (dra_fake.core.serving runs them)."""
    env_flag(
        p,
        "--device-status",
        default="true",
        choices=["true", "false"],
        help="write each prepared device's status (Ready, with its data: a GPU's UUID, MIG parent and "
        "profile; an IMEX channel's number and domain) into its claim's status.devices; the GPU plugin "
        "reports the attach of fabric-attached GPUs there too (docs/prepare.md)",
    )
    env_flag(p, "--node-name", required=True, help="name of the node this plugin runs on")
    env_flag(
        p,
        "--driver-name",
        default=driver_default,
        help="DRA driver name published in ResourceSlices and registered with the kubelet",
    )
    env_flag(p, "--cdi-root", default="/var/run/cdi", help="directory for generated CDI specs")
    env_flag(
        p,
        "--kubelet-registrar-directory-path",
        default="/var/lib/kubelet/plugins_registry",
        help="the kubelet's plugin registration directory",
    )
    env_flag(
        p,
        "--kubelet-plugins-directory-path",
        default="/var/lib/kubelet/plugins",
        help="the kubelet's plugins directory; socket, checkpoint and lock live in <dir>/<driver>",
    )
    env_flag(
        p,
        "--pod-uid",
        default="",
        help="UID of the plugin's pod (downward API); enables rolling-update socket names",
    )
    env_flag(
        p,
        "--healthcheck-port",
        type=int,
        default=-1,
        help="port of the gRPC health service (negative: disabled)",
    )
    env_flag(
        p,
        "--healthcheck-address",
        default="127.0.0.1",
        help="address the gRPC health service listens on; in a pod, its IP, for the kubelet's gRPC probe",
    )
    env_flag(
        p,
        "--metrics-port",
        type=int,
        default=-1,
        help="port of the Prometheus metrics endpoint (negative: disabled)",
    )
    env_flag(p, "--kubeconfig", default="", help="kubeconfig file; in-cluster configuration when empty")
    env_flag(
        p,
        "--cpu-affinity",
        default="inherit",
        choices=["one", "inherit"],
        help="inherit: the CPUs the process was started with; one: every thread of the plugin on the "
        "CPU it starts on (its Python threads share one interpreter lock; handing it between CPUs "
        "costs CPU, docs/benchmarks/history.md#sixteenth-round-one-cpu; make bench sets it)",
    )
    env_flag(
        p,
        "--feature-gates",
        default="",
        help="NVIDIA driver feature gates, one set for both plugins as NVIDIA's, e.g. "
        "TimeSlicingSettings=true,NVMLDeviceHealthCheck=true",
    )
    add_log_flags(p)
