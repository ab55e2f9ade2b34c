"""Prometheus metrics of the dra-fake kubelet plugins.

``METRICS`` (on the default registry) is what the plugins use; tests build a ``DriverMetrics`` on their
own ``CollectorRegistry``. Who updates what:

* the kubelet gRPC layer (``dra_fake.kubelet.server``): ``dra_fake_requests_total``,
  ``dra_fake_request_duration_seconds``, ``dra_fake_requests_inflight``, and one increment of
  ``dra_fake_node_prepare_errors_total`` / ``dra_fake_node_unprepare_errors_total`` per claim answered
  with an error (including whole-call failures, counted per requested claim);
* the drivers: ``dra_fake_prepared_claims``, ``dra_fake_prepared_devices``,
  ``dra_fake_checkpoint_errors_total{reason}``;
* the ResourceSlice publisher: ``dra_fake_published_devices``;
* both plugins at start: ``dra_fake_feature_enabled{name}`` (dra_fake.core.featuregates).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# gRPC call durations: kubelet calls time out after 45 s
# (docs/reference/kubernetes-dra.md#discovery-and-registration-sequence).
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0)

# Values of the ``result`` label of dra_fake_requests_total.
RESULT_SUCCESS = "success"  # every claim succeeded
RESULT_CLAIM_ERROR = "claim_error"  # call succeeded, at least one claim carries an error
RESULT_ERROR = "error"  # whole call failed with a gRPC error


@dataclass
class DriverMetrics:
    """All dra-fake metrics, registered on ``registry``."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests_total = Counter(
            "dra_fake_requests_total",
            "gRPC calls served to the kubelet, by method (e.g. v1.NodePrepareResources, GetInfo) and result "
            "(success, claim_error, error).",
            ["method", "result"],
            registry=r,
        )
        self.request_duration_seconds = Histogram(
            "dra_fake_request_duration_seconds",
            "Duration of gRPC calls served to the kubelet.",
            ["method"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.requests_inflight = Gauge(
            "dra_fake_requests_inflight", "gRPC calls currently being served.", ["method"], registry=r
        )
        self.prepared_claims = Gauge(
            "dra_fake_prepared_claims", "Claims currently prepared on this node.", registry=r
        )
        self.prepared_devices = Gauge(
            "dra_fake_prepared_devices", "Devices in currently prepared claims on this node.", registry=r
        )
        self.kubelet_registered = Gauge(
            "dra_fake_kubelet_registered",
            "1 while the kubelet reports this plugin registered (NotifyRegistrationStatus), else 0.",
            registry=r,
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
        self.node_prepare_errors_total = Counter(
            "dra_fake_node_prepare_errors_total",
            "Claims answered with an error by NodePrepareResources.",
            registry=r,
        )
        self.node_unprepare_errors_total = Counter(
            "dra_fake_node_unprepare_errors_total",
            "Claims answered with an error by NodeUnprepareResources.",
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
    """A corrupt checkpoint was found (dra_fake.core.checkpoint's default corruption hook)."""
    CHECKPOINT_ERRORS_TOTAL.labels(reason=reason).inc()


def start_metrics_server(
    port: int, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` over HTTP on ``addr:port`` in a daemon thread (port 0: ephemeral, see
    ``server.server_port``). Stop with ``server.shutdown(); server.server_close()``."""
    return start_http_server(port, addr=addr, registry=registry)
