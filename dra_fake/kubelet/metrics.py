"""The metrics the kubelet gRPC layer records (dra_fake.kubelet.server, .draservice): calls served, their
duration and result, claims answered with an error, the kubelet's registration.

They are part of the plugins' metrics (dra_fake.core.metrics.DriverMetrics extends them); they are
defined here so this layer records them without importing the core (the core serves the kubelet
through this layer, not the reverse: the import contract in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# gRPC call durations: kubelet calls time out after 45 s
# (docs/reference/kubernetes-dra.md#discovery-and-registration-sequence).
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0)

# Values of the ``result`` label of dra_fake_requests_total.
RESULT_SUCCESS = "success"  # every claim succeeded
RESULT_CLAIM_ERROR = "claim_error"  # call succeeded, at least one claim carries an error
RESULT_ERROR = "error"  # whole call failed with a gRPC error


@dataclass
class RequestMetrics:
    """The kubelet layer's metrics, registered on ``registry`` (by default a registry of their own,
    which nothing serves: a KubeletPlugin built without the plugin's metrics records into it)."""

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
        self.kubelet_registered = Gauge(
            "dra_fake_kubelet_registered",
            "1 while the kubelet reports this plugin registered (NotifyRegistrationStatus), else 0.",
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
