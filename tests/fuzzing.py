"""What the fuzz targets (tests/test_fuzz*.py) share: hypothesis's profiles (FUZZ: bounded in `make
test`, full in `make fuzz`), strategies of hostile JSON values, and the property every target
holds: accepted, or rejected with the target's own error type and a one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FULL_RUN = os.environ.get("FUZZ_PROFILE") == "full"
settings.register_profile(
    "bounded",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")),
    deadline=None,  # timing goals live in make fuzz, not in make test
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "full",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100000")),
    # FUZZ_DEADLINE_MS=0: no deadline (a run beside other work, where timing means nothing)
    deadline=timedelta(milliseconds=int(os.environ.get("FUZZ_DEADLINE_MS", "100"))) or None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FUZZ = settings.get_profile("full" if FULL_RUN else "bounded")

# --- strategies ------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=16,
)
quantities = st.one_of(
    st.from_regex(
        r"[+-]?[0-9]{1,40}(\.[0-9]{0,12})?([eE][+-]?[0-9]{1,12}|[KMGTPE]i|[kMGTPEmnu])?", fullmatch=True
    ),
    st.text(max_size=30),
    st.integers(),
    st.floats(allow_nan=False),
    json_values,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that may be absent (None drops it), hold the strategy's value, or any JSON value."""
    return st.one_of(st.none(), strategy, json_values)


def objects(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with some of `fields` (hostile values) and sometimes a stray field."""
    known = st.fixed_dictionaries({k: maybe(v) for k, v in fields.items()})
    stray = st.dictionaries(st.text(max_size=8), json_values, max_size=1)
    return st.builds(lambda k, s: {**s, **{a: b for a, b in k.items() if b is not None}}, known, stray)


# --- the property ----------------------------------------------------------------------------


def accepted_or_one_line_error(
    fn: Callable[[], object], errors: tuple[type[Exception], ...], line_prefix: str | None = None
) -> None:
    """`line_prefix`: a file's validation may list several problems, one line each, each
    starting with the file's name."""
    try:
        fn()
    except errors as err:
        message = str(err)
        assert message.strip(), f"{type(err).__name__} without a message"
        if line_prefix is None:
            assert "\n" not in message, f"multi-line error: {message!r}"
        else:
            assert all(line.startswith(line_prefix) for line in message.split("\n")), message
