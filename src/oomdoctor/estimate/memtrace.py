"""A recorded allocation trace: what the estimator hands from the tracer to the allocator model.

Events are `('a', sid, nbytes, stream)` for a new storage and `('f', sid, 0, stream)` for its death, in
program order. `categories` labels each storage (parameters, gradients, optimizer_state, activations,
workspace) and `marks` says where each phase of each step began, so the breakdown at the peak can be told.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace")
# set by a labeler (estimate --model) and present in a breakdown only then: the part of activations
# that is the logits (and their loss and gradient) and the KV cache
EXTRA_CATEGORIES = ("logits", "kv_cache")
# what the optimizer step allocates besides its state (foreach temporaries), present when alive at the peak
OPTIMIZER_TEMPORARIES = "optimizer_temporaries"


@dataclass
class MemTrace:
    events: list[tuple[str, int, int, int]] = field(default_factory=list)
    categories: dict[int, str] = field(default_factory=dict)
    marks: list[tuple[int, str]] = field(default_factory=list)  # (event index, "step1/forward")
    numels: dict[int, int] = field(default_factory=dict)  # element count of optimizer-state storages

    def resized(self, sizes: dict[int, int]) -> MemTrace:
        """The same trace with some storages given another size (an analytic stand-in, e.g. 8-bit state)."""
        events = [(op, sid, sizes.get(sid, n) if op == "a" else n, st) for op, sid, n, st in self.events]
        return MemTrace(events, dict(self.categories), list(self.marks), dict(self.numels))

    def live_at(self, index: int) -> dict[int, int]:
        """Storages alive just after event `index`: sid -> bytes."""
        live: dict[int, int] = {}
        for op, sid, size, _ in self.events[: index + 1]:
            if op == "a":
                live[sid] = size
            else:
                live.pop(sid, None)
        return live

    def breakdown_at(self, index: int, rounding=lambda n: n) -> dict[str, int]:
        """Bytes per category alive at `index` (sizes passed through the allocator's rounding)."""
        out = dict.fromkeys(CATEGORIES, 0)
        for sid, size in self.live_at(index).items():
            cat = self.categories.get(sid, "activations")
            out[cat] = out.get(cat, 0) + rounding(size)
        return out

    def phase_at(self, index: int) -> str:
        phase = "setup"
        for at, name in self.marks:
            if at > index:
                break
            phase = name
        return phase
