"""Repeated stretches of a trace written out instead of traced: the same events, new storage ids.

Tracing costs a fake-tensor dispatch per op; replaying the allocator over events is cheap. Two kinds
of repetition are exact and checked on the trace itself before they are used:

- a step that ends with exactly the storages it began with (none of its storages outlives it, it frees
  none from before): the next step starts from the same state and runs the same ops, so its events
  are a copy of this one's (repeat_step). The allocator still replays the copy from the state the step
  before left it in, which is why the third step is there at all.
- generate()'s decode steps: after the first few, every decode step makes the same storages as the one
  before, in the same order, freeing storages of the same rank from the same earlier decode steps, with
  sizes that grow by the same amount each step (the KV cache by one token). extend_periods checks that
  on the traced decode steps and writes out the remaining ones.
"""

from __future__ import annotations

from oomdoctor.estimate.memtrace import MemTrace

Event = tuple[str, int, int, int]


def self_contained(events: list[Event], start: int, end: int) -> bool:
    """True when every storage allocated in events[start:end] is freed there and every free there is of a
    storage allocated there (and the stretch allocates something)."""
    made: set[int] = set()
    for op, sid, _, _ in events[start:end]:
        if op == "a":
            made.add(sid)
        elif sid in made:
            made.remove(sid)
        else:
            return False
    return not made and start < end


def repeat_step(trace: MemTrace, start: int, end: int, next_sid: int, rename: tuple[str, str]) -> int:
    """Append a copy of events[start:end] (a self_contained stretch) with new ids, its marks renamed
    (rename[0] -> rename[1]) and its categories copied. Returns the next free id."""
    new: dict[int, int] = {}
    marks = [(at - start + len(trace.events), name.replace(rename[0], rename[1], 1))
             for at, name in trace.marks if start <= at <= end and name.startswith(rename[0])]
    out = []
    for op, sid, n, st in trace.events[start:end]:
        if op == "a":
            new[sid] = next_sid
            next_sid += 1
        out.append((op, new[sid], n, st))
    for old, sid in new.items():
        _copy_labels(trace, old, sid)
    trace.events.extend(out)
    trace.marks.extend(marks)
    return next_sid


def _copy_labels(trace: MemTrace, old: int, sid: int) -> None:
    if old in trace.categories:
        trace.categories[sid] = trace.categories[old]
    if old in trace.numels:
        trace.numels[sid] = trace.numels[old]


def _shape(events: list[Event], bounds: list[int], k: int, owner: dict[int, tuple[int, int]]):
    """Period k as (op, size, ref): an alloc's ref is None; a free's is (periods back, rank of the
    storage among that period's allocations), or ('pre', id) for a storage from before period 0."""
    out = []
    for op, sid, n, st in events[bounds[k]:bounds[k + 1]]:
        if op == "a":
            out.append(("a", n, st, None))
        else:
            p, rank = owner.get(sid, (None, sid))
            out.append(("f", 0, st, ("pre", rank) if p is None else (k - p, rank)))
    return out


def extend_periods(trace: MemTrace, bounds: list[int], total: int, next_sid: int, *, verify: int = 3) -> int | None:
    """Write out periods up to `total`. Traced period k is events[bounds[k]:bounds[k + 1]]; the last
    bound is where the tail after the periods starts. The last `verify` traced periods must agree: the
    same events in the same order, every free of a storage the same number of periods back and of the
    same rank among that period's allocations (or the same storage from before them), sizes changing by
    the same amount from one period to the next. Periods are then added with sizes extended by that
    amount, and the tail's frees of storages of the agreeing periods move to the same periods counted
    from the end. Returns the next free id, or None (trace untouched) when the periods do not agree,
    a free reaches back before them, or the result would free a storage twice."""
    have = len(bounds) - 1
    if total <= have:
        return next_sid
    if have < verify or verify < 3:
        return None
    events = trace.events
    owner: dict[int, tuple[int, int]] = {}
    ids: list[list[int]] = [[] for _ in range(total)]
    for k in range(have):
        for op, sid, _, _ in events[bounds[k]:bounds[k + 1]]:
            if op == "a":
                owner[sid] = (k, len(ids[k]))
                ids[k].append(sid)
    first = have - verify
    shapes = [_shape(events, bounds, k, owner) for k in range(first, have)]
    skeleton = [(op, st, ref) for op, _, st, ref in shapes[0]]
    if any([(op, st, ref) for op, _, st, ref in s] != skeleton for s in shapes[1:]):
        return None
    delta = [b[1] - a[1] for a, b in zip(shapes[-2], shapes[-1])]
    for a, b in zip(shapes, shapes[1:]):
        if any(y[1] - x[1] != d for x, y, d in zip(a, b, delta)):
            return None
    if any(ref is not None and ref[0] != "pre" and ref[0] > verify - 1 for _, _, _, ref in shapes[-1]):
        return None  # a free reaches back before the periods that agree
    out = list(events[:bounds[-1]])
    labels: list[tuple[int, int]] = []
    template = events[bounds[have - 1]:bounds[have]]
    for k in range(have, total):
        grow = k - (have - 1)
        for (op, sid, _, st), (_, n, _, ref), d in zip(template, shapes[-1], delta):
            if op == "a":
                ids[k].append(next_sid)
                labels.append((sid, next_sid))
                out.append(("a", next_sid, max(0, n + d * grow), st))
                next_sid += 1
            elif ref[0] == "pre":
                out.append(("f", ref[1], 0, st))
            else:
                out.append(("f", ids[k - ref[0]][ref[1]], 0, st))
    shift = total - have
    for op, sid, n, st in events[bounds[-1]:]:
        if op == "f" and sid in owner and owner[sid][0] >= first:
            k, rank = owner[sid]
            sid = ids[k + shift][rank]
        out.append((op, sid, n, st))
    freed: set[int] = set()
    for op, sid, _, _ in out:
        if op == "f":
            if sid in freed:
                return None
            freed.add(sid)
    added = len(out) - len(events)
    trace.marks = [(at + added if at >= bounds[-1] else at, name) for at, name in trace.marks]
    for old, sid in labels:
        _copy_labels(trace, old, sid)
    trace.events[:] = out
    return next_sid
