"""DeviceTaintRules: an administrator's drain of devices (`dra-fake fault drain|undrain|rules`).

A DeviceTaintRule taints the devices its selector names (driver, pool, device; all ANDed) as if
their slices carried the taint: the scheduler allocates none of them to a claim that does not
tolerate it, and kube-controller-manager's device-taint-eviction-controller deletes the pods
using them when the effect is NoExecute (docs/faults.md#draining-devices; facts in
docs/reference/kubernetes-dra.md#devicetaintrule). Nothing here is driver-side: the rules act
through Kubernetes alone, on any driver's devices.

Served as resource.k8s.io/v1 from 1.37 (DRADeviceTaintRules, on), v1beta2 in 1.36 (gate and
runtime config), v1alpha3 in 1.33-1.35.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes import client

GROUP = "resource.k8s.io"
PLURAL = "devicetaintrules"
VERSIONS = ("v1", "v1beta2", "v1alpha3")  # preferred first
DRAIN_LABEL = "dra-fake.dev/drain"  # on every rule `drain` made: the drain's name
DEFAULT_KEY = "dra-fake.dev/drain"
EFFECTS = ("NoExecute", "NoSchedule", "None")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class RuleInputError(ValueError):
    """A drain the API would refuse; the message names the flag."""


@dataclass(frozen=True)
class Drain:
    """What to drain and how (the flags of `dra-fake fault drain`)."""

    driver: str = "gpu.nvidia.com"
    pool: str = ""  # our pools are node names
    device: str = ""
    effect: str = "NoExecute"
    key: str = DEFAULT_KEY
    value: str = ""
    name: str = ""

    def rule_name(self) -> str:
        if self.name:
            return self.name
        parts = ["drain", self.pool or "all", self.device or "all"]
        return re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())[:63].strip("-")


def manifest(drain: Drain, version: str = "v1") -> dict[str, Any]:
    """The DeviceTaintRule of a drain; bad input is refused naming the flag."""
    if drain.effect not in EFFECTS:
        raise RuleInputError(f"--effect: {drain.effect!r} is not one of {', '.join(EFFECTS)}")
    name = drain.rule_name()
    if not _NAME.match(name) or len(name) > 63:
        raise RuleInputError(f"--name: {name!r} is not a DNS label (lower-case letters, digits, '-')")
    if drain.device and not drain.pool:
        raise RuleInputError("--device needs --node: a device name is unique only within its node's pool")
    selector = {
        k: v for k, v in (("driver", drain.driver), ("pool", drain.pool), ("device", drain.device)) if v
    }
    taint = {"key": drain.key, "effect": drain.effect}
    if drain.value:
        taint["value"] = drain.value
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": {DRAIN_LABEL: name}},
        "spec": {"deviceSelector": selector, "taint": taint},
    }


def selected(rule: dict[str, Any], drain: Drain) -> bool:
    """Whether `undrain`'s flags name this rule (a rule `drain` made)."""
    if DRAIN_LABEL not in (rule["metadata"].get("labels") or {}):
        return False
    if drain.name:
        return bool(rule["metadata"]["name"] == drain.name)
    sel = rule["spec"].get("deviceSelector") or {}
    return all(not want or sel.get(k) == want for k, want in (("pool", drain.pool), ("device", drain.device)))


def table(rules: Sequence[dict[str, Any]]) -> str:
    """`dra-fake fault rules`: one line per rule, with the eviction controller's condition."""
    rows = [("NAME", "DRIVER", "POOL", "DEVICE", "TAINT", "EVICTION")]
    for rule in rules:
        sel = rule["spec"].get("deviceSelector") or {}
        taint = rule["spec"].get("taint") or {}
        conds = {c["type"]: c for c in (rule.get("status") or {}).get("conditions") or []}
        eviction = conds.get("EvictionInProgress")
        state = f"{eviction['status']}/{eviction.get('reason', '')}" if eviction else "-"
        value = f"={taint['value']}" if taint.get("value") else ""
        rows.append(
            (
                rule["metadata"]["name"],
                sel.get("driver") or "*",
                sel.get("pool") or "*",
                sel.get("device") or "*",
                f"{taint.get('key')}{value}:{taint.get('effect')}",
                state,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


class Rules:
    """DeviceTaintRule calls in the newest version the server serves (plain JSON, with timeouts)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._version: str | None = None

    @property
    def version(self) -> str:
        if self._version is None:
            from dra_fake.core.kube import get_json

            served = set()
            for version in VERSIONS:
                try:
                    found = get_json(self.api, f"/apis/{GROUP}/{version}")
                except Exception:  # the version is not served (404)
                    continue
                if any(r.get("name") == PLURAL for r in found.get("resources") or []):
                    served.add(version)
            if not served:
                raise RuleInputError(
                    "the API server serves no DeviceTaintRule: Kubernetes 1.37 serves them; 1.36 needs "
                    "the feature gate DRADeviceTaintRules and --runtime-config=resource.k8s.io/v1beta2=true"
                )
            self._version = next(v for v in VERSIONS if v in served)
        return self._version

    def path(self) -> str:
        return f"/apis/{GROUP}/{self.version}/{PLURAL}"

    def create(self, drain: Drain) -> dict[str, Any]:
        from dra_fake.core.kube import send_json

        return send_json(self.api, "POST", self.path(), manifest(drain, self.version))

    def find(self) -> list[dict[str, Any]]:
        from dra_fake.core.kube import get_json

        items = get_json(self.api, self.path()).get("items") or []
        return sorted(items, key=lambda r: r["metadata"]["name"])

    def delete(self, drain: Drain) -> list[str]:
        from kubernetes.client.exceptions import ApiException

        from dra_fake.core.kube import send_json

        names = [r["metadata"]["name"] for r in self.find() if selected(r, drain)]
        for name in names:
            try:
                send_json(self.api, "DELETE", self.path() + "/{name}", None, name=name)
            except ApiException as err:
                if err.status != 404:
                    raise
        return names
