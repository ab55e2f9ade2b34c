"""Pod attribution of dcgm-exporter's metrics for simulated GPUs: the simulated-load annotations, the
users of each device (templates, requests, extended resources), and a hostile or unreadable pod
costing only itself (tests/metricsnode.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dra_fake.gpu import monitor as monitor_module
from dra_fake.gpu.workloads import (
    ANNOTATION_MEMORY,
    ANNOTATION_UTILIZATION,
    DEFAULT_LOAD,
    ClaimHolding,
    HeldDevice,
    Load,
    LoadError,
    parse_load,
    users_by_device,
)
from tests.metricsnode import NODE, H100x2, holding, inventory, monitor_for, pod, samples

# ---- workloads ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "load"),
    [
        ({}, DEFAULT_LOAD),
        ({ANNOTATION_UTILIZATION: "75"}, Load((75, 75), memory_fraction=0.5)),
        (
            {ANNOTATION_UTILIZATION: " 10 - 20 ", ANNOTATION_MEMORY: "40%"},
            Load((10, 20), memory_fraction=0.4),
        ),
        ({ANNOTATION_MEMORY: "20Gi"}, Load((80, 100), memory_mib=20480)),
        ({ANNOTATION_MEMORY: "512"}, Load((80, 100), memory_mib=512)),
    ],
)
def test_parse_load(annotations: dict[str, str], load: Load) -> None:
    assert parse_load(annotations) == load


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({ANNOTATION_UTILIZATION: "90-10"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_UTILIZATION: "120"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_UTILIZATION: "lots"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_MEMORY: "150%"}, ANNOTATION_MEMORY),
        ({ANNOTATION_MEMORY: "2 GB"}, ANNOTATION_MEMORY),
    ],
)
def test_malformed_load_annotation_names_itself(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(LoadError, match=re.escape(named)):
        parse_load(annotations)


def test_users_by_device_resolves_templates_requests_and_extended_resources() -> None:
    templated = pod("t", "unused")
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "tpl"}]
    templated["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "t-gpu-x1"}]
    by_request = pod("r", "two")
    by_request["spec"]["containers"] = [
        {"name": "a", "resources": {"claims": [{"name": "gpu", "request": "first"}]}},
        {"name": "b", "resources": {"claims": [{"name": "gpu", "request": "second"}]}},
    ]
    extended: dict[str, Any] = {
        "metadata": {"name": "x", "namespace": "ns", "uid": "uid-x"},
        "spec": {"containers": [{"name": "cuda"}]},
        "status": {
            "phase": "Running",
            "extendedResourceClaimStatus": {
                "resourceClaimName": "x-extended-resources-abc",
                "requestMappings": [
                    {
                        "containerName": "cuda",
                        "resourceName": "nvidia.com/gpu",
                        "requestName": "container-0-request-0",
                    }
                ],
            },
        },
    }
    done = pod("d", "gone")
    done["status"]["phase"] = "Succeeded"
    bad = pod("bad", "bad-claim", {ANNOTATION_UTILIZATION: "x"})
    claims = [
        holding("t-gpu-x1", "gpu-0"),
        ClaimHolding(
            "ns", "two", (HeldDevice("gpu-1", NODE, ("first",)), HeldDevice("gpu-2", NODE, ("second/h100",)))
        ),
        ClaimHolding(
            "ns", "x-extended-resources-abc", (HeldDevice("gpu-3", NODE, ("container-0-request-0",)),)
        ),
        holding("gone", "gpu-4"),
        holding("bad-claim", "gpu-5"),
    ]
    users, errors = users_by_device([templated, by_request, extended, done, bad], claims)
    assert {d: [(u.pod, u.container) for u in us] for d, us in users.items()} == {
        "gpu-0": [("t", "main")],
        "gpu-1": [("r", "a")],
        "gpu-2": [("r", "b")],
        "gpu-3": [("x", "cuda")],
        "gpu-5": [("bad", "main")],
    }
    assert users["gpu-5"][0].load == DEFAULT_LOAD
    assert list(errors) == ["ns/bad"] and ANNOTATION_UTILIZATION in errors["ns/bad"]


@pytest.mark.parametrize(
    "hostile",
    [
        {ANNOTATION_MEMORY: "9" * 5000},  # int() of it raises a plain ValueError (the digit limit)
        {ANNOTATION_MEMORY: "99999999Ti"},
        {ANNOTATION_MEMORY: "1" + "0" * 20},
        {ANNOTATION_MEMORY: "50." + "0" * 5000 + "%"},
        {ANNOTATION_UTILIZATION: "5" * 100},
        {ANNOTATION_UTILIZATION: " " * 10_000 + "5"},
    ],
    ids=["5000-digits", "huge-ti", "21-digits", "long-percent", "long-utilization", "padded"],
)
def test_a_hostile_annotation_costs_only_its_own_pod(hostile: dict[str, str]) -> None:
    """Any pod of the node may carry the annotations: a value past the bounds is that pod's error
    (named), it gets the default load, and every other pod is still attributed."""
    with pytest.raises(LoadError, match=re.escape(next(iter(hostile)))):
        parse_load(hostile)
    good = pod("good", "good-claim", {ANNOTATION_UTILIZATION: "10-20"})
    bad = pod("bad", "bad-claim", hostile)
    users, errors = users_by_device(
        [bad, good], [holding("good-claim", "gpu-0"), holding("bad-claim", "gpu-1")]
    )
    assert list(errors) == ["ns/bad"] and next(iter(hostile)) in errors["ns/bad"]
    assert users["gpu-0"][0].load == Load((10, 20), memory_fraction=0.5)
    assert users["gpu-1"][0].load == DEFAULT_LOAD


def test_a_pod_that_cannot_be_read_costs_only_itself() -> None:
    broken = pod("broken", "bad-claim")
    broken["spec"]["containers"] = [{"resources": {"claims": [{"name": "gpu"}]}}]  # no name
    good = pod("good", "good-claim")
    users, errors = users_by_device(
        [broken, good], [holding("good-claim", "gpu-0"), holding("bad-claim", "gpu-1")]
    )
    assert list(users) == ["gpu-0"] and list(errors) == ["ns/broken"]
    assert "pod not understood" in errors["ns/broken"]


def test_the_monitor_posts_one_event_on_the_pod_with_a_bad_annotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    posted: list[tuple[str, str, str, str]] = []

    def post(api: Any, namespace: str, name: str, uid: str, node: str, **kw: str) -> None:
        posted.append((namespace, name, uid, kw["reason"]))
        assert ANNOTATION_MEMORY in kw["message"] and node == NODE

    monkeypatch.setattr(monitor_module, "post_pod_event", post)
    inv = inventory(H100x2)
    m = monitor_for(tmp_path, inv, [holding("bad-claim", "gpu-0"), holding("good-claim", "gpu-1")])
    m._api = object()  # type: ignore[assignment]
    m.set_pods([pod("bad", "bad-claim", {ANNOTATION_MEMORY: "9" * 5000}), pod("good", "good-claim")])
    text = m.sample()
    m.sample()  # the same error again: no second event
    assert posted == [("ns", "bad", "uid-bad", monitor_module.EVENT_REASON)]
    attributed = {s.labels.get("pod") for s in samples(text) if s.name == "DCGM_FI_DEV_GPU_UTIL"}
    assert attributed == {"bad", "good"}  # both attributed, the bad one with the default load
