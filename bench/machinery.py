"""Machinery on trial: our plugin with each piece of its machinery and without it, in one run
(same commit, same cluster, variants alternating within each repetition); a piece keeps its place
only where, on a figure users feel, it is better in more of the paired repetitions than luck gives
(`paired`, `verdicts`).

The pieces (dra_fake.core.trials.PIECES, `DRA_FAKE_WITHOUT`), and the CPU pinning
(`--cpu-affinity` one vs inherit). Every variant runs as its own plugin on its own kubelet-less
node, all started together, state on disk. Figures: prepare and unprepare (bench/prepare.py's
`drive`), the slices published after a start (PUBLISH_PIECES), and a fleet's rate (FLEET_PIECES)."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench import fleet, publish
from bench.claims import NAMESPACE, make_claims
from bench.common import CONFIGS, cluster_api, ensure_namespace, spread
from bench.driver import CPU_AFFINITY, DEVICE_STATUS, Driver, start_all
from bench.prepare import CASES, drive
from dra_fake.core import trials
from e2e.localcluster import LocalCluster

BASELINE = "baseline"
OTHER_AFFINITY = "inherit" if CPU_AFFINITY == "one" else "one"
OTHER_DEVICE_STATUS = "true" if DEVICE_STATUS == "false" else "false"


@dataclass(frozen=True)
class Piece:
    name: str
    env: Mapping[str, str]  # what the variant's plugin runs with, beside the baseline's
    variant_has_it: bool  # the variant runs with the piece (the baseline without it)
    what: str  # what runs instead


def pieces() -> tuple[Piece, ...]:
    """Each DRA_FAKE_WITHOUT piece, the CPU pinning and the device status. The bench pins
    (CPU_AFFINITY, default one), so its variant inherits; CPU_AFFINITY=inherit make bench makes the
    pinned one the variant. It writes no device status (DEVICE_STATUS, default false), so its
    variant writes it."""
    return (
        *(Piece(name, {trials.ENV: name}, False, what) for name, what in trials.PIECES.items()),
        Piece(
            "cpuaffinity",
            {"CPU_AFFINITY": OTHER_AFFINITY},
            OTHER_AFFINITY == "one",
            "--cpu-affinity=inherit: the plugin's threads on the CPUs it was started with",
        ),
        # Not machinery but a feature (on in the chart): what writing each claim's device status
        # costs a prepare, beside the bench's baseline that writes none.
        Piece(
            "devicestatus",
            {"DEVICE_STATUS": OTHER_DEVICE_STATUS},
            OTHER_DEVICE_STATUS == "true",
            "--device-status=false: no prepared device's status written into its claim",
        ),
    )


# Figures, whether lower is better, and whether users feel them (the verdict is taken on those).
PREPARE_FIGURES = {
    "prepare_p50_ms": (True, True),
    "prepare_p99_ms": (True, True),
    "unprepare_p50_ms": (True, False),
    "unprepare_p99_ms": (True, False),
    "prepare_claims_per_s": (False, False),
    "cpu_ms_per_claim": (True, False),
}
PUBLISH_FIGURES = {"all_slices_visible_s": (True, True)}
FLEET_FIGURES = {"nodes_per_s": (False, True)}
PUBLISH_PIECES: tuple[str, ...] = ()  # publishing writes no checkpoint and no YAML
FLEET_PIECES: tuple[str, ...] = ()  # the fleet's own machinery among them

KEEPS, WITHIN, COSTS = "keeps its place", "within noise", "costs"
# The sign test's threshold: of 12 pairs (four cases, three repetitions) 10 must go one way
# (P = 0.019). On its two figures a piece with no effect passes by luck about once in 25 runs;
# docs/benchmarks/history.md gives each piece's counts over several runs.
ALPHA = 0.02


def run(
    cluster: LocalCluster,
    work: Path,
    rounds_1: int = 2,
    rounds_8: int = 8,
    repeat: int = 3,
    cases: Sequence[tuple[int, int]] = CASES,
    fleet_nodes: int = 1000,
) -> dict[str, Any]:
    """Every variant `repeat` times per case, alternating, after one unmeasured round each; then
    the publish and fleet variants (where a piece is on trial there; `fleet_nodes` 0 skips the
    fleet). Figures per repetition, their median and spread, and the comparison (`table`,
    `verdicts`)."""
    trials.check()  # this process's own value, read before any variant's is set for a child
    all_pieces = pieces()
    api = cluster_api(cluster)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ensure_namespace(core, NAMESPACE)
    root = work / "machinery-state"  # on disk
    shutil.rmtree(root, ignore_errors=True)
    variants = {BASELINE: {}, **{p.name: dict(p.env) for p in all_pieces}}
    drivers = {name: Driver(cluster, "ours", f"mach-{name}", root, env=env) for name, env in variants.items()}
    results: dict[str, Any] = {
        "repeat": repeat,
        "baseline_cpu_affinity": CPU_AFFINITY,
        "storage": "disk",
        "pieces": {
            p.name: {"env": dict(p.env), "variant_has_it": p.variant_has_it, "what": p.what}
            for p in all_pieces
        },
        "prepare": [],
    }
    claims: dict[tuple[str, int], list[dict[str, str]]] = {}
    try:
        start_all(api, drivers.values())
        claims = {
            (name, shape): make_claims(custom, d.driver, d.node, shape)
            for name, d in drivers.items()
            for shape in sorted({s for s, _ in cases})
        }
        paths = {}
        for (name, shape), refs in claims.items():
            paths[(name, shape)] = work / f"machinery-claims-{name}-{shape}.json"
            paths[(name, shape)].write_text(json.dumps(refs))
            drive(drivers[name], paths[(name, shape)], 1, 1)  # warm-up, not measured: first calls' imports
        for shape, callers in cases:
            reps: dict[str, list[dict[str, Any]]] = {name: [] for name in drivers}
            for r in range(repeat):
                for name in _rotated(list(drivers), r):
                    reps[name].append(
                        drive(
                            drivers[name], paths[(name, shape)], callers, rounds_1 if shape == 1 else rounds_8
                        )
                    )
            results["prepare"].append(
                {
                    "devices_per_claim": shape,
                    "callers": callers,
                    "variants": {name: {"repetitions": r, **spread(r)} for name, r in reps.items()},
                }
            )
    finally:
        for d in drivers.values():
            d.stop()
    _remove(api, drivers.values(), [ref for refs in claims.values() for ref in refs])
    if PUBLISH_PIECES:
        results["publish"] = _repeat(
            repeat,
            {name: variants[name] for name in (BASELINE, *PUBLISH_PIECES)},
            lambda name, env: publish.measure(
                cluster, "ours", f"mach-pub-{name}", CONFIGS / "h100x8.yaml", work, 0.0, env
            ),
        )
    if fleet_nodes and FLEET_PIECES:

        def one_fleet(name: str, env: Mapping[str, str]) -> dict[str, Any]:
            out = fleet.run_fleet(cluster, fleet_nodes, fleet=f"mach-{name}", env=env)
            return {"wall_s": out["wallSeconds"], "nodes_per_s": round(fleet_nodes / out["wallSeconds"], 1)}

        results["fleet"] = {
            "nodes": fleet_nodes,
            **_repeat(repeat, {name: variants[name] for name in (BASELINE, *FLEET_PIECES)}, one_fleet),
        }
    results["table"] = compare(results, all_pieces)
    results["paired"] = paired(results, all_pieces)
    results["verdicts"] = verdicts(results["paired"])
    return results


def _remove(api: client.ApiClient, drivers: Iterable[Driver], claims: Sequence[Mapping[str, str]]) -> None:
    """The trial's claims and its nodes' slices: the sections after it (KWOK's allocations, the
    fleet's) find the cluster as they did before it."""
    custom = client.CustomObjectsApi(api)

    def delete(ref: Mapping[str, str]) -> None:
        try:
            custom.delete_namespaced_custom_object(
                "resource.k8s.io", "v1", ref["namespace"], "resourceclaims", ref["name"]
            )
        except ApiException as err:
            if err.status != 404:
                raise

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(delete, claims))
        list(pool.map(lambda d: d.delete_slices(api, custom), drivers))


