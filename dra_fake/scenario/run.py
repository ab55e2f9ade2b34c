"""Replaying a scenario against a cluster: its own namespace, each step at its time, a watch of the
namespace's pods recording what happened when, then the events, the report and the clean-up (the
namespace, and the GpuFaults and DeviceTaintRules the scenario made)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dra_fake.gpu.api import (
    ANNOTATION_UTILIZATION,
    ATTACH_OUTCOME_ANNOTATION,
    FAULT_GROUP,
    FAULT_KIND,
    FAULT_PLURAL,
    FAULT_VERSION,
    Drain,
    Rules,
)
from dra_fake.scenario import report
from dra_fake.scenario.model import FaultStep, PodSpec, Scenario, Step

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger(__name__)

SCENARIO_LABEL = "dra-fake.dev/scenario"  # on every object a scenario creates: its namespace's name
SA_WAIT_SECONDS = 60.0
# What the pods run where containers run (kind): a shell that stays up and ends on SIGTERM; the
# image of the e2e suite by default (docs/kind.md), any image with `sh` through --image.
DEFAULT_IMAGE = "dra-fake-shell:e2e"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]


def claim_template(spec: PodSpec, scenario_ns: str) -> dict[str, Any]:
    """The pod's own ResourceClaimTemplate (pure)."""
    exactly: dict[str, Any] = {
        "deviceClassName": spec.device_class,
        "allocationMode": "ExactCount",
        "count": spec.count,
    }
    if spec.selector:
        exactly["selectors"] = [{"cel": {"expression": spec.selector}}]
    if spec.tolerations:
        exactly["tolerations"] = list(spec.tolerations)
    claim_meta: dict[str, Any] = {"labels": {SCENARIO_LABEL: scenario_ns}}
    if spec.attach is not None:
        claim_meta["annotations"] = {ATTACH_OUTCOME_ANNOTATION: spec.attach}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": spec.name, "labels": {SCENARIO_LABEL: scenario_ns}},
        "spec": {
            "metadata": claim_meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
    }


