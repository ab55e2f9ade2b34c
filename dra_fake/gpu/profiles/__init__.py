"""GPU profiles as data: built-in YAML files, user directories and single-field overrides.

Loading order: the built-in files (`dra_fake/gpu/profiles/data/*.yaml`), then every `*.yaml` of each
extra directory, in name order. A file whose `id` is already loaded is merged into that profile
field by field (maps merged recursively, `migProfiles` merged by `name`, other lists replaced); a
file with a new `id` is a complete profile, or names a base with `extends: <id>` and is merged onto it.
Every result is validated; errors name the file and the field, e.g.
`/etc/dra-fake/profiles/h100.yaml: migProfiles.0.memoryMiB: Input should be a valid integer`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dra_fake.core import yamlio
from dra_fake.gpu.profiles.models import GpuProfile, MigProfile, PcieLink, PciSlot, Placement

__all__ = [
    "BUILTIN_DIR",
    "BUILTIN_PROFILE_IDS",
    "GpuProfile",
    "MigProfile",
    "PciSlot",
    "PcieLink",
    "Placement",
    "ProfileError",
    "apply_overrides",
    "deep_merge",
    "format_validation_error",
    "load_profiles",
]

BUILTIN_DIR = Path(__file__).parent / "data"
BUILTIN_PROFILE_IDS = (
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "b200",
    "gb200",
    "h100-sxm5-80gb",
    "h200-sxm-141gb",
    "l40s",
    "t4",
)


_FIELD_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z0-9]+)*$")


class ProfileError(ValueError):
    """A profile file is unreadable or invalid; the message names the file and the field."""


def format_validation_error(source: str, error: ValidationError, prefix: str = "") -> str:
    """One line per pydantic error: `<source>: <prefix><field path>: <message>`."""
    lines = []
    for item in error.errors():
        # A key with a newline or control character must not break the one-line-per-error form.
        path = ".".join(str(part) if str(part).isprintable() else repr(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        # Model-level validators put the field path (below their model's) at the start of the message.
        field, sep, rest = message.partition(": ")
        if sep and _FIELD_PATH.match(field):
            path, message = (f"{path}.{field}" if path else field), rest
        location = prefix + path if path else prefix.rstrip(".") or "<root>"
        lines.append(f"{source}: {location}: {message}")
    return "\n".join(lines)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` on top of `base`, without modifying either.

    Maps merge recursively. Lists whose items are all maps with a `name` (MIG profiles) merge
    item by item on `name`, new names appended; any other list is replaced.
    """
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        elif isinstance(current, list) and _named_items(current) and _named_items(value):
            merged[key] = _merge_by_name(current, value)
        else:
            merged[key] = value
    return merged


def _named_items(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, Mapping) and "name" in v for v in value)


def _merge_by_name(base: list[Mapping[str, Any]], override: list[Mapping[str, Any]]) -> list[Any]:
    result: list[Any] = [dict(item) for item in base]
    index = {item["name"]: i for i, item in enumerate(result)}
    for item in override:
        if item["name"] in index:
            result[index[item["name"]]] = deep_merge(result[index[item["name"]]], item)
        else:
            result.append(dict(item))
    return result


def validate_profile(data: Mapping[str, Any], source: str, prefix: str = "") -> GpuProfile:
    try:
        return GpuProfile.model_validate(data)
    except ValidationError as error:
        raise ProfileError(format_validation_error(source, error, prefix)) from None


def apply_overrides(
    profile: GpuProfile, overrides: Mapping[str, Any], source: str, prefix: str = ""
) -> GpuProfile:
    """`profile` with `overrides` (camelCase profile fields) merged in, validated again."""
    if not overrides:
        return profile
    merged = deep_merge(profile.model_dump(by_alias=True), overrides)
    return validate_profile(merged, source, prefix)


def load_profiles(extra_dirs: Sequence[Path] = ()) -> dict[str, GpuProfile]:
    """Built-in profiles, then the files of `extra_dirs` applied in order (see module doc)."""
    raw: dict[str, dict[str, Any]] = {}
    profiles: dict[str, GpuProfile] = {}
    files = _yaml_files(BUILTIN_DIR)
    for directory in extra_dirs:
        if not directory.is_dir():
            raise ProfileError(f"{directory}: profile directory not found")
        files += _yaml_files(directory)
    for path in files:
        data = _read_mapping(path)
        profile_id = data.get("id")
        if not isinstance(profile_id, str):
            raise ProfileError(f"{path}: id: required, a string naming the profile")
        extends = data.pop("extends", None)
        if profile_id in raw:
            if extends is not None:
                raise ProfileError(
                    f"{path}: extends: profile {profile_id!r} exists; this file is merged into it"
                )
            data = deep_merge(raw[profile_id], data)
        elif extends is not None:
            if extends not in raw:
                raise ProfileError(f"{path}: extends: unknown profile {extends!r}; known: {sorted(raw)}")
            data = deep_merge(raw[extends], data)
        profiles[profile_id] = validate_profile(data, str(path))
        raw[profile_id] = data
    return profiles


def _yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yamlio.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ProfileError(f"{path}: {error}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of profile fields")
    return data
