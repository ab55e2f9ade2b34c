"""Workload profiles of KWOK fleets (dra_fake.fleet.workload): parsing, and the KWOK Stages they
become. KWOK itself plays them in e2e/test_kwok.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.cli import main
from dra_fake.fleet.workload import (
    OUTCOME_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    WorkloadError,
    WorkloadProfile,
    kwok_stages,
    load_workload,
    parse_workload,
    stages_yaml,
)


def by_name(profile: WorkloadProfile) -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s["spec"] for s in kwok_stages(profile)}


def expressions(spec: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {e["key"]: (e["operator"], e.get("values", [])) for e in spec["selector"]["matchExpressions"]}


def test_parse_reads_every_field_and_defaults() -> None:
    assert parse_workload(None) == WorkloadProfile()
    profile = parse_workload(
        {"startSeconds": 2, "runSeconds": 30, "runJitterSeconds": 5.5, "failureFraction": 0.1, "exitCode": 3}
    )
    assert profile == WorkloadProfile(2, 30, 5.5, 0.1, 3)
    assert parse_workload({"runSeconds": None}).run_seconds is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"runSecond": 1}, "runSecond"),
        ({"runSeconds": -1}, "runSeconds"),
        ({"runSeconds": "10s"}, "runSeconds"),
        ({"startSeconds": True}, "startSeconds"),
        ({"failureFraction": 1.5}, "failureFraction"),
        ({"exitCode": 0}, "exitCode"),
        ({"exitCode": 1.5}, "exitCode"),
        ({"runJitterSeconds": float("nan")}, "runJitterSeconds"),
        ([1], "expected a mapping"),
    ],
)
def test_bad_profiles_name_the_field(data: object, field: str) -> None:
    with pytest.raises(WorkloadError, match=field):
        parse_workload(data, "w.yaml")


def test_pods_start_after_start_seconds_and_run_until_deleted_by_default() -> None:
    stages = by_name(WorkloadProfile())
    assert list(stages) == [
        "dra-fake-node-ready",
        "dra-fake-pod-start",
        "dra-fake-pod-succeeded",
        "dra-fake-pod-failed",
        "dra-fake-pod-delete",
    ]
    start = stages["dra-fake-pod-start"]
    assert start["delay"] == {"durationMilliseconds": 1000}
    assert expressions(start)[".status.phase"] == ("In", ["Pending"])
    assert "phase: Running" in start["next"]["statusTemplate"]
    # No run time: only pods whose annotation gives one finish.
    for name in ("dra-fake-pod-succeeded", "dra-fake-pod-failed"):
        spec = stages[name]
        assert expressions(spec)[f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]'] == ("Exists", [])
        assert "durationMilliseconds" not in spec["delay"]
    assert stages["dra-fake-pod-delete"]["next"] == {"delete": True}
    # KWOK manages no node's pods without a Node Stage; this one touches only nodes without Ready.
    node = stages["dra-fake-node-ready"]
    assert expressions(node)['.status.conditions.[] | select( .type == "Ready" )'] == ("DoesNotExist", [])


def test_finishing_weighs_success_against_failure() -> None:
    stages = by_name(
        WorkloadProfile(run_seconds=30, run_jitter_seconds=10, failure_fraction=0.25, exit_code=7)
    )
    ok, failed = stages["dra-fake-pod-succeeded"], stages["dra-fake-pod-failed"]
    assert (ok["weight"], failed["weight"]) == (750, 250)
    # KWOK's delay is uniform between the duration and the jitter duration; an annotation wins.
    assert ok["delay"] == {
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]'},
        "durationMilliseconds": 30000,
        "jitterDurationMilliseconds": 40000,
    }
    assert f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]' not in expressions(ok)
    # A failed container of an OnFailure pod is restarted by the kubelet: only Never pods fail.
    assert expressions(ok)[".spec.restartPolicy"] == ("In", ["Never", "OnFailure"])
    assert expressions(failed)[".spec.restartPolicy"] == ("In", ["Never"])
    # A pod's outcome annotation excludes the other stage.
    outcome = f'.metadata.annotations["{OUTCOME_ANNOTATION}"]'
    assert expressions(ok)[outcome] == ("NotIn", ["Failed"])
    assert expressions(failed)[outcome] == ("NotIn", ["Succeeded"])
    assert "phase: Succeeded" in ok["next"]["statusTemplate"]
    assert "exitCode: 0" in ok["next"]["statusTemplate"]
    assert "phase: Failed" in failed["next"]["statusTemplate"]
    assert "exitCode: 7" in failed["next"]["statusTemplate"]
    assert "reason: Error" in failed["next"]["statusTemplate"]


def test_stages_yaml_round_trips(tmp_path: Path) -> None:
    profile = WorkloadProfile(run_seconds=5, failure_fraction=0.5)
    docs = list(yaml.safe_load_all(stages_yaml(profile)))
    assert docs == kwok_stages(profile)
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and d["kind"] == "Stage" for d in docs)
    path = tmp_path / "w.yaml"
    path.write_text("runSeconds: 5\nfailureFraction: 0.5\n")
    assert load_workload(str(path)) == profile


def test_fleet_stages_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("failureFraction: 2\n")
    assert main(["fleet-stages", "--workload", str(path)]) == 2
    assert "failureFraction" in capsys.readouterr().err
    path.write_text("runSeconds: [1\n")
    assert main(["fleet-stages", "--workload", str(path)]) == 2
    assert str(path) in capsys.readouterr().err
    path.write_text("runSeconds: 1\n")
    assert main(["fleet-stages", "--workload", str(path)]) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert "dra-fake-pod-succeeded" in names


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).parents[1] / "examples" / "workloads").glob("*.yaml"))
)
def test_example_workloads_parse(path: Path) -> None:
    profile = load_workload(str(path))
    assert profile.run_seconds is not None and 0 < profile.failure_fraction < 1
