"""Facts and their absence.

A fact is a JSON-compatible value plus where it was read. Missing data is an explicit `Unavailable`
with a reason, never a bare None: "not installed", "permission denied" and "not applicable" must stay
distinguishable in a report. Keys are registered in `oomdoctor.facts.keys`; a FactSet refuses others,
so collectors, checks, `diff` and `fleet` all speak the same names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

from oomdoctor.facts.keys import FACT_KEYS, layer_of


@dataclass(frozen=True)
class Fact:
    key: str
    value: Any
    source: str

    @property
    def available(self) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class Unavailable:
    key: str
    reason: str
    source: str = ""

    @property
    def available(self) -> bool:
        return False

    @property
    def value(self) -> None:
        return None

    def to_json(self) -> dict[str, Any]:
        return {"unavailable": self.reason, "source": self.source}


Entry = Union[Fact, Unavailable]


class FactSet(Mapping[str, Entry]):
    """An immutable set of facts keyed by registered names."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Entry] = ()):
        data: dict[str, Entry] = {}
        for entry in entries:
            if entry.key not in FACT_KEYS:
                raise KeyError(f"unregistered fact key {entry.key!r}: add it to oomdoctor/facts/keys.py")
            # An available fact wins over an Unavailable for the same key (first available wins).
            old = data.get(entry.key)
            if old is None or (not old.available and entry.available):
                data[entry.key] = entry
        self._entries = data

    def __getitem__(self, key: str) -> Entry:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def value(self, key: str, default: Any = None) -> Any:
        """The value of an available fact, else `default`."""
        entry = self._entries.get(key)
        if entry is None or not entry.available:
            return default
        return entry.value

    def source(self, key: str) -> str:
        entry = self._entries.get(key)
        return entry.source if entry is not None else ""

    def has(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.available

    def by_layer(self, layer: str) -> dict[str, Entry]:
        return {k: v for k, v in sorted(self._entries.items()) if layer_of(k) == layer}

    def merged(self, other: FactSet | Iterable[Entry]) -> FactSet:
        """A new FactSet where facts of `other` override ours when they are available."""
        items = other.values() if isinstance(other, FactSet) else other
        return FactSet([*items, *self._entries.values()])

    def to_json(self) -> dict[str, Any]:
        return {k: v.to_json() for k, v in sorted(self._entries.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FactSet:
        entries: list[Entry] = []
        for key, raw in data.items():
            if key not in FACT_KEYS or not isinstance(raw, Mapping):
                continue  # facts written by a newer or older oomdoctor: keep what we know
            if "unavailable" in raw:
                entries.append(Unavailable(key, str(raw["unavailable"]), str(raw.get("source", ""))))
            else:
                entries.append(Fact(key, raw.get("value"), str(raw.get("source", ""))))
        return cls(entries)

    def __repr__(self) -> str:
        return f"FactSet({len(self)} facts)"
