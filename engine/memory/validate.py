"""Proof that a plan is safe: no two tensors live at the same step share a byte.

A sweep over the steps keeps the live tensors' byte ranges sorted by offset; every tensor
that starts at a step is checked against the live ranges next to it, so the whole check
costs O(n log n) plus the overlaps it finds. The only overlap allowed is an in-place
pair: an op's output over its dying input, same offset and size, meeting at one step.
Shared-object plans are also checked object by object.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from engine.errors import EngineError
from engine.memory.lifetimes import Lifetimes


class InvalidPlanError(EngineError):
    """A plan that would let two live tensors overwrite each other."""

    code = "invalid_plan"


def validate_plan(
    lifetimes: Lifetimes,
    offsets: Mapping[str, int],
    arena_bytes: int,
    objects: Mapping[str, int] | None = None,
    object_sizes: list[int] | None = None,
) -> None:
    """Raise :class:`InvalidPlanError` unless the plan keeps every live tensor intact."""
    uses = lifetimes.uses
    missing = set(uses) - set(offsets)
    if missing:
        raise InvalidPlanError(f"{len(missing)} tensors have no offset, e.g. '{min(missing)}'")
    for name, use in uses.items():
        if offsets[name] < 0 or offsets[name] + use.size > arena_bytes:
            raise InvalidPlanError(
                f"tensor '{name}' at [{offsets[name]}, {offsets[name] + use.size}) "
                f"lies outside the arena of {arena_bytes} bytes"
            )
    allowed = set(lifetimes.aliases)
    starting: list[list[str]] = [[] for _ in range(lifetimes.steps)]
    ending: list[list[str]] = [[] for _ in range(lifetimes.steps)]
    for name, use in uses.items():
        starting[use.first].append(name)
        ending[use.last].append(name)
    live: list[tuple[int, int, str]] = []  # (offset, end, tensor), sorted
    for step in range(lifetimes.steps):
        for name in starting[step]:
            start, end = offsets[name], offsets[name] + uses[name].size
            at = bisect.bisect_left(live, (start, end, name))
            # Live ranges are disjoint apart from in-place pairs, so the ones overlapping
            # the new range sit right around its insertion point.
            for k in _around(live, at, start, end):
                other = live[k][2]
                if not _in_place(allowed, uses, offsets, other, name):
                    raise InvalidPlanError(
                        f"tensors '{other}' and '{name}' are both live at step {step} and "
                        f"overlap in bytes [{max(start, live[k][0])}, {min(end, live[k][1])})"
                    )
            live.insert(at, (start, end, name))
        for name in ending[step]:
            live.remove((offsets[name], offsets[name] + uses[name].size, name))
    if objects is not None:
        _validate_objects(lifetimes, objects, object_sizes or [])


def _around(live: list[tuple[int, int, str]], at: int, start: int, end: int) -> list[int]:
    hits = []
    k = at - 1
    while k >= 0 and live[k][1] > start:
        hits.append(k)
        k -= 1
    k = at
    while k < len(live) and live[k][0] < end:
        hits.append(k)
        k += 1
    return hits


def _in_place(allowed, uses, offsets, a: str, b: str) -> bool:
    if (a, b) not in allowed:
        return False
    return (
        offsets[a] == offsets[b] and uses[a].size == uses[b].size and uses[a].last == uses[b].first
    )


def _validate_objects(
    lifetimes: Lifetimes, objects: Mapping[str, int], object_sizes: list[int]
) -> None:
    members: dict[int, list[str]] = {}
    for name in lifetimes.uses:
        members.setdefault(objects[name], []).append(name)
    allowed = set(lifetimes.aliases)
    for obj, names in members.items():
        if (
            obj >= len(object_sizes)
            or max(lifetimes.uses[n].size for n in names) > (object_sizes[obj])
        ):
            raise InvalidPlanError(f"shared object {obj} is smaller than a tensor it holds")
        names.sort(key=lambda n: (lifetimes.uses[n].first, lifetimes.uses[n].last))
        for a, b in zip(names, names[1:], strict=False):
            if lifetimes.uses[a].last >= lifetimes.uses[b].first and (a, b) not in allowed:
                raise InvalidPlanError(
                    f"tensors '{a}' and '{b}' share object {obj} while both are live"
                )
