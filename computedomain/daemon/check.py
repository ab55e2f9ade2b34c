"""The simulated IMEX daemon's readiness probe (`dra-fake imex-daemon check`): like
`nvidia-imex-ctl -q`, it prints READY when the daemon recorded a running IMEX and is alive.

Apart from the daemon (computedomain.daemon.daemon) so that it starts without the Kubernetes
client: the kubelet runs it every 10 s with a 1 s timeout (NVIDIA's probe settings), and with the
client loaded a check was too slow for that on busy nodes: the probe timed out, the daemon's entry
turned NotReady, and channel claims were refused (docs/computedomain.md#simulated-imex-daemon).

Without a container runtime (the local dra-kubelet harness) the pod's mounts do not exist; the
harness passes them as DRA_KUBELET_MOUNTS (JSON [{containerPath, hostPath}]) and paths are mapped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from computedomain import imex
from computedomain.plugin.edits import IMEX_CONTAINER_DIR

MOUNTS_ENV = "DRA_KUBELET_MOUNTS"


def container_path(path: str) -> Path:
    """A path inside the container; mapped to the host path when a harness ran us without one."""
    raw = os.environ.get(MOUNTS_ENV)
    if raw:
        for mount in json.loads(raw):
            dest = str(mount["containerPath"]).rstrip("/")
            if path == dest or path.startswith(dest + "/"):
                return Path(str(mount["hostPath"]) + path[len(dest) :])
    return Path(path)


def check() -> int:
    """READY (exit 0) when the daemon process recorded a running IMEX and is alive."""
    try:
        state = json.loads((container_path(IMEX_CONTAINER_DIR) / imex.STATE_NAME).read_text())
        os.kill(int(state["pid"]), 0)
        ready = state.get("state") == "READY"
    except (OSError, ValueError, KeyError, TypeError):
        ready = False
    print("READY" if ready else "NOT READY")
    return 0 if ready else 1
