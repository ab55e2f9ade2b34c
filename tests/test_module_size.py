"""Modules of one concept: no hand-written module under dra_fake/ or computedomain/ grows past
MAX_LINES (docs/architecture.md). A module that does is split along its concepts, not listed here."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 450
# Generated code only, each with what generates it.
GENERATED = {
    "dra_fake/kubelet/pb": "the gRPC stubs of proto/ (make proto, hack/gen-proto.sh)",
}


def oversized(root: Path) -> dict[str, int]:
    """Hand-written modules under `root`'s packages longer than MAX_LINES: path -> lines."""
    found = {}
    for package in ("dra_fake", "computedomain"):
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if any(name.startswith(prefix + "/") for prefix in GENERATED):
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found[name] = lines
    return found


def test_no_hand_written_module_is_over_the_limit() -> None:
    assert oversized(REPO) == {}, f"split these along their concepts (at most {MAX_LINES} lines)"


def test_the_check_finds_a_long_module_and_skips_generated_code(tmp_path: Path) -> None:
    long = "\n".join(["x = 1"] * (MAX_LINES + 1)) + "\n"
    for name in ("dra_fake/core/big.py", "dra_fake/kubelet/pb/dra/v1/api_pb2.py", "computedomain/ok.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(long if "ok" not in name else "x = 1\n")
    assert oversized(tmp_path) == {"dra_fake/core/big.py": MAX_LINES + 1}
    assert all((REPO / prefix).is_dir() for prefix in GENERATED)  # the allow-list names what exists
