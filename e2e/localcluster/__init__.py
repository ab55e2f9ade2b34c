"""The local control plane used by `make cluster-up`, `make demo` and the e2e suite."""

from e2e.localcluster.cluster import DEFAULT_ROOT, LocalCluster, node_name

__all__ = ["DEFAULT_ROOT", "LocalCluster", "node_name"]
