"""What happened in a scenario (pure): what the pod watch saw and the namespace's events, turned into
the report (JSON) and its markdown. Times are seconds from the scenario's start."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from dra_fake.scenario.model import Expect

# Scheduler and controller events that explain a pod's wait or its end.
PENDING_REASONS = ("FailedScheduling", "BindingConditionsPending")
EVICTION_REASON = "DeviceTaintManagerEviction"
MARKDOWN_REASONS = 3  # a pod's first reasons in the markdown (each attempt's can differ); all in the JSON


@dataclass
class PodRecord:
    """One pod as the watch saw it (the first time of each thing)."""

    name: str
    created: float | None = None
    bound: float | None = None
    running: float | None = None
    deleting: float | None = None
    node: str = ""
    deleted_by_scenario: bool = False
    disruption: str = ""  # the DisruptionTarget condition's reason, if any
    pending: list[str] = field(default_factory=list)  # distinct reasons, in order seen
    evictions: list[str] = field(default_factory=list)  # eviction events' messages

    def observe(self, pod: dict[str, Any], now: float) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        if self.created is None:
            self.created = now
        if spec.get("nodeName") and self.bound is None:
            self.bound, self.node = now, spec["nodeName"]
        if status.get("phase") == "Running" and self.running is None:
            self.running = now
        if meta.get("deletionTimestamp") and self.deleting is None:
            self.deleting = now
        for cond in status.get("conditions") or []:
            if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
                self.disruption = cond.get("reason") or "DisruptionTarget"
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = cond.get("message")
                self.note(f"{cond.get('reason')}: {message}" if message else str(cond.get("reason")))

    def note(self, reason: str) -> None:
        if reason not in self.pending:
            self.pending.append(reason)

    @property
    def evicted(self) -> bool:
        return bool(self.disruption or self.evictions) or (
            self.deleting is not None and not self.deleted_by_scenario
        )

    @property
    def time_to_bind(self) -> float | None:
        if self.bound is None or self.created is None:
            return None
        return round(self.bound - self.created, 3)


def add_events(pods: dict[str, PodRecord], events: list[dict[str, Any]]) -> None:
    """The namespace's events of the scenario's pods: why they waited, whether they were evicted."""
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        obj = event.get("involvedObject") or {}
        record = pods.get(obj.get("name", "")) if obj.get("kind") == "Pod" else None
        if record is None:
            continue
        reason, message = event.get("reason") or "", event.get("message") or ""
        if reason in PENDING_REASONS:
            record.note(f"{reason}: {message}")
        elif reason == EVICTION_REASON and "Cancelling" not in message:
            record.evictions.append(message)


def build(
    name: str, pods: dict[str, PodRecord], actions: list[dict[str, Any]], expect: Expect, duration: float
) -> dict[str, Any]:
    """The report: each pod, the actions as done, a summary and the expectations' outcome."""
    rows = []
    for record in pods.values():
        row = asdict(record)
        row |= {"timeToBind": record.time_to_bind, "evicted": record.evicted}
        rows.append(row)
    binds = [t for r in pods.values() if (t := r.time_to_bind) is not None]
    summary = {
        "pods": len(pods),
        "bound": len(binds),
        "running": sum(r.running is not None for r in pods.values()),
        "evicted": sum(r.evicted for r in pods.values()),
        "neverBound": sorted(r.name for r in pods.values() if r.bound is None),
        "timeToBindSeconds": {
            "p50": round(statistics.median(binds), 3) if binds else None,
            "max": max(binds) if binds else None,
        },
    }
    failures = check(pods, expect)
    return {
        "scenario": name,
        "durationSeconds": round(duration, 3),
        "summary": summary,
        "pods": rows,
        "actions": actions,
        "expectations": {"met": not failures, "failures": failures},
    }


def check(pods: dict[str, PodRecord], expect: Expect) -> list[str]:
    failures = []
    for name in expect.running:
        if pods[name].running is None:
            failures.append(f"{name}: expected to run, never did")
    for name in expect.evicted:
        if not pods[name].evicted:
            failures.append(f"{name}: expected to be evicted, was not")
    for name in expect.unbound:
        if pods[name].bound is not None:
            failures.append(f"{name}: expected never to bind, bound to {pods[name].node}")
    return failures


def markdown(report: dict[str, Any]) -> str:
    """The report as a markdown page (CI job summaries)."""
    s = report["summary"]
    ttb = s["timeToBindSeconds"]
    lines = [
        f"# Scenario {report['scenario']}",
        "",
        f"{s['pods']} pods: {s['bound']} bound, {s['running']} running, {s['evicted']} evicted; "
        f"time to bind p50 {_num(ttb['p50'])} s, max {_num(ttb['max'])} s "
        f"({report['durationSeconds']} s in all).",
        "",
        "| pod | node | created | bound | running | time to bind | evicted | pending reasons |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in report["pods"]:
        shown = [r.replace("|", "\\|")[:160] for r in p["pending"][:MARKDOWN_REASONS]]
        more = len(p["pending"]) - len(shown)
        reasons = "<br>".join(shown + ([f"(+{more} more in the JSON report)"] if more > 0 else [])) or "-"
        evicted = "yes" if p["evicted"] else "no"
        times = " | ".join(_num(p[k]) for k in ("created", "bound", "running", "timeToBind"))
        lines.append(f"| {p['name']} | {p['node'] or '-'} | {times} | {evicted} | {reasons} |")
    lines += ["", "| at | action | what | result |", "| --- | --- | --- | --- |"]
    for a in report["actions"]:
        lines.append(f"| {_num(a['at'])} | {a['action']} | {a['what']} | {a['result']} |")
    exp = report["expectations"]
    lines += ["", "Expectations: " + ("met." if exp["met"] else "NOT met: " + "; ".join(exp["failures"]))]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
