"""kind clusters of every pinned Kubernetes release, built offline, with the chart installed."""

from e2e.kindcluster.cluster import KindCluster
from e2e.kindcluster.versions import Release, newest, pinned, resolve

__all__ = ["KindCluster", "Release", "newest", "pinned", "resolve"]
