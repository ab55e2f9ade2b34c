"""Fleet mode's API client: the Kubernetes client, counting the requests it makes."""

from __future__ import annotations

import threading
from collections import Counter

from kubernetes import client

from dra_fake.core.kube import TimeoutApiClient, kube_configuration


class CountingApiClient(TimeoutApiClient):
    """An ApiClient that counts the HTTP requests it makes, by method."""

    def __init__(self, configuration: client.Configuration) -> None:
        super().__init__(configuration)
        self.requests: Counter[str] = Counter()
        count_lock = threading.Lock()

        def count(method: str) -> None:
            with count_lock:
                self.requests[method] += 1

        self.on_request = count  # told of every request (dra_fake.core.kube.TimeoutApiClient)


def counting_client(kubeconfig: str, pool_size: int) -> CountingApiClient:
    cfg = kube_configuration(kubeconfig)
    cfg.connection_pool_maxsize = pool_size
    return CountingApiClient(cfg)
