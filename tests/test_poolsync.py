"""Pool planning follows the upstream ResourceSlice controller's generation rules."""

from __future__ import annotations

from typing import Any

from dra_fake.core.poolsync import ExistingSlice, plan_pool, slice_name

DRIVER, POOL = "gpu.nvidia.com", "node-1"


def spec(devices: list[str], generation: int, count: int) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "pool": {"name": POOL, "generation": generation, "resourceSliceCount": count},
        "nodeName": POOL,
        "devices": [{"name": d} for d in devices],
    }


def builder(desired: list[list[str]]) -> Any:
    return lambda i, gen: spec(desired[i], gen, len(desired))


def existing(index: int, devices: list[str], generation: int, count: int) -> ExistingSlice:
    return ExistingSlice(
        slice_name(index, DRIVER, POOL), f"uid-{index}-{generation}", "1", spec(devices, generation, count)
    )


def test_first_publish_creates_every_slice_at_generation_1() -> None:
    plan = plan_pool([], 2, builder([["gpu-0"], ["gpu-1"]]), DRIVER, POOL)
    assert plan.generation == 1
    assert [n for n, _ in plan.creates] == ["00000-gpu.nvidia.com-node-1", "00001-gpu.nvidia.com-node-1"]
    assert not plan.updates and not plan.deletes


def test_unchanged_pool_needs_no_write() -> None:
    desired = [["gpu-0"], ["gpu-1"]]
    current = [existing(0, desired[0], 3, 2), existing(1, desired[1], 3, 2)]
    assert plan_pool(current, 2, builder(desired), DRIVER, POOL).empty


def test_one_changed_slice_is_updated_in_place_at_the_same_generation() -> None:
    current = [existing(0, ["gpu-0"], 3, 2), existing(1, ["gpu-1"], 3, 2)]
    plan = plan_pool(current, 2, builder([["gpu-0"], ["gpu-1", "gpu-2"]]), DRIVER, POOL)
    assert plan.generation == 3
    assert [(e.name, s["devices"]) for e, s in plan.updates] == [
        (current[1].name, [{"name": "gpu-1"}, {"name": "gpu-2"}])
    ]
    assert not plan.creates and not plan.deletes


def test_two_changed_slices_bump_the_generation_and_rewrite_all() -> None:
    current = [existing(0, ["gpu-0"], 3, 2), existing(1, ["gpu-1"], 3, 2)]
    plan = plan_pool(current, 2, builder([["gpu-9"], ["gpu-8"]]), DRIVER, POOL)
    assert plan.generation == 4
    assert all(s["pool"]["generation"] == 4 for _, s in plan.updates) and len(plan.updates) == 2


def test_fewer_slices_delete_the_extra_one_and_bump_the_generation() -> None:
    current = [existing(0, ["gpu-0"], 1, 2), existing(1, ["gpu-1"], 1, 2)]
    plan = plan_pool(current, 1, builder([["gpu-0", "gpu-1"]]), DRIVER, POOL)
    assert plan.generation == 2
    assert [e.name for e in plan.deletes] == [current[1].name]
    assert [s["pool"]["resourceSliceCount"] for _, s in plan.updates] == [1]


def test_slices_of_an_older_generation_are_obsolete() -> None:
    current = [existing(0, ["gpu-0"], 2, 1), existing(1, ["gpu-1"], 1, 2)]
    plan = plan_pool(current, 1, builder([["gpu-0"]]), DRIVER, POOL)
    assert plan.generation == 2 and [e.name for e in plan.deletes] == [current[1].name] and not plan.updates


def test_a_wiped_pool_is_recreated_at_a_new_generation() -> None:
    plan = plan_pool([], 1, builder([["gpu-0"]]), DRIVER, POOL)
    assert [n for n, _ in plan.creates] == [slice_name(0, DRIVER, POOL)]