def _repeat(
    repeat: int, variants: Mapping[str, Mapping[str, str]], measure: Callable[[str, Mapping[str, str]], Any]
) -> dict[str, Any]:
    """`measure` of each variant, `repeat` times, the variants alternating (`_rotated`)."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for r in range(repeat):
        for name in _rotated(list(variants), r):
            runs[name].append(measure(name, variants[name]))
    return {"variants": {name: {"repetitions": r, **spread(r)} for name, r in runs.items()}}


def _rotated(names: list[str], r: int) -> list[str]:
    """The variants' order in repetition `r`: each goes first in turn (none always follows
    another's disk writes, or always comes first after the start)."""
    k = r % len(names)
    return names[k:] + names[:k]


def noise(figure: Mapping[str, float]) -> float:
    """Run-to-run noise of a figure measured in repetitions (`spread`'s): (max - min) / median."""
    return (figure["max"] - figure["min"]) / figure["median"] if figure["median"] else 0.0


def _rows(
    where: str,
    variants: Mapping[str, Any],
    figures: Mapping[str, tuple[bool, bool]],
    all_pieces: Sequence[Piece],
) -> list[dict[str, Any]]:
    rows = []
    base = variants[BASELINE]
    for p in all_pieces:
        if p.name not in variants:
            continue
        variant = variants[p.name]
        with_, without = (variant, base) if p.variant_has_it else (base, variant)
        for key, (_, felt) in figures.items():
            w, wo, n = with_[key]["median"], without[key]["median"], noise(base[key])
            rows.append(
                {
                    "piece": p.name,
                    "case": where,
                    "figure": key,
                    "user_felt": felt,
                    "with": w,
                    "without": wo,
                    "ratio_with_over_without": round(w / wo, 3) if wo else None,
                    "noise": round(n, 3),
                }
            )
    return rows


