"""`dra-fake fault`: flags -> GpuFault objects, the table, and chaos runs (API calls faked)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from dra_fake.cli import build_parser
from dra_fake.gpu.faultcli import FaultInputError, chaos_plan, fault_manifest, fault_table, run_chaos
from dra_fake.gpu.faults import parse_fault


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["fault", *argv])


def test_inject_flags_make_a_valid_gpufault() -> None:
    obj = fault_manifest(
        args(
            "inject",
            "--node",
            "n1",
            "--device",
            "gpu-3",
            "--kind",
            "xid",
            "--xid",
            "79",
            "--duration",
            "60",
            "--recovery",
            "clear",
            "--effect",
            "NoExecute",
        ),
        "cli",
    )
    assert obj["apiVersion"] == "dra-fake.dev/v1alpha1" and obj["kind"] == "GpuFault"
    assert obj["metadata"] == {"labels": {"dra-fake.dev/created-by": "cli"}, "generateName": "n1-gpu-3-xid-"}
    assert obj["spec"] == {
        "nodeName": "n1",
        "device": "gpu-3",
        "kind": "xid",
        "xid": 79,
        "effect": "NoExecute",
        "durationSeconds": 60,
        "recovery": "clear",
    }
    stored = {**obj, "metadata": {"name": "x", "creationTimestamp": "2026-12-01T10:00:00Z"}}
    assert parse_fault(stored).xid == 79  # what the plugin will read


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--kind", "xid"), "--kind xid needs --xid"),
        (("--kind", "gpu-lost", "--xid", "79"), "--xid is only for --kind xid"),
        (("--kind", "xid", "--xid", "79", "--temperature", "90"), "--temperature is only for --kind thermal"),
        (("--kind", "thermal", "--ecc-count", "2"), "--ecc-type and --ecc-count are only for --kind ecc"),
    ],
)
def test_flags_of_another_kind_are_refused(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(FaultInputError, match=message):
        fault_manifest(args("inject", "--node", "n", "--device", "gpu-0", *argv), "cli")


def test_table() -> None:
    text = fault_table(
        [
            {
                "metadata": {"name": "a"},
                "spec": {"nodeName": "n", "device": "gpu-1", "kind": "ecc"},
                "status": {"phase": "Active", "message": "on gpu-1"},
            },
            {"metadata": {"name": "b"}, "spec": {"nodeName": "n", "device": "gpu-2", "kind": "gpu-lost"}},
        ]
    )
    lines = [line.split() for line in text.splitlines()]
    assert lines[0] == ["NAME", "NODE", "DEVICE", "KIND", "DETAIL", "PHASE", "MESSAGE"]
    assert lines[1] == ["a", "n", "gpu-1", "ecc", "doublex1", "Active", "on", "gpu-1"]
    assert lines[2] == ["b", "n", "gpu-2", "gpu-lost", "-", "-"]


NODES = {"n1": ["gpu-0", "gpu-1"], "n2": ["gpu-0", "gpu-1", "gpu-2"]}


def test_chaos_plan_is_repeatable_and_valid() -> None:
    plan = chaos_plan(NODES, ["xid", "gpu-lost", "ecc", "thermal"], 40, seed=7, duration=30)
    assert plan == chaos_plan(NODES, ["xid", "gpu-lost", "ecc", "thermal"], 40, seed=7, duration=30)
    assert plan != chaos_plan(NODES, ["xid", "gpu-lost", "ecc", "thermal"], 40, seed=8, duration=30)
    assert {p["kind"] for p in plan} == {"xid", "gpu-lost", "ecc", "thermal"}
    for spec in plan:
        assert spec["device"] in NODES[spec["nodeName"]]
        parse_fault({"metadata": {"name": "c", "creationTimestamp": "2026-12-01T10:00:00Z"}, "spec": spec})


class FakeFaults:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.created.append(obj)
        return {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['generateName']}z"}}

    def delete(self, name: str) -> None:
        self.deleted.append(name)


def test_chaos_run_injects_at_the_rate_logs_and_cleans_up(tmp_path: Path) -> None:
    log = tmp_path / "chaos.jsonl"
    now = [0.0]

    class Clock:
        def __call__(self) -> float:
            return now[0]

    class Stop:
        """Advances the fake clock instead of sleeping."""

        def wait(self, seconds: float) -> bool:
            now[0] += seconds
            return False

    faults = FakeFaults()
    a = args("chaos", "--nodes", "n1,n2", "--rate", "12", "--for", "60", "--seed", "3", "--log", str(log))
    assert run_chaos(a, faults, devices_of=NODES.__getitem__, clock=Clock(), stop=Stop()) == 0  # type: ignore[arg-type]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["action"] for r in records] == ["start"] + ["inject"] * 12 + ["clear"] * 12 + ["end"]
    assert records[0]["interval"] == 5.0 and records[-1]["injected"] == 12
    assert [c["spec"] for c in faults.created] == chaos_plan(NODES, a.kinds.split(","), 12, 3, 30)
    assert faults.deleted == [r["name"] for r in records if r["action"] == "inject"]
    assert now[0] == 55.0  # the twelfth fault at 11 x 5 s


def test_chaos_refuses_nodes_without_devices_and_unknown_kinds() -> None:
    with pytest.raises(FaultInputError, match=r"n3: no gpu\.nvidia\.com devices published"):
        run_chaos(args("chaos", "--nodes", "n1,n3"), FakeFaults(), devices_of=lambda n: NODES.get(n, []))  # type: ignore[arg-type]
    with pytest.raises(FaultInputError, match="--kinds: meltdown"):
        run_chaos(
            args("chaos", "--nodes", "n1", "--kinds", "xid,meltdown"),
            FakeFaults(),
            devices_of=NODES.__getitem__,
        )  # type: ignore[arg-type]
