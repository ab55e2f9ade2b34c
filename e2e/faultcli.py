"""GpuFaults in the e2e tests: `dra-fake fault` run as a user runs it, and the API they live in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GROUP, VERSION, PLURAL = "dra-fake.dev", "v1alpha1", "gpufaults"


def fault_cli(kubeconfig: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "dra_fake", "fault", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    assert out.returncode == 0, f"dra-fake fault {' '.join(args)}: {out.stdout}{out.stderr}"
    return out.stdout


def inject(kubeconfig: Path, node: str, device: str, kind: str, name: str, *flags: str) -> str:
    """`dra-fake fault inject` of a fault that goes when it is cleared (recovery clear)."""
    return fault_cli(
        kubeconfig,
        "inject",
        "--node",
        node,
        "--device",
        device,
        "--kind",
        kind,
        "--recovery",
        "clear",
        "--name",
        name,
        *flags,
    )
