"""README.md's kind path, run as written: the lane that keeps it true (make kind-readme K8S=1.37).

The README's "On your kind cluster" commands sit in ```sh blocks each after a marker line
`<!-- kind-path:NAME -->` (install, upgrade, uninstall). `blocks` extracts them; `for_release` makes
the two choices the README leaves to the reader, the `K8S=` line and, before 1.34, the v1beta1 pod
file its comment names; `run` executes each block with bash as a user would, on a machine with
docker, kubectl and internet (public kindest/node and base images), and checks what the README
promises: `nvidia-smi -L` in the pod names one GPU, the pod keeps it across the upgrade, and the
cluster is gone after the uninstall block.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from e2e.kindcluster.versions import REPO

log = logging.getLogger("kindcluster.readme")

README = REPO / "README.md"
STEPS = ("install", "upgrade", "uninstall")
CLUSTER = "dra-fake"  # the README's --name
_BLOCK = re.compile(r"^<!-- kind-path:(\w+) -->\n```sh\n(.*?)^```$", re.M | re.S)
_RELEASE_LINE = re.compile(r"^K8S=1\.\d+\b", re.M)
V1_POD = "examples/kind/gpu-pod.yaml"
V1BETA1_POD = "examples/kind/gpu-pod-v1beta1.yaml"  # resource.k8s.io/v1 is served from 1.34
# One line of `nvidia-smi -L`: GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
GPU_LINE = re.compile(r"^GPU 0: .+ \(UUID: (GPU-[0-9a-f-]+)\)$", re.M)


def blocks(text: str | None = None) -> dict[str, str]:
    """The README's kind-path blocks by marker name; each marker exactly once."""
    found: dict[str, str] = {}
    for name, body in _BLOCK.findall(README.read_text() if text is None else text):
        if name in found:
            raise ValueError(f"README.md: marker kind-path:{name} twice")
        found[name] = body
    missing = [s for s in STEPS if s not in found]
    if missing:
        raise ValueError(f"README.md: no ```sh block after <!-- kind-path:{missing[0]} -->")
    return found


def for_release(block: str, minor: int) -> str:
    """The block as a reader of Kubernetes 1.<minor> runs it."""
    if block.count("K8S=") and len(_RELEASE_LINE.findall(block)) != 1:
        raise ValueError("README.md kind path: the release is chosen on one line K8S=1.NN")
    block = _RELEASE_LINE.sub(f"K8S=1.{minor}", block)
    if minor < 34:
        block = block.replace(V1_POD, V1BETA1_POD)
    return block


def expand(block: str, minor: int) -> str:
    """The block with $K8S and $VERSION replaced by what it sets them to (for reading and checks)."""
    text = for_release(block, minor)
    for var, value in re.findall(r"^(K8S|VERSION)=(\S+)", text, re.M):
        text = text.replace(f"${var}", value)
    return text


def _bash(script: str, env: dict[str, str], step: str) -> str:
    """Run a block as the README shows it: bash, stop at the first failing command."""
    log.info("README kind path: %s\n%s", step, script)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
    )
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"README kind path, {step} block: exit {proc.returncode}")
    return proc.stdout


def _gpu(output: str, step: str) -> str:
    uuids = GPU_LINE.findall(output)
    if len(uuids) != 1:
        raise RuntimeError(f"README kind path, {step}: nvidia-smi -L showed {uuids or 'no GPU'}, not one GPU")
    return str(uuids[0])


def _kind(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["kind", *args], env=env, capture_output=True, text=True, timeout=300)
    return done.stdout


def _cluster_exists(env: dict[str, str]) -> bool:
    return CLUSTER in _kind(env, "get", "clusters").split()


def run(minor: int, keep: bool = False) -> None:
    """The install, upgrade and uninstall blocks on a new kind cluster `dra-fake` of 1.<minor>."""
    for tool in ("docker", "kubectl"):
        if not shutil.which(tool):
            raise RuntimeError(f"the README's kind path needs {tool} on PATH")
    state = REPO / ".kind" / f"readme-1.{minor}"
    state.mkdir(parents=True, exist_ok=True)
    # kind and helm as make kind-readme builds them; the kubeconfig of this cluster only.
    path = f"{REPO / '.kind' / 'bin'}:{REPO / '.tools' / 'bin'}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "KUBECONFIG": str(state / "kubeconfig")}
    env.pop("REGISTRY", None)  # make release in the upgrade block must push nothing
    if _cluster_exists(env):
        raise RuntimeError(f"a kind cluster {CLUSTER} exists: kind delete cluster --name {CLUSTER} first")
    steps = blocks()
    done = False
    try:
        before = _gpu(_bash(for_release(steps["install"], minor), env, "install"), "install")
        after = _gpu(_bash(for_release(steps["upgrade"], minor), env, "upgrade"), "upgrade")
        if after != before:
            raise RuntimeError(f"README kind path: the upgrade changed the pod's GPU: {before} -> {after}")
        _bash(for_release(steps["uninstall"], minor), env, "uninstall")
        if _cluster_exists(env):
            raise RuntimeError("README kind path: the cluster is still there after the uninstall block")
        done = True
        print(f"README kind path on 1.{minor}: install, upgrade (same GPU {before}), uninstall passed")
    finally:
        if not done:
            _kind(env, "export", "logs", str(state / "logs"), "--name", CLUSTER)
            if not keep:
                _kind(env, "delete", "cluster", "--name", CLUSTER)


def referenced_files(block: str, minor: int) -> list[Path]:
    """The checkout's files a block names (examples/, charts/), for the unit test."""
    return [REPO / p for p in re.findall(r"(?<![\w/])((?:examples|charts)/[\w./-]+)", expand(block, minor))]
