"""The e2e suite's cluster: the local control plane (started once per run, or reused when
`make cluster-up` is running), or any cluster named by $KUBECONFIG (kind in users' CI), where
tests marked `harness` are skipped."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.kube import Kube
from e2e.localcluster import DEFAULT_ROOT, LocalCluster

E2E_NODES = 2
REPO = Path(__file__).resolve().parents[1]
# node-1: the default 8 x H100; node-2: two H100s with pre-created MIG devices and one with dynamic MIG.
E2E_NODE_CONFIGS = {"node-2": REPO / "examples" / "inventory" / "mixed-mig.yaml"}


def require(condition: object, reason: str) -> None:
    """Skip when the cluster lacks what a test needs, except in CI, where that is a failure."""
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(f"CI cluster lacks: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster | None]:
    if os.environ.get("KUBECONFIG"):
        yield None
        return
    logging.basicConfig(level=logging.INFO)
    root = Path(os.environ.get("LOCAL_CLUSTER_DIR", DEFAULT_ROOT))
    cluster = LocalCluster(root, nodes=E2E_NODES, node_configs=E2E_NODE_CONFIGS)
    if cluster.is_up():
        yield cluster  # a developer's `make cluster-up`: use it, leave it running
        return
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def kubeconfig(local_cluster: LocalCluster | None) -> Path:
    return local_cluster.kubeconfig if local_cluster else Path(os.environ["KUBECONFIG"])


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Kube:
    return Kube(kubeconfig)


@pytest.fixture
def harness(local_cluster: LocalCluster | None) -> LocalCluster:
    if local_cluster is None:
        pytest.skip("needs the local dra-kubelet harness (KUBECONFIG points at another cluster)")
    return local_cluster


@pytest.fixture(scope="session")
def nodes(kube: Kube, local_cluster: LocalCluster | None) -> list[str]:
    if local_cluster:
        return list(local_cluster.state.nodes)
    return sorted({s["spec"]["nodeName"] for s in kube.slices()})


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = kube.namespace()
    yield name
    # Wait until the namespace is gone, so its pods were unprepared and released their devices
    # before the next test allocates.
    kube.delete_namespace(name, wait=True)


@pytest.fixture(autouse=True)
def components_alive(local_cluster: LocalCluster | None) -> Iterator[None]:
    """A component that crashed during a test fails that test, with its last log lines."""
    yield
    if local_cluster:
        dead = local_cluster.dead_processes()
        if dead:
            pytest.fail("components died: " + "; ".join(f"{p.name}:\n{p.tail(15)}" for p in dead))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.e2e)
