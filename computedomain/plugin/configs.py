"""Opaque configs of `compute-domain.nvidia.com` claims, decoded strictly
(docs/reference/nvidia-compute-domains.md#71-opaque-configs).

`ComputeDomainChannelConfig{apiVersion, kind, domainID, allocationMode}` and
`ComputeDomainDaemonConfig{apiVersion, kind, domainID}`. An unknown field is a permanent error
naming it (`strict decoding error: unknown field "…"`), as NVIDIA's StrictDecoder reports it.
Precedence: dra_fake.core.opaque (as for GPU configs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from computedomain.api import (
    ALLOCATION_ALL,
    ALLOCATION_SINGLE,
    API_VERSION,
    CHANNEL_KIND,
    DAEMON_KIND,
)
from dra_fake.core import opaque
from dra_fake.core.opaque import ClaimConfig

_FIELDS = {
    CHANNEL_KIND: ("apiVersion", "kind", "domainID", "allocationMode"),
    DAEMON_KIND: ("apiVersion", "kind", "domainID"),
}


class CdConfigError(opaque.OpaqueConfigError):
    """A bad opaque config: permanent (retrying the same claim cannot succeed)."""


@dataclass(frozen=True)
class ChannelConfig:
    domain_id: str
    allocation_mode: str = ALLOCATION_SINGLE


@dataclass(frozen=True)
class DaemonConfig:
    domain_id: str


CdConfig = ChannelConfig | DaemonConfig


def decode(parameters: object) -> CdConfig:
    """One `opaque.parameters` object -> a validated config."""
    if not isinstance(parameters, dict):
        raise CdConfigError("error decoding config parameters: expected a JSON object")
    kind = parameters.get("kind")
    if parameters.get("apiVersion") != API_VERSION or not isinstance(kind, str) or kind not in _FIELDS:
        raise CdConfigError(
            f"error decoding config parameters: unknown config {parameters.get('apiVersion')}/{kind} "
            f"(expected {API_VERSION} {CHANNEL_KIND} or {DAEMON_KIND})"
        )
    unknown = [k for k in parameters if k not in _FIELDS[kind]]
    if unknown:
        fields = ", ".join(f'unknown field "{k}"' for k in unknown)
        raise CdConfigError(f"error decoding config parameters: strict decoding error: {fields}")
    for key, value in parameters.items():
        if key != "kind" and not isinstance(value, str):
            raise CdConfigError(f'error decoding config parameters: field "{key}" must be a string')
    domain_id = str(parameters.get("domainID") or "")
    if not domain_id:
        raise CdConfigError("error validating config: domainID cannot be empty")
    if kind == DAEMON_KIND:
        return DaemonConfig(domain_id)
    mode = str(parameters.get("allocationMode") or ALLOCATION_SINGLE)
    if mode not in (ALLOCATION_SINGLE, ALLOCATION_ALL):
        raise CdConfigError(
            f"error validating config: unknown allocationMode {mode!r} "
            f"(supported: {ALLOCATION_SINGLE}, {ALLOCATION_ALL})"
        )
    return ChannelConfig(domain_id, mode)


def decode_claim_configs(driver: str, entries: Sequence[Mapping[str, object]]) -> list[ClaimConfig[CdConfig]]:
    """This driver's configs of `status.allocation.devices.config[]`, in precedence order."""
    return opaque.decode_claim_configs(driver, entries, decode, CdConfigError)


def config_for(configs: Sequence[ClaimConfig[CdConfig]], request: str, device_type: str) -> CdConfig:
    """The config that applies to one allocation result: the last matching one; it must fit the
    device type (`channel` <- ComputeDomainChannelConfig, `daemon` <- ComputeDomainDaemonConfig)."""
    selected = opaque.select_config(configs, request)
    if selected is None:
        raise CdConfigError(f"no ComputeDomain config for request {request}: a domainID is required")
    chosen = selected.config
    if device_type == "channel" and not isinstance(chosen, ChannelConfig):
        raise CdConfigError(f"cannot apply {DAEMON_KIND} to request: {request}")
    if device_type == "daemon" and not isinstance(chosen, DaemonConfig):
        raise CdConfigError(f"cannot apply {CHANNEL_KIND} to request: {request}")
    return chosen
