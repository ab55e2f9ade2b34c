"""GPU-to-GPU links as NVIDIA's go-gpuallocator sees them, and its best-effort ("aligned") policy,
which NVIDIA's device plugin asks for the preferred allocation of whole GPUs. Pure. Facts:
docs/reference/nvidia-device-plugin.md#b5-getpreferredallocation--options.

A pair of GPUs has one PCIe link (NVML's common-ancestor level) and, where an NVLink of one GPU
names the other as its remote end, an NVLink link counting those links. Each link scores: PCIe
levels 10 (across CPUs) to 60 (same board), NVLink 100 per link. The policy splits all available
GPUs into sets of the requested size (padding the list with empty places), takes the split with
the highest summed pair scores in which one full set holds every must-include GPU, and answers that
split's best such set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from functools import cache
from itertools import combinations


class Link(IntEnum):
    """go-gpuallocator's link types, in its order (its P2PLinkType values)."""

    UNKNOWN = 0
    CROSS_CPU = 1  # NVML TOPOLOGY_SYSTEM (nvidia-smi topo: SYS)
    SAME_CPU = 2  # TOPOLOGY_NODE (NODE)
    HOST_BRIDGE = 3  # TOPOLOGY_HOSTBRIDGE (PHB)
    MULTI_SWITCH = 4  # TOPOLOGY_MULTIPLE (PXB)
    SINGLE_SWITCH = 5  # TOPOLOGY_SINGLE (PIX)
    SAME_BOARD = 6  # TOPOLOGY_INTERNAL
    NVLINK_1 = 7  # ... up to NVLINK_1 + 17: eighteen links (NV18)

    @staticmethod
    def nvlinks(count: int) -> int:
        """The link type of `count` NVLinks between two GPUs (1-18); an int, as only 1 is named."""
        if not 1 <= count <= 18:
            raise ValueError(f"NVLink count {count}: go-gpuallocator knows 1 to 18 links")
        return Link.NVLINK_1 + count - 1


_PCIE_SCORES = {
    Link.CROSS_CPU: 10,
    Link.SAME_CPU: 20,
    Link.HOST_BRIDGE: 30,
    Link.MULTI_SWITCH: 40,
    Link.SINGLE_SWITCH: 50,
    Link.SAME_BOARD: 60,
}


def link_score(link: int) -> int:
    """What go-gpuallocator adds for one link: the PCIe level's score, 100 per NVLink."""
    if link >= Link.NVLINK_1:
        return 100 * (link - Link.NVLINK_1 + 1)
    return _PCIE_SCORES.get(Link(link), 0)


def pcie_link(root_a: str, root_b: str) -> Link:
    """Our model of NVML's common-ancestor level from the profiles' PCIe roots (`pci<domain>:<bus>`,
    dra_fake.gpu.inventory): the same root is one host bridge (PHB); roots of one PCI domain are
    one CPU's (NODE); other domains are across CPUs (SYS). The profiles name no PCIe switches."""
    if root_a == root_b:
        return Link.HOST_BRIDGE
    if root_a[:7] == root_b[:7]:
        return Link.SAME_CPU
    return Link.CROSS_CPU


def best_effort(
    available: Sequence[str], required: Sequence[str], size: int, pair_score: Callable[[str, str], int]
) -> list[str]:
    """go-gpuallocator's best-effort policy over GPU IDs, in `available`'s order; [] where it answers
    nothing (a bad size, fewer GPUs than asked, a must-include GPU not available). Ties go to the
    first split and set in its enumeration order: the first set holds the first GPU, then each
    set the first GPU left, its partners in lexicographic order of position.

    One difference, on purpose: NVIDIA's last step may pick a set that holds padding (when the
    count is not a multiple of `size` and the padded set scores highest), and the plugin then
    dereferences the empty place and crashes (go-gpuallocator PR #80, open); here padded sets are
    never answered."""
    if size <= 0 or len(available) < size or len(required) > size or len(required) > len(available):
        return []
    n = len(available)
    positions = {gpu: i for i, gpu in enumerate(available)}
    if any(gpu not in positions for gpu in required):
        return []
    must = frozenset(positions[gpu] for gpu in required)
    padding = (-n) % size
    places = tuple(range(n + padding))  # n.. are the empty places

    @cache
    def pair(a: int, b: int) -> int:
        return 0 if a >= n or b >= n else pair_score(available[a], available[b])

    def set_score(group: tuple[int, ...]) -> int:
        return sum(pair(a, b) for a, b in combinations(group, 2))

    @cache
    def best_split(left: tuple[int, ...]) -> tuple[int, tuple[tuple[int, ...], ...]] | None:
        """The highest-scoring split of `left` whose sets keep the must-include GPUs together in
        an unpadded set (None: there is none); the first in enumeration order on a tie."""
        if len(left) == size:
            if _valid(left, must, n, padding):
                return set_score(left), (left,)
            return None
        first, rest = left[0], left[1:]
        best: tuple[int, tuple[tuple[int, ...], ...]] | None = None
        for partners in combinations(rest, size - 1):
            group = (first, *partners)
            if not _valid(group, must, n, padding):
                continue
            remaining = tuple(p for p in rest if p not in partners)
            sub = best_split(remaining)
            if sub is None:
                continue
            score = set_score(group) + sub[0]
            if best is None or score > best[0]:
                best = (score, (group, *sub[1]))
        return best

    found = best_split(places)
    if found is None:
        return []
    candidates = [g for g in found[1] if must <= set(g) and max(g) < n]
    if not candidates:
        return []
    chosen = max(candidates, key=set_score)  # max keeps the first of equals
    return [available[i] for i in chosen]


def _valid(group: tuple[int, ...], must: frozenset[int], n: int, padding: int) -> bool:
    """go-gpuallocator's pruning: a set holds all of the padding or none of it; and (its condition
    on whole splits, checked here per set, which is equivalent) the must-include GPUs are all in one
    set, without padding."""
    padded = sum(1 for p in group if p >= n)
    if padded not in (0, padding):
        return False
    inside = must & set(group)
    return not inside or (inside == must and padded == 0)
