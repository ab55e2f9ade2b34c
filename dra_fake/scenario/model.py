"""A scenario file (docs/scenarios.md): pure. Keys are camelCase and checked strictly; an error
names the file and the field (`drain.yaml: steps.2.drain.effect: ...`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ScenarioError(ValueError):
    """The scenario file is invalid; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)


class PodSpec(_Model):
    """A pod with one claim (from its own ResourceClaimTemplate) of `count` devices."""

    name: Annotated[str, Field(pattern=NAME, max_length=50)]
    count: Annotated[int, Field(ge=1, le=32)] = 1
    device_class: str = "gpu.nvidia.com"
    node: str = ""  # a nodeSelector on kubernetes.io/hostname
    selector: str = ""  # a CEL selector of the request
    tolerations: list[dict[str, Any]] = Field(default_factory=list)  # the request's device tolerations
    attach: Literal["attached", "failed", "none"] | None = None  # the attach outcome its claim asks for
    utilization: Annotated[int, Field(ge=0, le=100)] | None = None  # simulated GPU load, percent


class FaultStep(_Model):
    node: str
    device: str
    kind: Literal["xid", "gpu-lost", "ecc", "thermal", "unmonitored"]
    xid: int | None = None
    effect: Literal["NoSchedule", "NoExecute", "None"] | None = None
    duration: Annotated[int, Field(ge=1)] | None = None  # seconds


class DrainStep(_Model):
    node: str = ""
    device: str = ""
    driver: str = "gpu.nvidia.com"
    effect: Literal["NoSchedule", "NoExecute", "None"] = "NoExecute"


class UtilizationStep(_Model):
    pod: str
    percent: Annotated[int, Field(ge=0, le=100)]


class NodeStep(_Model):
    node: str


class Step(_Model):
    """One action at `at` seconds from the start: exactly one of the action keys."""

    at: Annotated[float, Field(ge=0, le=86400)]
    pods: list[PodSpec] | None = None
    delete: list[str] | None = None  # pod names
    fault: FaultStep | None = None
    clear_faults: NodeStep | None = None
    drain: DrainStep | None = None
    undrain: DrainStep | None = None
    utilization: UtilizationStep | None = None

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        if len(self.actions()) != 1:
            raise ValueError(f"a step has exactly one action of {', '.join(ACTIONS)}")
        return self

    def actions(self) -> list[str]:
        return [a for a, field in ACTION_FIELDS.items() if getattr(self, field) is not None]

    @property
    def action(self) -> str:
        return self.actions()[0]


ACTION_FIELDS = {
    "pods": "pods",
    "delete": "delete",
    "fault": "fault",
    "clearFaults": "clear_faults",
    "drain": "drain",
    "undrain": "undrain",
    "utilization": "utilization",
}
ACTIONS = tuple(ACTION_FIELDS)


class Expect(_Model):
    """What must have happened, for CI: pods that ran, were evicted, never bound."""

    running: list[str] = Field(default_factory=list)
    evicted: list[str] = Field(default_factory=list)
    unbound: list[str] = Field(default_factory=list)


class Scenario(_Model):
    name: Annotated[str, Field(pattern=NAME, max_length=40)]
    settle_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0  # after the last step
    steps: list[Step]
    expect: Expect = Field(default_factory=Expect)

    @model_validator(mode="after")
    def _pods_known(self) -> Scenario:
        created: list[str] = []
        for step in sorted(self.steps, key=lambda s: s.at):
            for spec in step.pods or []:
                if spec.name in created:
                    raise ValueError(f"pod {spec.name!r} is created twice")
                created.append(spec.name)
            named = list(step.delete or []) + ([step.utilization.pod] if step.utilization else [])
            for name in named:
                if name not in created:
                    raise ValueError(f"pod {name!r} is not created by an earlier step")
        for name in self.expect.running + self.expect.evicted + self.expect.unbound:
            if name not in created:
                raise ValueError(f"expect: pod {name!r} is not created by any step")
        return self

    def ordered(self) -> list[Step]:
        return sorted(self.steps, key=lambda s: s.at)


def parse(data: Any, source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()
        )
        raise ScenarioError(f"{source}: {problems}") from None


def load(path: Path) -> Scenario:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ScenarioError(f"{path}: {err}") from None
    return parse(data, str(path))
