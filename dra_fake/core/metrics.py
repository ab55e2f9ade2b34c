"""Prometheus metrics of the dra-fake kubelet plugins.

``METRICS`` (on the default registry) is what the plugins use; tests build a ``DriverMetrics`` on their
own ``CollectorRegistry``. Who updates what:

* the kubelet gRPC layer (``dra_fake.kubelet.server``, ``.draservice``; they are defined in
  ``dra_fake.kubelet.metrics``):
  ``dra_fake_requests_total``, ``dra_fake_request_duration_seconds``, ``dra_fake_requests_inflight``,
  ``dra_fake_kubelet_registered``, and one increment of ``dra_fake_node_prepare_errors_total`` /
  ``dra_fake_node_unprepare_errors_total`` per claim answered with an error (including whole-call
  failures, counted per requested claim);
* the drivers: ``dra_fake_prepared_claims``, ``dra_fake_prepared_devices``,
  ``dra_fake_checkpoint_errors_total{reason}``;
* the ResourceSlice publisher: ``dra_fake_published_devices``;
* both plugins at start: ``dra_fake_feature_enabled{name}`` (dra_fake.core.featuregates).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from dra_fake.core.httpserve import BoundedHTTPServer
from dra_fake.kubelet.metrics import RequestMetrics


@dataclass
class DriverMetrics(RequestMetrics):
    """All dra-fake metrics, registered on ``registry``: the kubelet layer's (RequestMetrics) and
    the drivers' and the publisher's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.registry
        self.prepared_claims = Gauge(
            "dra_fake_prepared_claims", "Claims currently prepared on this node.", registry=r
        )
        self.prepared_devices = Gauge(
            "dra_fake_prepared_devices", "Devices in currently prepared claims on this node.", registry=r
        )
        self.published_devices = Gauge(
            "dra_fake_published_devices", "Devices published in this node's ResourceSlices.", registry=r
        )
        self.checkpoint_errors_total = Counter(
            "dra_fake_checkpoint_errors_total",
            "Failures reading or writing the checkpoint.",
            ["reason"],
            registry=r,
        )
        self.feature_enabled = Gauge(
            "dra_fake_feature_enabled",
            "1 if the driver feature gate is enabled (--feature-gates), else 0; every gate the plugin knows.",
            ["name"],
            registry=r,
        )


METRICS = DriverMetrics(REGISTRY)

# Module-level aliases of the default instance, for code that only sets values.
REQUESTS_TOTAL = METRICS.requests_total
REQUEST_DURATION_SECONDS = METRICS.request_duration_seconds
REQUESTS_INFLIGHT = METRICS.requests_inflight
PREPARED_CLAIMS = METRICS.prepared_claims
PREPARED_DEVICES = METRICS.prepared_devices
PUBLISHED_DEVICES = METRICS.published_devices
CHECKPOINT_ERRORS_TOTAL = METRICS.checkpoint_errors_total
NODE_PREPARE_ERRORS_TOTAL = METRICS.node_prepare_errors_total
NODE_UNPREPARE_ERRORS_TOTAL = METRICS.node_unprepare_errors_total
FEATURE_ENABLED = METRICS.feature_enabled


def record_checkpoint_error(reason: str) -> None:
    """A corrupt checkpoint was found (dra_fake.core.checkpointstore's default corruption hook)."""
    CHECKPOINT_ERRORS_TOTAL.labels(reason=reason).inc()


def start_metrics_server(
    port: int, addr: str | None = None, registry: CollectorRegistry = REGISTRY
) -> tuple[BoundedHTTPServer, threading.Thread]:
    """Serve ``/metrics`` over HTTP on ``addr:port`` (default: dra_fake.core.httpserve's) in a daemon
    thread (port 0: ephemeral, see ``server.server_port``), with dra_fake.core.httpserve's bounds.
    Stop with ``server.shutdown(); server.server_close()``."""
    server = BoundedHTTPServer(
        {"/metrics": lambda: (200, generate_latest(registry).decode())},
        port,
        addr,
        content_type=CONTENT_TYPE_LATEST,
        name="metrics",
    )
    return server, server.start()
