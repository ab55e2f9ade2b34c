"""Workload profiles for KWOK fleets (pure): how long the pods that the scheduler places on
`dra-fake fleet` nodes take to start and to run, and how many fail, rendered as KWOK Stage
objects (kwok.x-k8s.io/v1alpha1). KWOK's controller applies them to the pods of the nodes it
manages (docs/local-cluster.md#kwok-fleets); the scheduler allocates and reserves the pods'
claims as on any node, KWOK plays the kubelet's part.

A pod may override its profile with annotations: `dra-fake.dev/run-duration` (a Go duration,
"30s") and `dra-fake.dev/outcome` (`Succeeded` or `Failed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_fake.core import yamlio

RUN_DURATION_ANNOTATION = "dra-fake.dev/run-duration"
OUTCOME_ANNOTATION = "dra-fake.dev/outcome"
STAGE_API = "kwok.x-k8s.io/v1alpha1"
WEIGHT_SCALE = 1000  # failureFraction in steps of 0.1 %


class WorkloadError(ValueError):
    """A profile KWOK cannot play; the message names the field."""


@dataclass(frozen=True)
class WorkloadProfile:
    start_seconds: float = 1.0  # bound -> Running (the kubelet's prepare and container start)
    run_seconds: float | None = None  # Running -> finished; None: until deleted
    run_jitter_seconds: float = 0.0  # each run lasts runSeconds plus up to this much more
    failure_fraction: float = 0.0  # of the pods that can fail (restartPolicy Never)
    exit_code: int = 1  # of a failed pod's containers


FIELDS = {
    "startSeconds": "start_seconds",
    "runSeconds": "run_seconds",
    "runJitterSeconds": "run_jitter_seconds",
    "failureFraction": "failure_fraction",
    "exitCode": "exit_code",
}


def parse_workload(data: object, source: str = "workload") -> WorkloadProfile:
    """A profile from its YAML mapping (camelCase keys, all optional)."""
    if data is None:
        return WorkloadProfile()
    if not isinstance(data, Mapping):
        raise WorkloadError(f"{source}: expected a mapping of {', '.join(FIELDS)}")
    unknown = sorted(set(map(str, data)) - set(FIELDS))
    if unknown:
        raise WorkloadError(f"{source}: unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    values: dict[str, Any] = {}
    for key, attr in FIELDS.items():
        if key not in data or (key == "runSeconds" and data[key] is None):
            continue
        raw = data[key]
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise WorkloadError(f"{source}: {key}: expected a number, got {raw!r}")
        if key == "exitCode":
            if not isinstance(raw, int) or not 1 <= raw <= 255:
                raise WorkloadError(f"{source}: exitCode: expected an integer 1..255, got {raw!r}")
        elif key == "failureFraction":
            if not 0 <= raw <= 1:
                raise WorkloadError(f"{source}: failureFraction: expected 0..1, got {raw!r}")
        elif raw < 0:
            raise WorkloadError(f"{source}: {key}: expected seconds >= 0, got {raw!r}")
        values[attr] = raw
    return WorkloadProfile(**values)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


def _stage(name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": STAGE_API,
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, **spec},
    }


ALIVE = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}

# The status a kubelet reports for a started pod: init containers done, containers running.
# KWOK renders it (Go templates, its helpers NodeIPWith and PodIPWith) into a status patch.
STARTED = """\
{{ $now := Now }}
conditions:
- {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
{{ if .spec.initContainers }}
initContainerStatuses:
{{ range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: true
  restartCount: 0
  started: false
  state:
    terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},
                 finishedAt: {{ $now | Quote }}}
{{ end }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: true
  restartCount: 0
  started: true
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
{{ $meta := .metadata }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or $meta.uid "" ) ( or $meta.name "" )
  ( or $meta.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _finished(phase: str, exit_code: int, reason: str) -> str:
    """The status of a pod whose containers all exited (`reason`: the kubelet's, Completed or Error)."""
    return f"""\
{{{{ $now := Now }}}}
{{{{ $root := . }}}}
conditions:
- {{type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{{{ $now | Quote }}}}}}
- {{type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{{{ $now | Quote }}}}}}
containerStatuses:
{{{{ range $index, $item := .spec.containers }}}}
{{{{ $origin := index $root.status.containerStatuses $index }}}}
- name: {{{{ $item.name | Quote }}}}
  image: {{{{ $item.image | Quote }}}}
  imageID: ""
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      reason: {reason}
      startedAt: {{{{ $origin.state.running.startedAt | Quote }}}}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
phase: {phase}
"""


# A Node registered without status (adopted, not made by the fleet, whose Nodes are Ready from the
# start) gets a kubelet's Ready condition. KWOK needs a Node Stage in any case: without one it starts
# no node controller, and so manages no node's pods. A node that has a Ready condition, True or not,
# is left alone: whether it is Ready is the node lifecycle controller's word and the fleet's Leases.
NODE_READY = """\
{{ $now := Now }}
conditions:
- {type: Ready, status: "True", reason: KubeletReady, message: "KWOK plays this node's kubelet",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
"""


def kwok_stages(profile: WorkloadProfile) -> list[dict[str, Any]]:
    """The Stage objects that play `profile` on the pods of KWOK's nodes: start, finish
    (Succeeded or Failed, weighted by failureFraction) and deletion; and a Node's first Ready."""
    stages = [
        _stage(
            "dra-fake-node-ready",
            "Node",
            {
                "selector": {
                    "matchExpressions": [
                        ALIVE,
                        {
                            "key": '.status.conditions.[] | select( .type == "Ready" )',
                            "operator": "DoesNotExist",
                        },
                    ]
                },
                "next": {"statusTemplate": NODE_READY},
            },
        ),
        _stage(
            "dra-fake-pod-start",
            "Pod",
            {
                "selector": {
                    "matchExpressions": [
                        ALIVE,
                        {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                    ]
                },
                "delay": {"durationMilliseconds": _ms(profile.start_seconds)},
                "next": {
                    "event": {"type": "Normal", "reason": "Started", "message": "Started container (KWOK)"},
                    "statusTemplate": STARTED,
                },
            },
        ),
    ]
    # How long a pod runs: its annotation, else the profile's; pods run until deleted when neither
    # says (restartPolicy Always: the kubelet restarts exited containers, the pod never finishes).
    delay: dict[str, Any] = {"durationFrom": {"expressionFrom": _annotation(RUN_DURATION_ANNOTATION)}}
    runs: list[dict[str, Any]] = [ALIVE, {"key": ".status.phase", "operator": "In", "values": ["Running"]}]
    if profile.run_seconds is None:
        runs.append({"key": _annotation(RUN_DURATION_ANNOTATION), "operator": "Exists"})
    else:
        delay["durationMilliseconds"] = _ms(profile.run_seconds)
        if profile.run_jitter_seconds:  # KWOK: uniform in [duration, jitter)
            delay["jitterDurationMilliseconds"] = _ms(profile.run_seconds + profile.run_jitter_seconds)
    failing = round(profile.failure_fraction * WEIGHT_SCALE)
    for phase, restart, weight, code, reason in (
        ("Succeeded", ["Never", "OnFailure"], WEIGHT_SCALE - failing, 0, "Completed"),
        ("Failed", ["Never"], failing, profile.exit_code, "Error"),
    ):
        other = "Failed" if phase == "Succeeded" else "Succeeded"
        stages.append(
            _stage(
                f"dra-fake-pod-{phase.lower()}",
                "Pod",
                {
                    "selector": {
                        "matchExpressions": [
                            *runs,
                            {"key": ".spec.restartPolicy", "operator": "In", "values": restart},
                            {"key": _annotation(OUTCOME_ANNOTATION), "operator": "NotIn", "values": [other]},
                        ]
                    },
                    # Both stages match a pod without an outcome annotation: KWOK picks one by weight.
                    "weight": weight,
                    "delay": delay,
                    "next": {"statusTemplate": _finished(phase, code, reason)},
                },
            )
        )
    stages.append(
        _stage(
            "dra-fake-pod-delete",
            "Pod",
            {
                "selector": {
                    "matchExpressions": [
                        {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                        {"key": ".metadata.finalizers", "operator": "DoesNotExist"},
                    ]
                },
                "next": {"delete": True},
            },
        )
    )
    return stages


def load_workload(path: str) -> WorkloadProfile:
    """The profile in a YAML file (`path` empty: the defaults: start after 1 s, run until deleted)."""
    if not path:
        return WorkloadProfile()
    try:
        data = yamlio.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise WorkloadError(f"{path}: {err}") from None
    return parse_workload(data, path)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # each object spelled out, no YAML anchors


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)


def dump_documents(docs: list[dict[str, Any]]) -> str:
    """Objects as YAML documents, multi-line strings (templates, files) as literal blocks."""
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=200)


def stages_yaml(profile: WorkloadProfile) -> str:
    """The Stages as YAML documents: KWOK's --config file, or objects to apply where KWOK runs
    with --enable-crds=Stage."""
    return dump_documents(kwok_stages(profile))
