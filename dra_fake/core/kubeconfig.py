"""Where the API client's configuration comes from (--kubeconfig, else $KUBECONFIG, else the
in-cluster service account), found without importing the kubernetes client: a kubelet plugin
checks it before its sockets serve and builds the client after (docs/benchmarks/history.md#start-up)."""

from __future__ import annotations

import os
from collections.abc import Mapping

# What client-go's and the Python client's in-cluster configuration read.
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"


class StartupError(Exception):
    """A bad flag, config or environment: reported as one line, the process exits 2."""


def kubeconfig_path(kubeconfig: str = "", environ: Mapping[str, str] = os.environ) -> str:
    """The kubeconfig file to load, or "" for the in-cluster configuration."""
    return kubeconfig or environ.get("KUBECONFIG", "")


def check_config_source(kubeconfig: str = "", environ: Mapping[str, str] = os.environ) -> None:
    """StartupError unless the configuration `kube_configuration` will load is there: a readable
    kubeconfig file, or a pod's service environment. (Its content is checked when the client is
    built.)"""
    path = kubeconfig_path(kubeconfig, environ)
    if path:
        # Like $KUBECONFIG, a list of files (the client merges those that exist).
        files = [os.path.expanduser(f) for f in path.split(os.pathsep) if f]
        if not any(os.path.isfile(f) and os.access(f, os.R_OK) for f in files):
            raise StartupError(f"kubeconfig {path}: not a readable file")
    elif not environ.get(SERVICE_HOST_ENV):
        raise StartupError(
            f"in-cluster configuration (set --kubeconfig or KUBECONFIG): ${SERVICE_HOST_ENV} is not set"
        )
