"""Which release runs which e2e tests: e2e/conftest.py's Environment.missing deselects a test whose
`needs` marker the server or test bed cannot meet, with the reason it prints."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import Environment
from e2e.harnessbed import HarnessBed
from e2e.kindbed import KindBed


class Item:
    """What Environment.missing reads of a collected test: its `needs` markers."""

    def __init__(self, *needs: str, **kwargs: str) -> None:
        self.mark = pytest.mark.needs(*needs, **kwargs).mark

    def iter_markers(self, name: str) -> Iterator[Any]:
        return iter([self.mark] if name == "needs" else [])


def kind(minor: int) -> Environment:
    return Environment("kind", KindBed.capabilities, ("v1",), True, minor, True)


@pytest.mark.parametrize(
    ("need", "reason"),
    [("consumable-shares", "DRAConsumableCapacity"), ("gpu-lending", "DRADeviceTaints")],
)
def test_shared_gpus_and_lending_run_from_1_36_and_on_kinds_1_35(need: str, reason: str) -> None:
    item: Any = Item("node", need)  # a pytest.Item as far as missing() looks
    for minor in (32, 33, 34):  # gates absent or partly alpha; 1.34's scheduler breaks shares
        missing = kind(minor).missing(item)
        assert missing and reason in missing and "1.36" in missing, missing
    assert kind(35).missing(item) is None  # our kind clusters of 1.35 switch the alpha gates on
    api_135 = Environment("api", frozenset({"node"}), ("v1",), True, 35, True)
    assert api_135.missing(item) is not None  # someone else's 1.35: the gates are probably off
    assert kind(36).missing(item) is None
    assert kind(37).missing(item) is None
    harness = Environment("harness", HarnessBed.capabilities, ("v1",), True, 37, True)
    assert harness.missing(item) is None
    api = Environment("api", frozenset(), ("v1",), True, 37, True)
    assert api.missing(item) == "needs the node test bed (this is api)"


def test_a_needs_marker_says_why_another_bed_cannot_run_it() -> None:
    item: Any = Item("harness", reason="it restarts the API server")
    assert kind(37).missing(item) == "needs the harness test bed (this is kind): it restarts the API server"
    harness = Environment("harness", HarnessBed.capabilities, ("v1",), True, 37, True)
    assert harness.missing(item) is None
