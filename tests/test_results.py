"""Figures printed in more than one place come from one results file: docs/kind.md's version matrix
is generated from docs/results/kind-matrix.tsv (e2e/kindcluster/matrix.py, make generate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.kindcluster import matrix
from e2e.kindcluster.versions import REPO, pinned


def test_the_matrix_table_in_docs_is_generated_from_the_results_file() -> None:
    assert matrix.DOC.read_text() == matrix.render_doc(matrix.DOC.read_text(), matrix.read()), "make generate"


def test_each_pinned_release_has_a_measured_row_with_its_commit() -> None:
    rows = matrix.read()
    assert sorted(r["kubernetes"] for r in rows) == sorted(r.tag for r in pinned())
    for r in rows:
        assert len(r["commit"]) >= 7 and r["passed"] and r["deselected"] and r["lane_s"], r


def test_the_pytest_summary_gives_every_outcome() -> None:
    out = "....\n= 2 failed, 45 passed, 3 skipped, 53 deselected, 1 error in 704.12s (0:11:44) =\n"
    assert matrix.counts(out) == {"passed": 45, "failed": 3, "deselected": 53, "skipped": 3}
    assert matrix.counts("51 passed, 47 deselected in 801.00s") == {
        "passed": 51,
        "failed": 0,
        "deselected": 47,
        "skipped": 0,
    }
    with pytest.raises(ValueError, match="no pytest summary"):
        matrix.counts("ERROR collecting e2e\n")


def test_a_row_written_by_the_matrix_is_read_back(tmp_path: Path) -> None:
    line = matrix.row("v1.37.2", "2026-12-05", "abc1234", 3, 75, 801, "51 passed, 47 deselected in 801.00s")
    path = tmp_path / "m.tsv"
    path.write_text("\t".join(matrix.COLUMNS) + "\n" + line + "\n")
    [r] = matrix.read(path)
    assert [r[k] for k in (*matrix.OUTCOMES, "lane_s")] == ["51", "0", "47", "0", "801"]
    assert matrix.share_run(r) == "52 %"
    path.write_text("\t".join(matrix.COLUMNS) + "\n" + line.replace("\t51\t", "\tmany\t") + "\n")
    with pytest.raises(ValueError, match="passed 'many' is not a count"):
        matrix.read(path)


def test_the_readme_keeps_no_copy_of_the_matrix() -> None:
    """The README links the matrix; its old summary ('the whole e2e suite passed on every release')
    had no measurement behind it."""
    readme = (REPO / "README.md").read_text()
    assert "docs/kind.md#version-matrix" in readme
    assert "whole e2e suite passed" not in readme
