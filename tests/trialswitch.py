"""The `without` fixture: DRA_FAKE_WITHOUT (dra_fake.core.trials) set for one test. Each piece's
trial test lives beside the piece's own tests, and goes with the piece."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from dra_fake.core import trials

Without = Callable[[str], None]


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Iterator[Without]:
    """Set DRA_FAKE_WITHOUT for this test (the value is read once per process: forgotten)."""

    def switch(value: str) -> None:
        monkeypatch.setenv(trials.ENV, value)
        trials.switched_off.cache_clear()

    yield switch
    trials.switched_off.cache_clear()
