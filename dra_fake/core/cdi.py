"""CDI specs of prepared claims, for any driver: names, the minimum `cdiVersion`, strict schema
validation, byte-stable rendering, and crash-safe files in the CDI root.

One transient spec per claim, like NVIDIA's plugins: kind `k8s.<driver>/claim`, file
`<cdiRoot>/k8s.<driver>-claim_<claimUID>.yaml`, devices `<claimUID>-<deviceName>`. What goes into
the container edits is the driver's business (dra_fake.gpu.edits, computedomain.plugin.edits).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dra_fake.core import yamlio
from dra_fake.core.atomic import TEMP_SUFFIX, atomic_write, remove_durably

_log = logging.getLogger(__name__)

SPEC_FILE_MODE = 0o644
CLAIM_CLASS = "claim"
EARLIEST_VERSION = "0.3.0"
KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")

_DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class CdiSpecError(ValueError):
    """A spec that a strict CDI parser would reject."""


# --- Names -----------------------------------------------------------------------------------


def claim_vendor(driver: str) -> str:
    return f"k8s.{driver}"


def claim_kind(driver: str) -> str:
    """`k8s.gpu.nvidia.com/claim` for driver `gpu.nvidia.com`."""
    return f"{claim_vendor(driver)}/{CLAIM_CLASS}"


def spec_file_prefix(driver: str) -> str:
    return f"{claim_vendor(driver)}-{CLAIM_CLASS}_"


def spec_file_name(driver: str, claim_uid: str) -> str:
    """Transient spec name `vendor-class_<id>` (`/` in the id becomes `_`) + `.yaml`."""
    return f"{spec_file_prefix(driver)}{claim_uid.replace('/', '_')}.yaml"


def cdi_device_name(claim_uid: str, device_name: str, share_id: str | None = None) -> str:
    name = f"{claim_uid}-{device_name}"
    if share_id:
        name = f"{name}-{share_id}"
    if not _DEVICE_NAME_RE.match(name):
        raise CdiSpecError(f"invalid CDI device name {name!r}")
    return name


def cdi_device_id(driver: str, name: str) -> str:
    """The fully qualified CDI device ID handed to the kubelet: `vendor/class=name`."""
    return f"{claim_kind(driver)}={name}"


# --- Versions and validation ----------------------------------------------------------------


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.removeprefix("v").split("."))


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [e for e in edits if isinstance(e, dict)]


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest cdiVersion whose parser accepts everything the spec uses."""
    edits = _all_edits(spec)
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    kind = str(spec.get("kind", ""))
    class_part = kind.split("/", 1)[1] if "/" in kind else ""

    def any_of(key: str) -> Iterable[Mapping[str, Any]]:
        return (item for e in edits for item in e.get(key) or [] if isinstance(item, dict))

    rdts = [e["intelRdt"] for e in edits if isinstance(e.get("intelRdt"), dict)]
    if any(e.get("netDevices") for e in edits) or any(
        r.get("schemata") or r.get("enableMonitoring") for r in rdts
    ):
        return "1.1.0"
    if rdts or any(e.get("additionalGids") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in class_part:
        return "0.6.0"
    names = [str(d.get("name", "")) for d in devices]
    if any(n.get("hostPath") for n in any_of("deviceNodes")) or any(n[:1].isdigit() for n in names):
        return "0.5.0"
    if any(m.get("type") for m in any_of("mounts")):
        return "0.4.0"
    return EARLIEST_VERSION


if TYPE_CHECKING:
    import jsonschema


@cache
def _validator() -> jsonschema.Draft7Validator:
    import jsonschema  # here: a plugin does not check its specs (`checked`), and the import costs start-up

    text = resources.files("dra_fake.core").joinpath("cdi_schema/schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise CdiSpecError unless the spec is one a strict CDI parser accepts."""
    errors = sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "<root>"
        raise CdiSpecError(f"invalid CDI spec at {where}: {first.message}")
    names = [d["name"] for d in spec["devices"]]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CdiSpecError(f"invalid CDI spec: device {duplicates[0]!r} defined more than once")
    required = minimum_version(spec)
    if _version_tuple(str(spec["cdiVersion"])) < _version_tuple(required):
        raise CdiSpecError(
            f"invalid CDI spec: cdiVersion {spec['cdiVersion']} is lower than the required {required}"
        )


CHECK_ENV = "DRA_FAKE_CHECK_CDI_SPECS"


def checked(spec: Mapping[str, Any]) -> None:
    """Schema-check `spec` (validate_spec) when $DRA_FAKE_CHECK_CDI_SPECS is `1`.

    Off in the plugins: the specs are built by our code from checked inputs, and the schema
    check (pure-Python jsonschema) cost more than the rest of a prepare. The test suites turn it
    on (conftest.py, the local cluster's plugins), so every spec any test builds is checked, and
    every spec any test writes is rendered by PyYAML too and compared (render_spec)."""
    if os.environ.get(CHECK_ENV) == "1":
        validate_spec(spec)


_SPEC_KEY_ORDER = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_KEY_ORDER = ("name", "annotations", "containerEdits")


def _ordered(obj: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    keys = [k for k in order if k in obj] + sorted(k for k in obj if k not in order)
    return {k: obj[k] for k in keys}


def render_spec(spec: Mapping[str, Any]) -> bytes:
    """YAML in the field order of the CDI spec, whatever order the dict has (byte-stable), as
    PyYAML writes it (dra_fake.core.yamlio.dump: the same bytes, faster)."""
    doc = _ordered(spec, _SPEC_KEY_ORDER)
    if isinstance(doc.get("devices"), list):
        doc["devices"] = [_ordered(d, _DEVICE_KEY_ORDER) for d in doc["devices"]]
    text = yamlio.dump(doc)
    if os.environ.get(CHECK_ENV) == "1" and text != yamlio.dump_pyyaml(doc):  # the test suites
        raise CdiSpecError(f"yamlio.dump differs from PyYAML for this spec:\n{text}")
    return text.encode()


# --- Files -----------------------------------------------------------------------------------


class CdiSpecStore:
    """The claim spec files of one driver in one CDI root."""

    def __init__(self, root: Path, driver: str) -> None:
        self.root = Path(root)
        self.driver = driver

    def path(self, claim_uid: str) -> Path:
        return self.root / spec_file_name(self.driver, claim_uid)

    def write(self, claim_uid: str, spec: Mapping[str, Any], durable: bool = True) -> Path:
        """Atomically replace the claim's spec file (mode 0644): a reader sees the old file or the
        new one. `durable`: fsync the file and the directory. A prepare writes without (the
        checkpoint, fsynced after, holds the spec, and startup rewrites a file a power cut lost or
        emptied: `holds`). The spec is schema-checked when $DRA_FAKE_CHECK_CDI_SPECS is set
        (see `checked`)."""
        checked(spec)
        path, text = self.path(claim_uid), render_spec(spec)
        try:
            atomic_write(path, text, SPEC_FILE_MODE, durable=durable)
        except FileNotFoundError:  # no CDI root yet (made here, not checked at every write)
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text, SPEC_FILE_MODE, durable=durable)
        _log.debug("CDI spec written claim=%s path=%s devices=%d", claim_uid, path, len(spec["devices"]))
        return path

    def remove(self, claim_uid: str, sync_dir: bool = True) -> bool:
        """Delete the claim's spec; a missing file is fine. Returns whether a file was removed.
        With `sync_dir=False` the removal is not made durable (the caller's checkpoint write is)."""
        path = self.path(claim_uid)
        removed = remove_durably(path, sync_dir=sync_dir)
        _log.debug("CDI spec removed claim=%s path=%s existed=%s", claim_uid, path, removed)
        return removed

    def exists(self, claim_uid: str) -> bool:
        return self.path(claim_uid).is_file()

    def holds(self, claim_uid: str, spec: Mapping[str, Any]) -> bool:
        """Whether the claim's spec file holds `spec` (a file a power cut emptied or cut short, or
        lost, does not): the bytes `write` renders, or the same document in another key order (a
        spec read back from the checkpoint has its keys sorted; the file has them as prepare
        built them)."""
        try:
            text = self.path(claim_uid).read_bytes()
        except OSError:
            return False
        if text == render_spec(spec):
            return True
        try:
            return bool(yamlio.safe_load(text) == spec)
        except yaml.YAMLError:
            return False

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        """The parsed spec, or None if missing or unreadable."""
        try:
            loaded = yamlio.safe_load(self.path(claim_uid).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            _log.warning("CDI spec unreadable claim=%s error=%s", claim_uid, exc)
            return None
        return loaded if isinstance(loaded, dict) else None

    def claim_uids(self) -> list[str]:
        """UIDs of the claims that have a spec file of this driver in the root."""
        prefix = spec_file_prefix(self.driver)
        if not self.root.is_dir():
            return []
        return sorted(
            p.name[len(prefix) : -len(".yaml")]
            for p in self.root.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".yaml") and p.is_file()
        )

    def remove_temp_files(self) -> list[Path]:
        """Delete temp files an interrupted write left behind (CDI loaders ignore them anyway)."""
        if not self.root.is_dir():
            return []
        prefix = f".{spec_file_prefix(self.driver)}"
        leftovers = sorted(p for p in self.root.glob(f"{prefix}*{TEMP_SUFFIX}") if p.is_file())
        for p in leftovers:
            p.unlink(missing_ok=True)
            _log.info("stale CDI temp file removed path=%s", p)
        return leftovers