def pod_manifest(spec: PodSpec, scenario_ns: str, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """A pod holding the claim of its template (pure); the container asks for nothing else."""
    meta: dict[str, Any] = {"name": spec.name, "labels": {SCENARIO_LABEL: scenario_ns}}
    if spec.utilization is not None:
        meta["annotations"] = {ANNOTATION_UTILIZATION: str(spec.utilization)}
    pod_spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": spec.name}],
        "containers": [
            {
                "name": "work",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": COMMAND,
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if spec.node:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": spec.node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def fault_manifest(fault: FaultStep, scenario_ns: str, index: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": fault.node,
        "device": fault.device,
        "kind": fault.kind,
        "recovery": "clear",
    }
    if fault.xid is not None:
        spec["xid"] = fault.xid
    if fault.effect is not None:
        spec["effect"] = fault.effect
    if fault.duration is not None:
        spec["durationSeconds"] = fault.duration
    return {
        "apiVersion": f"{FAULT_GROUP}/{FAULT_VERSION}",
        "kind": FAULT_KIND,
        "metadata": {"name": f"{scenario_ns}-{index}", "labels": {SCENARIO_LABEL: scenario_ns}},
        "spec": spec,
    }


class Runner:
    """One replay of a scenario."""

    def __init__(
        self, api: client.ApiClient, scenario: Scenario, keep: bool = False, image: str = DEFAULT_IMAGE
    ) -> None:
        self.api, self.scenario, self.keep, self.image = api, scenario, keep, image
        self.stop = threading.Event()
        self.start = 0.0
        self.ns = ""
        self.pods: dict[str, report.PodRecord] = {}
        self.actions: list[dict[str, Any]] = []
        self.drains: list[Drain] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def run(self) -> dict[str, Any]:
        from dra_fake.core.kube import send_json

        self.start = time.monotonic()
        ns = send_json(
            self.api,
            "POST",
            "/api/v1/namespaces",
            {"metadata": {"generateName": f"{self.scenario.name}-", "labels": {SCENARIO_LABEL: "true"}}},
        )
        self.ns = ns["metadata"]["name"]
        for step in self.scenario.ordered():
            for spec in step.pods or []:
                self.pods[spec.name] = report.PodRecord(spec.name)
        try:
            self._wait_for_service_account()
            threading.Thread(target=self._watch, name="scenario-pods", daemon=True).start()
            for index, step in enumerate(self.scenario.ordered()):
                self.stop.wait(max(0.0, step.at - (time.monotonic() - self.start)))
                self._do(index, step)
            self._settle()
            self._events()
            return report.build(self.scenario.name, self.pods, self.actions, self.scenario.expect, self.now())
        finally:
            self.stop.set()
            if not self.keep:
                self._clean_up()

    # ---- steps ---------------------------------------------------------------------------------

    def _do(self, index: int, step: Step) -> None:
        from kubernetes.client.exceptions import ApiException

        what, result = "", "ok"
        try:
            what = self._act(index, step)
        except (ApiException, ValueError) as err:
            result = f"error: {str(err).splitlines()[0][:200]}"
            log.warning("scenario step failed", extra={"step": index, "action": step.action, "error": result})
        self.actions.append(
            {"at": self.now(), "planned": step.at, "action": step.action, "what": what, "result": result}
        )

    def _act(self, index: int, step: Step) -> str:
        from dra_fake.core.kube import merge_patch, send_json

        ns = self.ns
        if step.pods is not None:
            for spec in step.pods:
                with self._lock:
                    self.pods[spec.name].created = self.now()  # time to bind counts from the request
                send_json(
                    self.api,
                    "POST",
                    f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
                    claim_template(spec, ns),
                )
                send_json(
                    self.api, "POST", f"/api/v1/namespaces/{ns}/pods", pod_manifest(spec, ns, self.image)
                )
            return ", ".join(s.name for s in step.pods)
        if step.delete is not None:
            for name in step.delete:
                with self._lock:
                    self.pods[name].deleted_by_scenario = True
                send_json(self.api, "DELETE", f"/api/v1/namespaces/{ns}/pods/{{name}}", None, name=name)
            return ", ".join(step.delete)
        if step.fault is not None:
            manifest = fault_manifest(step.fault, ns, index)
            send_json(self.api, "POST", f"/apis/{FAULT_GROUP}/{FAULT_VERSION}/{FAULT_PLURAL}", manifest)
            return f"{step.fault.kind} on {step.fault.node}/{step.fault.device}"
        if step.clear_faults is not None:
            node = step.clear_faults.node
            cleared = [f for f in self._faults() if f["spec"].get("nodeName") == node]
            for fault in cleared:
                self._delete_fault(fault["metadata"]["name"])
            return f"{len(cleared)} on {node}"
        if step.drain is not None:
            d = step.drain
            drain = Drain(d.driver, d.node, d.device, d.effect, name=f"{ns}-{index}")
            Rules(self.api).create(drain)
            self.drains.append(drain)
            return f"{d.node or '*'}/{d.device or '*'} {d.effect}"
        if step.undrain is not None:
            u = step.undrain
            names = Rules(self.api).delete(Drain(u.driver, u.node, u.device))
            return ", ".join(names) or "nothing drained"
        if step.utilization is not None:
            patch = {"metadata": {"annotations": {ANNOTATION_UTILIZATION: str(step.utilization.percent)}}}
            merge_patch(self.api, f"/api/v1/namespaces/{ns}/pods/{{name}}", patch, name=step.utilization.pod)
            return f"{step.utilization.pod} {step.utilization.percent}%"
        raise ValueError(f"unknown action {step.action}")

    # ---- watching ------------------------------------------------------------------------------

    def _watch(self) -> None:
        from dra_fake.core.informer import lister, run_informer

        call = lister(self.api, f"/api/v1/namespaces/{self.ns}/pods")

        def listed(pods: list[dict[str, Any]]) -> None:
            for pod in pods:
                self._observe(pod)

        run_informer(self.stop, "scenario pods", call, {}, listed, lambda _, pod: self._observe(pod))

    def _observe(self, pod: dict[str, Any]) -> None:
        with self._lock:
            record = self.pods.get(pod["metadata"]["name"])
            if record is not None:
                record.observe(pod, self.now())

    def _settled(self) -> bool:
        """With expectations: all met (pods expected never to bind: never, the whole window counts);
        without: every pod runs or is gone."""
        expect = self.scenario.expect
        with self._lock:
            if expect.running or expect.evicted or expect.unbound:
                return not expect.unbound and not report.check(self.pods, expect)
            return all(r.running is not None or r.deleting is not None for r in self.pods.values())

    def _settle(self) -> None:
        """Until the scenario has settled (`_settled`), for at most its settleSeconds."""
        deadline = time.monotonic() + self.scenario.settle_seconds
        while time.monotonic() < deadline and not self._settled():
            self.stop.wait(0.5)

    def _events(self) -> None:
        from dra_fake.core.kube import get_json

        events = get_json(self.api, f"/api/v1/namespaces/{self.ns}/events").get("items") or []
        with self._lock:
            report.add_events(self.pods, events)

    # ---- clean-up ------------------------------------------------------------------------------

    def _faults(self) -> list[dict[str, Any]]:
        from dra_fake.core.kube import get_json

        path = f"/apis/{FAULT_GROUP}/{FAULT_VERSION}/{FAULT_PLURAL}"
        found = get_json(self.api, path, {"label_selector": f"{SCENARIO_LABEL}={self.ns}"})
        return list(found.get("items") or [])

    def _delete_faults(self) -> None:
        for fault in self._faults():
            self._delete_fault(fault["metadata"]["name"])

    def _delete_fault(self, name: str) -> None:
        from dra_fake.core.kube import send_json

        path = f"/apis/{FAULT_GROUP}/{FAULT_VERSION}/{FAULT_PLURAL}/{{name}}"
        _ignore_missing(lambda: send_json(self.api, "DELETE", path, None, name=name))

    def _clean_up(self) -> None:
        from dra_fake.core.kube import send_json

        _ignore_missing(self._delete_faults)
        if self.drains:
            names = {d.name for d in self.drains}
            _ignore_missing(lambda: [Rules(self.api).delete(Drain(name=n)) for n in names])
        _ignore_missing(
            lambda: send_json(self.api, "DELETE", "/api/v1/namespaces/{name}", None, name=self.ns)
        )

    def _wait_for_service_account(self) -> None:
        """Pods are refused until the namespace's `default` ServiceAccount exists."""
        from dra_fake.core.kube import get_json

        deadline = time.monotonic() + SA_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                get_json(self.api, f"/api/v1/namespaces/{self.ns}/serviceaccounts/default")
                return
            except Exception:  # 404 until the serviceaccount controller made it
                self.stop.wait(0.2)
        raise TimeoutError(f"namespace {self.ns}: no default ServiceAccount after {SA_WAIT_SECONDS:.0f} s")


def _ignore_missing(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception as err:  # gone already, or the API server away: logged, the rest goes on
        log.warning("scenario clean-up", extra={"error": str(err).splitlines()[0][:200] if str(err) else ""})
