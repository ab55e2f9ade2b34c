"""`dra-fake fleet` as the e2e tests run it (e2e/test_fleet.py, e2e/test_kwok.py): a subprocess that
must still run when the test is done; then stopped, its Nodes deleted and the garbage collection
of their slices awaited, since other tests count GPUs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dra_fake.fleet.core import FLEET_LABEL
from e2e.kube import Kube, poll


@contextmanager
def running_fleet(
    kube: Kube, kubeconfig: Path, log_path: Path, name: str, nodes: int, *flags: str
) -> Iterator[None]:
    """A fleet of `nodes` Nodes named `<name>-<i>`, labelled `name`, with the extra `flags`; its
    output in `log_path`."""
    log = open(log_path, "wb")  # noqa: SIM115 (closed below)
    fleet = [sys.executable, "-m", "dra_fake", "fleet", f"--nodes={nodes}", f"--kubeconfig={kubeconfig}"]
    proc = subprocess.Popen(
        [*fleet, f"--node-prefix={name}-", f"--fleet-name={name}", "--workers=4", *flags],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
        assert proc.poll() is None, f"fleet exited: {log_path.read_text()[-3000:]}"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        kube.core.delete_collection_node(label_selector=f"{FLEET_LABEL}={name}")
        poll(
            "fleet slices garbage-collected",
            lambda: not [s for s in kube.slices() if s["spec"]["nodeName"].startswith(f"{name}-")],
            120,
        )
