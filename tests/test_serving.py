"""The kubelet's DriverHandler (dra_fake.core.serving.ClaimPreparer): every claim of a call gets
its own result, whatever happens to another, and the error says what failed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import urllib3

from dra_fake.core import metrics
from dra_fake.core.claims import ClaimError, ClaimNotFound, ClaimUnreadable, PermanentClaimError
from dra_fake.core.serving import ANSWER_MARGIN, ClaimPreparer
from dra_fake.kubelet.api import CallLimits, ClaimRef, PreparedDevice


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
            "api-error": ClaimUnreadable("get ResourceClaim ns/api-error: 500 Internal Server Error"),
            "unreachable": unreachable,
            "bug": {},
            "refused": {},
            "recreated": {"metadata": {"uid": "another-uid"}},
        }
    )
    state = FakeState({"uid-bug": ValueError("1e5000 is not a number"), "uid-refused": ClaimError("no room")})
    results = ClaimPreparer(lambda: resources, state).prepare(  # type: ignore[arg-type]
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
    results = ClaimPreparer(lambda: FakeResources({}), state).unprepare([ref("a"), ref("b"), ref("c")])  # type: ignore[arg-type]
    assert results == {
        "uid-a": "unprepare ResourceClaim ns/a: OSError: disk full",
        "uid-b": "lock timeout",
        "uid-c": "",
    }


class Clock:
    """time.monotonic and time.sleep for a retry window, without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


class FlakyState(FakeState):
    """Fails each claim with its error for its first `times` tries (None: always), then prepares."""

    def __init__(self, failures: dict[str, BaseException], times: int | None = None) -> None:
        super().__init__(failures)
        self.times = times
        self.tries: dict[str, int] = {}

    def prepare(self, claim: Mapping[str, Any]) -> list[PreparedDevice]:
        uid = claim["metadata"]["uid"]
        self.tries[uid] = self.tries.get(uid, 0) + 1
        if self.times is not None and self.tries[uid] > self.times:
            return [
                PreparedDevice(
                    ("channel",), "node", "channel-0", (f"k8s.compute-domain.nvidia.com/claim={uid}",)
                )
            ]
        return super().prepare(claim)


def retrying(state: FakeState, clock: Clock, resources: FakeResources | None = None) -> ClaimPreparer:
    return ClaimPreparer(
        lambda: resources or FakeResources({"a": {}, "b": {}}),  # type: ignore[arg-type,return-value]
        state,  # type: ignore[arg-type]
        retry_window=45.0,
        clock=clock.monotonic,
        sleep=clock.sleep,
    )


def test_a_retry_window_prepares_a_claim_in_the_same_call_once_it_can() -> None:
    """The compute-domain plugin's channel waits for its IMEX daemon: NVIDIA's plugin retries within
    the kubelet's call (5 ms, doubling), so the pod starts once the daemon is Ready, not at the
    kubelet's next try."""
    clock = Clock()
    state = FlakyState({"uid-a": ClaimError("current node not ready in ComputeDomain")}, times=4)
    results = retrying(state, clock).prepare([ref("a"), ref("b")])
    assert results["uid-a"].error == "" and results["uid-a"].devices[0].device_name == "channel-0"
    assert state.tries == {"uid-a": 5, "uid-b": 1}
    assert clock.sleeps == [0.005, 0.01, 0.02, 0.04]


def test_permanent_errors_and_unread_claims_are_not_retried() -> None:
    clock = Clock()
    resources = FakeResources({"a": {}, "gone": ClaimNotFound("ResourceClaim ns/gone not found")})
    state = FlakyState({"uid-a": PermanentClaimError("the ResourceClaim's namespace is different")})
    results = retrying(state, clock, resources).prepare([ref("a"), ref("gone")])
    assert results["uid-a"].error == "the ResourceClaim's namespace is different"
    assert results["uid-gone"].error == "ResourceClaim ns/gone not found"
    assert state.tries == {"uid-a": 1} and clock.sleeps == []


def test_retries_end_before_the_kubelets_deadline_with_the_last_error() -> None:
    clock = Clock()
    state = FlakyState({"uid-a": ClaimError("label already exists for a different ComputeDomain")})
    deadline = clock.now + 45.0  # the kubelet's: it waits 45 s for a call
    results = retrying(state, clock).prepare([ref("a")], CallLimits(deadline=deadline))
    assert results["uid-a"].error == "label already exists for a different ComputeDomain"
    assert deadline - ANSWER_MARGIN - 45.0 / 2 < clock.now <= deadline - ANSWER_MARGIN
    assert state.tries["uid-a"] == 1 + len(clock.sleeps) == 14  # at once, then after 5 ms, 10 ms, ... 20.48 s


def test_retries_end_when_the_kubelet_cancels_the_call() -> None:
    clock = Clock()
    state = FlakyState({"uid-a": ClaimError("current node not ready in ComputeDomain")})
    answers = iter([True, True, False])
    results = retrying(state, clock).prepare([ref("a")], CallLimits(waiting=lambda: next(answers)))
    assert results["uid-a"].error == "current node not ready in ComputeDomain"
    assert state.tries["uid-a"] == 3


def test_without_a_retry_window_every_claim_is_tried_once() -> None:
    """The GPU plugin, as NVIDIA's: its errors go to the kubelet at once."""
    state = FlakyState({"uid-a": ClaimError("no room")}, times=1)
    results = ClaimPreparer(lambda: FakeResources({"a": {}}), state).prepare([ref("a")])  # type: ignore[arg-type]
    assert results["uid-a"].error == "no room" and state.tries == {"uid-a": 1}


