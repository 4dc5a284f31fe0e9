"""Which of many patterns a line can match, from each pattern's gates, in one pass over the line. Pure.

Every pattern of explain has gates (patterns.LINE_GATES, ENV_GATES): substrings one of which each of its matches
holds, so that a pattern runs only on the lines that hold a gate. Tested one `in` at a time, the gates cost some 250
tests a candidate line (~40 us); in a log's head, where the pre-filter also hands on the lines that name a GPU (the
environment hints are read there), a log whose every line says `device cuda:0` was all candidate lines and took
~3 s/MB against ~0.2 s/MB. One overlapping Aho-Corasick pass (ahocorasick-rs, ~1 us a line) finds every gate a line
holds; where the wheel cannot be imported, the `in` tests give the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ENGINES = ("ahocorasick", "in")


class GateIndex:
    """`names_in(text)`: the names whose gates occur in `text` (exact case), as the `in` tests would find them."""

    def __init__(self, gates: Mapping[str, Iterable[str]], engine: str = "auto") -> None:
        if engine not in ("auto", *ENGINES):
            raise ValueError(f"unknown gate engine {engine!r}; one of auto, {', '.join(ENGINES)}")
        self._gates = {name: tuple(needles) for name, needles in gates.items()}
        if any(not n for needles in self._gates.values() for n in needles):
            raise ValueError("an empty gate would open its pattern on every line")
        needles = sorted({n for g in self._gates.values() for n in g})
        self._owners = [frozenset(name for name, g in self._gates.items() if n in g) for n in needles]
        self.engine = "in"
        self._automaton: Any = None
        if engine in ("auto", "ahocorasick"):
            try:
                import ahocorasick_rs  # type: ignore[import-not-found]

                # the standard match kind reports every needle, overlapping ones too ("gpu 0" inside "first gpu 0")
                self._automaton = ahocorasick_rs.AhoCorasick(needles, matchkind=ahocorasick_rs.MATCHKIND_STANDARD)
                self.engine = "ahocorasick"
            except Exception:  # noqa: BLE001 - no wheel for this platform, or an old release: the `in` tests
                if engine == "ahocorasick":  # asked for by name (tests, benches): say why it is missing
                    raise

    def names_in(self, text: str) -> frozenset[str]:
        if self._automaton is None:
            return frozenset(name for name, g in self._gates.items() if any(n in text for n in g))
        hits = self._automaton.find_matches_as_indexes(text, overlapping=True)
        if not hits:
            return _NONE
        if len(hits) == 1:
            return self._owners[hits[0][0]]
        return frozenset().union(*(self._owners[i] for i in {m[0] for m in hits}))


_NONE: frozenset[str] = frozenset()
