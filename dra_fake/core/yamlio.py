"""YAML through libyaml when PyYAML has it (its wheels do): the same documents and errors
(yaml.YAMLError), parsed and emitted ~10x faster than by the pure-Python loader and dumper.
Parsing the GPU profiles in pure Python was 0.12 s of a plugin's start-up.

Emitting is still PyYAML's representer (Python) even with libyaml's emitter: a fifth of an
8-device prepare went into turning a CDI spec into YAML. `dump_block` writes the common case (nested
mappings and lists of plain words, numbers and booleans) directly, byte for byte as PyYAML would
(tests/test_yamlio.py compares them over generated documents), and declines anything else.
It keeps its place: in the machinery trials of `make bench` (with and without it, one after the
other, three repetitions of four cases) the prepare median was better with it in 10, 11, 11 and 12
of 12 pairs in four runs (56f6e0b, 6a7d5d4, ee22336, 7c5f52a); at 56f6e0b 0.83x, 0.95x, 0.87x and
0.71x (1x1, 1x16, 8x1, 8x16 devices x callers) and the CPU per claim 0.73-0.88x of PyYAML's
(docs/benchmarks/history.md#machinery-on-trial)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import yaml

from dra_fake.core import trials

LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
M = TypeVar("M", bound=Mapping[str, Any])


def safe_load(text: str | bytes) -> Any:
    """yaml.safe_load, through libyaml when available."""
    return yaml.load(text, Loader=LOADER)


def dump(doc: Mapping[str, Any]) -> str:
    """`doc` in block style, keys in their order, with a `---` start: `dump_block` when it can,
    else PyYAML (the same bytes either way)."""
    text = None if trials.without("yamlwriter") else dump_block(doc)
    return dump_pyyaml(doc) if text is None else text


def dump_pyyaml(doc: Mapping[str, Any]) -> str:
    return str(yaml.dump(doc, Dumper=DUMPER, sort_keys=False, default_flow_style=False, explicit_start=True))


class _Declined(Exception):
    """Something PyYAML might write differently from the simple rules below."""


# PyYAML writes a string unquoted when it has no indicator, no `: ` or ` #`, no leading or
# trailing space and no line break (the emitter's analyze_scalar); a subset of that, ASCII only.
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./=,+@()~-]*(?:[ :][A-Za-z0-9_./=,+@()~-]+)*")
_WIDTH = 80  # PyYAML's default width: a plain scalar with spaces may be folded past it
_RESOLVERS: dict[str | None, list[tuple[str, re.Pattern[str]]]] = DUMPER.yaml_implicit_resolvers


def dump_block(doc: Mapping[str, Any]) -> str | None:
    """What `yaml.dump(doc, sort_keys=False, default_flow_style=False, explicit_start=True)`
    writes, for mappings and lists (none empty, no list directly in a list) of plain strings (see
    `_PLAIN`; not one that would read back as another type, such as `8080` or `true`), ints and
    booleans; None for any other document."""
    out = ["---\n"]
    try:
        _mapping(doc, 0, out, inline=False)
    except _Declined:
        return None
    return "".join(out)


class Fragments:
    """The YAML of mappings registered as never changing again (by identity), per indent. A CDI
    spec repeats a device's edits claim after claim (dra_fake.gpu.edits shares them): their
    YAML was most of an 8-device spec's. At most `limit` mappings are kept (then all are let
    go: a registered mapping that is let go is rendered again, not wrongly)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # id -> (the mapping, kept alive so that its id is not reused; its YAML per indent)
        self._entries: dict[int, tuple[Mapping[str, Any], dict[int, str]]] = {}

    def register(self, mapping: M) -> M:
        if len(self._entries) >= self._limit:
            self._entries = {}
        self._entries[id(mapping)] = (mapping, {})
        return mapping

    def texts(self, mapping: Mapping[str, Any]) -> dict[int, str] | None:
        entry = self._entries.get(id(mapping))
        return entry[1] if entry is not None and entry[0] is mapping else None


FRAGMENTS = Fragments(limit=1024)


def _block(m: Mapping[str, Any], indent: int, out: list[str]) -> None:
    """A mapping under a key: from FRAGMENTS when it is registered there."""
    texts = FRAGMENTS.texts(m)
    if texts is None:
        _mapping(m, indent, out, inline=False)
        return
    text = texts.get(indent)
    if text is None:
        part: list[str] = []
        _mapping(m, indent, part, inline=False)
        text = texts[indent] = "".join(part)
    out.append(text)


def _mapping(m: Mapping[str, Any], indent: int, out: list[str], inline: bool) -> None:
    if not m:
        raise _Declined
    pad = " " * indent
    for i, (key, value) in enumerate(m.items()):
        head = ("" if inline and i == 0 else pad) + _scalar(key, indent) + ":"
        kind = type(value)
        if kind is str or kind is int or kind is bool:  # most values: no ABC isinstance check
            out.append(f"{head} {_scalar(value, indent + len(head) + 1)}\n")
        elif kind is dict or isinstance(value, Mapping):
            out.append(head + "\n")
            _block(value, indent + 2, out)
        elif isinstance(value, list):
            out.append(head + "\n")
            _sequence(value, indent, out)  # PyYAML does not indent a list under its key
        else:
            out.append(f"{head} {_scalar(value, indent + len(head) + 1)}\n")


def _sequence(items: list[Any], indent: int, out: list[str]) -> None:
    if not items:
        raise _Declined
    pad = " " * indent
    for item in items:
        kind = type(item)
        if kind is dict or (kind is not str and isinstance(item, Mapping)):
            out.append(pad + "- ")
            _mapping(item, indent + 2, out, inline=True)
        elif isinstance(item, list):
            raise _Declined
        else:
            out.append(f"{pad}- {_scalar(item, indent + 2)}\n")


def _scalar(value: Any, column: int) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is not str or not _plain(value):
        raise _Declined
    if " " in value and column + len(value) > _WIDTH:
        raise _Declined
    return value


_PLAIN_SEEN: dict[str, bool] = {}  # string -> written plain; a spec repeats most of its strings
_PLAIN_SEEN_MAX = 8192


def _plain(value: str) -> bool:
    """Whether PyYAML writes `value` unquoted at any column (the width aside): `_PLAIN`, and not
    a string that would read back as a number, a boolean, a date..."""
    plain = _PLAIN_SEEN.get(value)
    if plain is None:
        plain = _PLAIN.fullmatch(value) is not None and not any(
            regexp.match(value) for _, regexp in _RESOLVERS.get(value[0], ())
        )
        if len(_PLAIN_SEEN) >= _PLAIN_SEEN_MAX:  # claim UIDs and paths keep coming: bounded
            _PLAIN_SEEN.clear()
        _PLAIN_SEEN[value] = plain
    return plain
