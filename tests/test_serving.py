"""The kubelet's DriverHandler (dra_fake.core.serving.ClaimPreparer): every claim of a call gets
its own result, whatever happens to another, and the error says what failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from dra_fake.core.claims import ClaimError
from dra_fake.core.resourceapi import ClaimNotFound
from dra_fake.core.serving import ClaimPreparer
from dra_fake.kubelet.api import ClaimRef, PreparedDevice


class FakeResources:
    """get_claim behaviour per claim name."""

    def __init__(self, behaviour: dict[str, Any]) -> None:
        self.behaviour = behaviour

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        what = self.behaviour[name]
        if isinstance(what, BaseException):
            raise what
        return {"metadata": {"uid": f"uid-{name}"}, "status": {"allocation": {"devices": {}}}, **what}


class FakeState:
    def __init__(self, failures: dict[str, BaseException]) -> None:
        self.failures = failures

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        uid = claim["metadata"]["uid"]
        if uid in self.failures:
            raise self.failures[uid]
        return [PreparedDevice(("gpu",), "node", "gpu-0", (f"k8s.gpu.nvidia.com/claim={uid}-gpu-0",))]

    def unprepare(self, claim_uid: str) -> None:
        if claim_uid in self.failures:
            raise self.failures[claim_uid]

    def startup(self) -> object:
        return None

    def prepared_claims(self) -> dict[str, str]:
        return {}

    def prepared_device_count(self) -> int:
        return 0


def ref(name: str) -> ClaimRef:
    return ClaimRef(namespace="ns", name=name, uid=f"uid-{name}")


def test_every_claim_gets_its_own_result_whatever_fails() -> None:
    unreachable = urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused")  # type: ignore[arg-type]
    resources = FakeResources(
        {
            "ok": {},
            "gone": ClaimNotFound("ResourceClaim ns/gone not found"),
            "api-error": ApiException(status=500, reason="Internal Server Error"),
            "unreachable": unreachable,
            "bug": {},
            "refused": {},
            "recreated": {"metadata": {"uid": "another-uid"}},
        }
    )
    state = FakeState({"uid-bug": ValueError("1e5000 is not a number"), "uid-refused": ClaimError("no room")})
    results = ClaimPreparer(resources, state).prepare(  # type: ignore[arg-type]
        [ref(n) for n in ("ok", "gone", "api-error", "unreachable", "bug", "refused", "recreated")]
    )
    errors = {uid.removeprefix("uid-"): r.error for uid, r in results.items()}
    assert errors["ok"] == "" and results["uid-ok"].devices[0].device_name == "gpu-0"
    assert errors["gone"] == "ResourceClaim ns/gone not found"
    assert errors["api-error"] == "get ResourceClaim ns/api-error: 500 Internal Server Error"
    assert errors["unreachable"].startswith("get ResourceClaim ns/unreachable: MaxRetryError")
    assert errors["bug"] == "prepare ResourceClaim ns/bug: ValueError: 1e5000 is not a number"
    assert errors["refused"] == "no room"
    assert "the claim was deleted and re-created" in errors["recreated"]


def test_unprepare_isolates_claims_too() -> None:
    state = FakeState({"uid-a": OSError("disk full"), "uid-b": ClaimError("lock timeout")})
    results = ClaimPreparer(FakeResources({}), state).unprepare([ref("a"), ref("b"), ref("c")])  # type: ignore[arg-type]
    assert results == {
        "uid-a": "unprepare ResourceClaim ns/a: OSError: disk full",
        "uid-b": "lock timeout",
        "uid-c": "",
    }
