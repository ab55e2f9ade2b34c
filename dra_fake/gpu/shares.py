"""Consumable shares (NVIDIA's `ConsumableShares`): one GPU or MIG device allocated to several
claims, its memory accounted by kube-scheduler. The setting (flag, env, inventory key), its
start-up errors, and what it makes of a device in a ResourceSlice. Pure.

Facts: docs/reference/nvidia-gpu-driver.md#10-consumable-shares-main-after-v041 (NVIDIA's names,
values, texts and slice shape) and docs/reference/kubernetes-dra.md#consumable-capacity-kep-5075;
design: docs/sharing-design.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from dra_fake.core import featuregates
from dra_fake.core.slices import canonical_quantity, decimal_quantity

GATE_CONSUMABLE_SHARES = featuregates.CONSUMABLE_SHARES
FLAG = "--consumable-shares"
DISABLED, MEMORY, UNLIMITED = "disabled", "memory", "unlimited"
MIB = 1 << 20
# Go's strconv.Atoi, which NVIDIA's validation uses: an optional sign and ASCII digits, int64.
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_INT64_MAX = 2**63 - 1

# NVIDIA's texts (validateCLIFlags, main.go; prepare, device_state.go).
GATE_REQUIRED = f"{FLAG} requires feature gate {GATE_CONSUMABLE_SHARES} to be enabled"
MPS_REFUSED = "MPS sharing is not supported when consumable shares is enabled"


class SharesSettingError(ValueError):
    """A consumable-shares setting NVIDIA's plugin refuses at start-up (it exits 1)."""


_VALUES = f"(must be '{DISABLED}', '{MEMORY}', '{UNLIMITED}', or a positive integer)"


def invalid_value(raw: str, field: str | None = None) -> str:
    """NVIDIA's message for a flag value it cannot read (`raw` quoted as Go's %q quotes it); for
    an inventory key, the same facts after the field's name."""
    if field is None:
        return f"invalid value for {FLAG}: {_quoted(raw)} {_VALUES}"
    return f"{field}: invalid value {_quoted(raw)} {_VALUES}"


def _quoted(raw: str) -> str:
    return json.dumps(raw, ensure_ascii=False)  # as Go's %q: printable characters stay as they are


@dataclass(frozen=True)
class SharesMode:
    """Sharing in effect: `memory` (claims ask for memory; no amount = the whole device),
    `unlimited` (no amount = 0), or `count` N (at most N claims; memory only bookkeeping)."""

    kind: Literal["memory", "unlimited", "count"]
    count: int = 0

    def __str__(self) -> str:
        return str(self.count) if self.kind == "count" else self.kind


def parse_mode(raw: str | int, field: str | None = None) -> SharesMode | None:
    """A setting's value (whitespace trimmed, as NVIDIA); None: sharing off (`disabled` or empty).
    SharesSettingError with NVIDIA's text otherwise (naming `field`, an inventory key, if given)."""
    text = str(raw)
    value = text.strip()
    if value in ("", DISABLED):
        return None
    if value == MEMORY:
        return SharesMode("memory")
    if value == UNLIMITED:
        return SharesMode("unlimited")
    if _INTEGER.match(value) and len(value) <= 20 and 0 < int(value) <= _INT64_MAX:  # int() caps digits
        return SharesMode("count", int(value))
    raise SharesSettingError(invalid_value(text, field))


def node_mode(raw: str, gate_enabled: bool) -> SharesMode | None:
    """The flag as NVIDIA's start-up checks it: any value but `disabled` needs the gate."""
    if raw.strip() not in ("", DISABLED) and not gate_enabled:
        raise SharesSettingError(GATE_REQUIRED)
    return parse_mode(raw)


# ---- the slice -------------------------------------------------------------------------------


def _range_policy(default: str, minimum: str, maximum: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


def shared_capacities(capacity: dict[str, int], mode: SharesMode) -> dict[str, dict[str, Any]]:
    """A shared device's capacities as NVIDIA publishes them (`applyConsumableShares`): `memory`
    rounded down to whole MiB with the mode's request policy; with N, a `shares` capacity of N.
    A device without `memory` keeps its capacities as they are and gets no `shares`.
    Quantities as the API server stores them (`81559Mi`, `1Mi`, `0`, `4`)."""
    out: dict[str, dict[str, Any]] = {n: {"value": canonical_quantity(v)} for n, v in capacity.items()}
    memory = capacity.get("memory")
    if memory is None:
        return dict(sorted(out.items()))
    total = canonical_quantity(memory // MIB * MIB)
    one_mib = canonical_quantity(MIB)
    default, minimum = (total, one_mib) if mode.kind == "memory" else ("0", "0")
    out["memory"] = {"value": total, "requestPolicy": _range_policy(default, minimum, total, one_mib)}
    if mode.kind == "count":
        n = decimal_quantity(mode.count)
        out["shares"] = {"value": n, "requestPolicy": _range_policy("1", "1", n, "1")}
    return dict(sorted(out.items()))