def compare(results: Mapping[str, Any], all_pieces: Sequence[Piece]) -> list[dict[str, Any]]:
    """Per piece, case and figure: the medians with and without it, their ratio and the baseline's
    noise (what the report shows; the verdict is taken on the paired repetitions, `paired`)."""
    rows = []
    for case in results["prepare"]:
        where = f"{case['devices_per_claim']}x{case['callers']}"
        rows += _rows(where, case["variants"], PREPARE_FIGURES, all_pieces)
    if "publish" in results:
        rows += _rows("publish", results["publish"]["variants"], PUBLISH_FIGURES, all_pieces)
    if "fleet" in results:
        where = f"fleet {results['fleet']['nodes']}"
        rows += _rows(where, results["fleet"]["variants"], FLEET_FIGURES, all_pieces)
    return rows


def sign_test(better: int, pairs: int) -> float:
    """One-sided sign test: the chance of at least `better` of `pairs` fair coin flips."""
    return sum(math.comb(pairs, k) for k in range(better, pairs + 1)) / 2**pairs


def _sections(results: Mapping[str, Any]) -> Iterable[tuple[str, list[Mapping[str, Any]], Mapping[str, Any]]]:
    """(where, the cases' variants, figures) of each section: prepare's cases pooled, publish, fleet."""
    yield "prepare", [case["variants"] for case in results["prepare"]], PREPARE_FIGURES
    if "publish" in results:
        yield "publish", [results["publish"]["variants"]], PUBLISH_FIGURES
    if "fleet" in results:
        yield f"fleet {results['fleet']['nodes']}", [results["fleet"]["variants"]], FLEET_FIGURES


def paired(results: Mapping[str, Any], all_pieces: Sequence[Piece]) -> list[dict[str, Any]]:
    """Per piece and figure: each repetition of each case pairs the piece's variant with the
    baseline's run of the same repetition (the two ran in one rotation, seconds apart), so a slow
    minute of the machine falls on both. Counts the pairs where the figure is better with the
    piece and where worse (equal pairs count as neither), the median of the pairs' ratios, and the
    sign test's chance of that many by luck, each way."""
    rows = []
    for where, cases, figures in _sections(results):
        for p in all_pieces:
            if not all(p.name in variants for variants in cases):
                continue
            for key, (lower_is_better, felt) in figures.items():
                ratios = []
                for variants in cases:
                    base, variant = variants[BASELINE]["repetitions"], variants[p.name]["repetitions"]
                    for b, v in zip(base, variant, strict=True):
                        with_, without = (v, b) if p.variant_has_it else (b, v)
                        if without[key]:
                            ratios.append(with_[key] / without[key])
                better = sum((r < 1) == lower_is_better for r in ratios if r != 1)
                worse = sum(r != 1 for r in ratios) - better
                rows.append(
                    {
                        "piece": p.name,
                        "where": where,
                        "figure": key,
                        "user_felt": felt,
                        "pairs": len(ratios),
                        "better": better,
                        "worse": worse,
                        "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
                        "p_better": round(sign_test(better, better + worse), 4),
                        "p_worse": round(sign_test(worse, better + worse), 4),
                    }
                )
    return rows


def verdicts(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per piece (`paired`'s rows): KEEPS when, on a figure users feel, it is better in so many of
    the paired repetitions that luck would give that many at most ALPHA of the time, and worse so
    on none; COSTS in the mirror case; else WITHIN. With four cases of three repetitions: better
    in at least 10 of 12 pairs. (Why not each case's medians against their noise: three
    repetitions on two cores put every piece beyond the noise in some case and within it in
    another, and one case flipped a piece's verdict between runs: docs/benchmarks/history.md.)"""
    keeps: dict[str, bool] = {}
    costs: dict[str, bool] = {}
    for row in rows:
        piece = row["piece"]
        keeps.setdefault(piece, False)
        costs.setdefault(piece, False)
        if row["user_felt"]:
            keeps[piece] |= row["p_better"] <= ALPHA
            costs[piece] |= row["p_worse"] <= ALPHA
    # better on one felt figure and worse on another, or neither: within noise
    return {
        piece: (KEEPS if keeps[piece] else COSTS) if keeps[piece] != costs[piece] else WITHIN
        for piece in keeps
    }