def test_unprepare_retries_within_the_window_too() -> None:
    clock = Clock()

    class Busy(FakeState):
        tries = 0

        def unprepare(self, claim_uid: str) -> None:
            self.tries += 1
            if self.tries < 3:
                raise ClaimError("error acquiring prep/unprep lock")

    state = Busy({})
    assert retrying(state, clock).unprepare([ref("a")]) == {"uid-a": ""}
    assert state.tries == 3 and clock.sleeps == [0.005, 0.01]


def test_the_claim_get_names_what_the_api_server_answered(monkeypatch: Any) -> None:
    from kubernetes.client.exceptions import ApiException

    from dra_fake.core import resourceapi
    from dra_fake.core.resourceapi import ResourceApi, ServerInfo

    answers = {
        "broken": ApiException(status=500, reason="Internal Server Error"),
        "gone": ApiException(status=404, reason="Not Found"),
    }
    answers["gone"].body = '{"reason": "NotFound", "details": {"name": "gone"}}'

    def get_json(api: object, path: str, namespace: str, name: str) -> dict[str, Any]:
        raise answers[name]

    monkeypatch.setattr(resourceapi, "get_json", get_json)
    api = ResourceApi(object(), ServerInfo((1, 37), ("v1",)))  # type: ignore[arg-type]
    with pytest.raises(ClaimUnreadable, match=r"^get ResourceClaim ns/broken: 500 Internal Server Error$"):
        api.get_claim("ns", "broken")
    with pytest.raises(ClaimNotFound, match=r"^ResourceClaim ns/gone not found$"):
        api.get_claim("ns", "gone")


def test_the_kubelet_serving_path_does_not_import_the_kubernetes_client() -> None:
    """The sockets serve before the client is imported (~0.3 s of start-up): the CLI, the GPU
    plugin and the kubelet servers load without it (docs/benchmarks/history.md#start-up)."""
    code = (
        "import sys, dra_fake.cli, dra_fake.gpu.plugin, dra_fake.gpu.services, dra_fake.kubelet.server, "
        "dra_fake.kubelet.health; "
        "dra_fake.cli.build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_config_source_is_checked_before_the_sockets(tmp_path: Path) -> None:
    from dra_fake.core.kubeconfig import StartupError, check_config_source

    kubeconfig = tmp_path / "kubeconfig"
    with pytest.raises(StartupError, match=f"^kubeconfig {kubeconfig}: not a readable file$"):
        check_config_source(str(kubeconfig), environ={})
    with pytest.raises(StartupError, match=r"KUBERNETES_SERVICE_HOST is not set"):
        check_config_source("", environ={})
    kubeconfig.write_text("apiVersion: v1\n")
    check_config_source("", environ={"KUBECONFIG": str(kubeconfig)})
    check_config_source(f"{tmp_path / 'missing'}:{kubeconfig}", environ={})  # a list, as $KUBECONFIG
    check_config_source("", environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1"})


def test_fixed_credentials_skip_the_per_request_refresh_hook(tmp_path: Path) -> None:
    """The client's hook re-applies the kubeconfig before every request; it is dropped only when
    nothing can expire (an exec plugin's token can: kept)."""
    from dra_fake.core.kube import kube_configuration

    def kubeconfig(user: dict[str, Any]) -> str:
        path = tmp_path / f"kc-{len(list(tmp_path.iterdir()))}"
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
            "users": [{"name": "u", "user": user}],
        }
        path.write_text(json.dumps(doc))
        return str(path)

    fixed = kube_configuration(kubeconfig({"token": "t0k3n"}))
    assert fixed.refresh_api_key_hook is None and fixed.api_key["BearerToken"] == "Bearer t0k3n"
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    assert kube_configuration(kubeconfig({"token": "t0k3n", **plugin})).refresh_api_key_hook is not None


def test_the_prepared_gauges_are_read_from_the_state_when_scraped() -> None:
    state = FakeState({})
    held = {"uid-a": "PrepareCompleted", "uid-b": "PrepareStarted"}
    state.prepared_claims = lambda: held  # type: ignore[method-assign]
    state.prepared_device_count = lambda: 3 * len(held)  # type: ignore[method-assign]
    ClaimPreparer(lambda: FakeResources({}), state).export_gauges()  # type: ignore[arg-type]
    registry = metrics.METRICS.registry
    assert registry.get_sample_value("dra_fake_prepared_claims") == 2
    assert registry.get_sample_value("dra_fake_prepared_devices") == 6
    del held["uid-b"]  # no call in between: the next scrape sees it
    assert registry.get_sample_value("dra_fake_prepared_claims") == 1
    assert registry.get_sample_value("dra_fake_prepared_devices") == 3


def test_a_claim_get_before_discovery_waits_for_it_and_fails_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sockets serve before the API server is reached: a prepare sent right after
    registration waits for discovery instead of failing into the kubelet's retry backoff."""
    from dra_fake.core import resourceapi
    from dra_fake.core.resourceapi import ApiNotReached, ResourceApi, ServerInfo

    def get_json(api: object, path: str, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "path": path}

    monkeypatch.setattr(resourceapi, "get_json", get_json)
    api = ResourceApi(object(), discovery_wait=60)  # type: ignore[arg-type]
    threading.Timer(0.05, api.discovered, [ServerInfo((1, 37), ("v1",))]).start()
    claim = api.get_claim("ns", "early")  # returns once discovered
    assert claim["metadata"]["name"] == "early" and "/resource.k8s.io/v1/" in claim["path"]
    unreached = ResourceApi(object(), discovery_wait=0.01)  # type: ignore[arg-type]
    with pytest.raises(ApiNotReached, match="has not been reached yet"):
        unreached.get_claim("ns", "early")
