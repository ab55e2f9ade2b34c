"""Pure planning of a ResourceSlice pool update, with the upstream controller's semantics.

Slices are named `<index:05x>-<driver>-<pool>` (as upstream 1.36+ prefixes them), so desired
slice i and existing slice i match by name; names sort in slice order, which the allocator
(first fit over slices sorted by name) relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Spec = dict[str, Any]


@dataclass(frozen=True)
class ExistingSlice:
    name: str
    uid: str
    resource_version: str
    spec: Spec
    publisher: str = ""  # the instance that wrote it (dra_fake.core.publisher.PUBLISHER_ANNOTATION)

    @property
    def generation(self) -> int:
        return int(self.spec.get("pool", {}).get("generation", 0))


@dataclass
class PoolPlan:
    generation: int
    creates: list[tuple[str, Spec]] = field(default_factory=list)
    updates: list[tuple[ExistingSlice, Spec]] = field(default_factory=list)
    deletes: list[ExistingSlice] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.deletes)


def slice_name(index: int, driver: str, pool: str) -> str:
    return f"{index:05x}-{driver}-{pool}"


def plan_pool(
    existing: list[ExistingSlice],
    desired_count: int,
    build_spec: Callable[[int, int], Spec],
    driver: str,
    pool: str,
    same: Callable[[ExistingSlice, Spec], bool] = lambda e, s: e.spec == s,
) -> PoolPlan:
    """Plan the writes that turn `existing` into `desired_count` slices built by
    build_spec(index, generation).

    Generation: the highest existing generation is current; lower ones are obsolete. If only
    one slice changes and none is added or removed, it is updated in place at the current
    generation (one API call); otherwise the generation is bumped and every slice rewritten,
    so consumers never mix slices of two pool states.
    """
    current = max((e.generation for e in existing), default=0)
    by_name = {e.name: e for e in existing if e.generation == current}
    wanted = {slice_name(i, driver, pool): i for i in range(desired_count)}
    deletes = [e for e in existing if e.generation < current or e.name not in wanted]
    missing = [n for n in wanted if n not in by_name]
    changed = [n for n in wanted if n in by_name and not same(by_name[n], build_spec(wanted[n], current))]

    if (
        current > 0
        and not missing
        and not [d for d in deletes if d.generation == current]
        and len(changed) <= 1
    ):
        plan = PoolPlan(generation=current, deletes=deletes)
        plan.updates = [(by_name[n], build_spec(wanted[n], current)) for n in changed]
        return plan

    generation = current + 1
    plan = PoolPlan(generation=generation, deletes=deletes)
    for name, index in wanted.items():
        spec = build_spec(index, generation)
        if name in by_name:
            plan.updates.append((by_name[name], spec))
        else:
            plan.creates.append((name, spec))
    return plan
