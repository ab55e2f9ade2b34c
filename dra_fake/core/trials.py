"""Machinery on trial: `DRA_FAKE_WITHOUT` names pieces of machinery that a process runs without,
each replaced by the plain way it replaced, so that a benchmark can measure what each one buys
(bench/machinery.py; docs/benchmarks/history.md#machinery-on-trial). Unset, everything is on.

    DRA_FAKE_WITHOUT=journal python -m dra_fake gpu-kubelet-plugin ...

Each piece asks `without(name)` at its one decision point. The value is read once per process;
an unknown name is an error at start-up (`check`, from dra_fake.cli) naming the value.
"""

from __future__ import annotations

import functools
import os

ENV = "DRA_FAKE_WITHOUT"

# name -> what runs instead
PIECES = {
    "journal": "every checkpoint save rewrites the whole file; no journal (checkpointstore)",
    "yamlwriter": "CDI specs are written by PyYAML's dumper, not yamlio.dump_block",
}


class UnknownPieceError(ValueError):
    """`DRA_FAKE_WITHOUT` names a piece that does not exist."""


def parse(value: str) -> frozenset[str]:
    """The pieces of a comma-separated list (blanks ignored); UnknownPieceError otherwise."""
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(names - PIECES.keys())
    if unknown:
        raise UnknownPieceError(
            f"{ENV}={value!r}: unknown piece(s) {', '.join(unknown)}; known: {', '.join(sorted(PIECES))}"
        )
    return names


@functools.cache
def switched_off() -> frozenset[str]:
    """The pieces this process runs without (read once)."""
    return parse(os.environ.get(ENV, ""))


def check() -> None:
    """UnknownPieceError now rather than at a piece's first use."""
    switched_off()


def without(name: str) -> bool:
    """Whether this process runs without the piece `name` (one of PIECES)."""
    if name not in PIECES:
        raise UnknownPieceError(f"no piece named {name!r}")
    return name in switched_off()
