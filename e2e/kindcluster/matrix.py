"""The kind version matrix as measured: docs/results/kind-matrix.tsv, one row per lane run, and the
table docs/kind.md shows, generated from it (make generate; tests/test_results.py compares).

hack/kind/matrix.sh appends its rows to .kind/matrix.tsv in the same columns (`row`); copy the rows
of a run into docs/results/kind-matrix.tsv and `make generate`. An empty cell: not recorded.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from e2e.kindcluster.versions import REPO

RESULTS = REPO / "docs" / "results" / "kind-matrix.tsv"
DOC = REPO / "docs" / "kind.md"
COLUMNS = (
    "kubernetes",
    "date",
    "commit",
    "workers",
    "passed",
    "failed",
    "deselected",
    "skipped",
    "cluster_up_s",
    "lane_s",
    "notes",
)
OUTCOMES = ("passed", "failed", "deselected", "skipped")
BEGIN = "<!-- generated from docs/results/kind-matrix.tsv by make generate: edit that file -->\n"
END = "<!-- end of generated table -->\n"


def read(path: Path = RESULTS) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for i, r in enumerate(rows, start=2):
        if tuple(r) != COLUMNS or None in r.values():
            raise ValueError(f"{path}:{i}: expected the columns {', '.join(COLUMNS)}")
        for name in (*OUTCOMES, "workers", "cluster_up_s", "lane_s"):
            if r[name] and not r[name].isdigit():
                raise ValueError(f"{path}:{i}: {name} {r[name]!r} is not a count")
    return rows


def counts(pytest_output: str) -> dict[str, int]:
    """The outcome counts of pytest's last summary line ("45 passed, 53 deselected in 704.12s")."""
    summaries = [
        line for line in pytest_output.splitlines() if re.search(r"\d+ (passed|failed).* in [\d.]+s", line)
    ]
    if not summaries:
        raise ValueError("no pytest summary line in the output")
    found = {
        k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|deselected|skipped|errors?)\b", summaries[-1])
    }
    found["failed"] = found.get("failed", 0) + found.pop("error", 0) + found.pop("errors", 0)
    return {k: found.get(k, 0) for k in OUTCOMES}


def row(kubernetes: str, date: str, commit: str, workers: int, up_s: int, lane_s: int, output: str) -> str:
    """One TSV line for a lane run, from its pytest output."""
    c = counts(output)
    cells = [
        kubernetes,
        date,
        commit,
        str(workers),
        *(str(c[k]) for k in OUTCOMES),
        str(up_s),
        str(lane_s),
        "",
    ]
    return "\t".join(cells)


def share_run(r: dict[str, str]) -> str:
    """Of the tests collected, the share not deselected."""
    total = sum(int(r[k] or 0) for k in OUTCOMES)
    return f"{100 * (total - int(r['deselected'] or 0)) / total:.0f} %" if total else ""


def table(rows: list[dict[str, str]]) -> str:
    def cell(value: str, unit: str = "") -> str:
        return f"{value}{unit}" if value else "n/r"

    lines = [
        "| Kubernetes | passed | failed | deselected | skipped | not deselected | workers | cluster up "
        "| lane | date | commit | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        outcome = " | ".join(cell(r[k]) for k in OUTCOMES)
        lines.append(
            f"| {r['kubernetes']} | {outcome} | {share_run(r)} | {cell(r['workers'])} "
            f"| {cell(r['cluster_up_s'], ' s')} | {cell(r['lane_s'], ' s')} | {cell(r['date'])} "
            f"| `{r['commit']}` | {r['notes']} |"
        )
    return "\n".join(lines) + "\n"


def render_doc(doc_text: str, rows: list[dict[str, str]]) -> str:
    """docs/kind.md with the table between its markers replaced."""
    if doc_text.count(BEGIN) != 1 or doc_text.count(END) != 1:
        raise ValueError(f"{DOC}: needs the generated-table markers once each")
    head, rest = doc_text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}{table(rows)}{END}{tail}"


def write_doc() -> Path:
    DOC.write_text(render_doc(DOC.read_text(), read()))
    return DOC
