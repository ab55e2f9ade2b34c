"""The one start-up probe of the ResourceSlice fields a feature needs (dra_fake.core.fieldgate),
with each feature's data (dra_fake.gpu.sharesgate, attachgate, lendinggate): refused by version,
by a 4xx answer to the dry run, or because the dry run dropped the fields; the texts are pinned."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dra_fake.core import fieldgate
from dra_fake.core.fieldgate import FieldGate
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.gpu import attachgate, lendinggate, sharesgate

DRIVER = "gpu.nvidia.com"
NEW = ServerInfo((1, 36), ("v1",))
GATES = {
    "shares": (sharesgate.GATE, "--consumable-shares=memory"),
    "attach": (attachgate.GATE, attachgate.SETTING),
    "lending": (lendinggate.GATE, lendinggate.SETTING),
}
DROPPED = {
    "shares": "--consumable-shares=memory: the API server dropped allowMultipleAllocations from a "
    "ResourceSlice: turn on the feature gate DRAConsumableCapacity on kube-apiserver and kube-scheduler "
    "(alpha and off in Kubernetes 1.34 and 1.35, on by default from 1.36)",
    "attach": "the inventory's attach (fabric-attached GPUs): the API server dropped bindingConditions from "
    "a ResourceSlice: turn on the feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus "
    "on kube-apiserver and kube-scheduler (alpha and off in Kubernetes 1.34 and 1.35, beta and on from 1.36)",
    "lending": "--gpu-lending: the API server dropped the taints of a ResourceSlice device: turn on the "
    "feature gate DRADeviceTaints on kube-apiserver, kube-scheduler and kube-controller-manager (alpha and "
    "off before 1.36)",
}
REFUSED = {
    "shares": "--consumable-shares=memory: the API server refused a dry-run ResourceSlice with a shared "
    "device: 422 Unprocessable Entity",
    "attach": "the inventory's attach (fabric-attached GPUs): the API server refused a dry-run ResourceSlice "
    "with binding conditions: 422 Unprocessable Entity",
    "lending": "--gpu-lending: the API server refused a dry-run ResourceSlice with a tainted device: "
    "422 Unprocessable Entity",
}
TOO_OLD = {
    "shares": (
        (1, 33),
        "--consumable-shares=memory needs consumable capacity (resource.k8s.io fields added in "
        "Kubernetes 1.34, feature gate DRAConsumableCapacity); the API server is v1.33.4",
    ),
    "attach": (
        (1, 33),
        "the inventory's attach (fabric-attached GPUs) needs binding conditions (resource.k8s.io fields "
        "added in Kubernetes 1.34, feature gates DRADeviceBindingConditions and "
        "DRAResourceClaimDeviceStatus); the API server is v1.33.4",
    ),
    "lending": (
        (1, 32),
        "--gpu-lending needs device taints (feature gate DRADeviceTaints, Kubernetes 1.33+); the API "
        "server is v1.33.4",
    ),
}


def refusal(gate: FieldGate, setting: str, server: ServerInfo = NEW) -> str | None:
    api: Any = None  # every call is replaced
    return gate.server_refusal(setting, api, server, DRIVER, "node-a", threading.Event())


def stripped(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a server with the feature gate off stores: the device without the probe's fields."""
    stored: dict[str, Any] = yaml.safe_load(yaml.safe_dump(manifest))
    stored["spec"]["devices"] = [{"name": stored["spec"]["devices"][0]["name"]}]
    return stored


# What the server does with the probe: each answer has its refusal (DROPPED, REFUSED, TOO_OLD) or none.
ANSWERS = ("keeps the fields", "drops the fields", "refuses the dry run", "is too old")


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("feature", sorted(GATES))
def test_the_probe_refuses_naming_the_gate_by_what_the_server_does(
    feature: str, answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept fields pass; dropped fields, a 4xx answer to the dry run and a server too old for the
    fields are refused with their text, the last by its version without a dry run."""
    gate, setting = GATES[feature]
    sent: list[dict[str, Any]] = []

    def dry_run(api: Any, manifest: dict[str, Any]) -> dict[str, Any]:
        sent.append(manifest)
        if answer == "refuses the dry run":
            raise ApiException(status=422, reason="Unprocessable Entity")
        return stripped(manifest) if answer == "drops the fields" else manifest

    monkeypatch.setattr(fieldgate, "dry_run_create", dry_run)
    if answer == "is too old":
        version, expected = TOO_OLD[feature]
        monkeypatch.setattr(fieldgate, "git_version", lambda api: "v1.33.4")
        assert refusal(gate, setting, ServerInfo(version, ("v1beta1",))) == expected
        assert sent == [], "a server refused by its version gets no dry run"
        return
    refusals = {
        "keeps the fields": None,
        "drops the fields": DROPPED[feature],
        "refuses the dry run": REFUSED[feature],
    }
    assert refusal(gate, setting) == refusals[answer]
    assert [m["spec"]["devices"][0]["name"] for m in sent] == [gate.probe_device["name"]]
    assert sent[0]["spec"]["nodeName"] == "node-a" and sent[0]["spec"]["driver"] == DRIVER


def test_a_busy_server_is_asked_again() -> None:
    """429 and 5xx are retried (with_backoff), not taken as the answer."""
    answers: list[Exception | None] = [ApiException(status=429), ApiException(status=503), None]

    def dry_run(api: Any, manifest: dict[str, Any]) -> dict[str, Any]:
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return manifest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fieldgate, "dry_run_create", dry_run)
        assert refusal(lendinggate.GATE, lendinggate.SETTING) is None  # after 0.5 s and 1 s of backoff
    assert answers == []
