"""PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF options that change how much the allocator reserves.

Parsed the way c10's AcceleratorAllocatorConfig reads them (docs/source/notes/cuda.md): comma-separated
`key:value`; max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions (a number or the
per-interval form `[256:1,512:2,1024:4,>:8]`, sizes in MB), expandable_segments, backend. Options that do
not change peak reserved memory are accepted and ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oomdoctor.errors import UsageError

_MB = 1 << 20
_MAX = 1 << 62
_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB, 2 MiB, ... 32 GiB and above
_KNOWN = {"max_split_size_mb", "max_non_split_rounding_mb", "roundup_power2_divisions", "expandable_segments",
          "backend", "garbage_collection_threshold", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
          "pinned_num_register_threads", "pinned_use_background_threads", "per_process_memory_fraction",
          "large_segment_size_mb", "throw_on_cudamalloc_oom", "graph_capture_record_stream_reuse",
          "pinned_reserve_segment_size_mb"}


@dataclass(frozen=True)
class AllocConf:
    max_split_size: int = _MAX
    max_non_split_rounding: int = 20 * _MB
    divisions: tuple[int, ...] = field(default_factory=lambda: (0,) * _INTERVALS)
    expandable_segments: bool = False
    backend: str = "native"

    def divisions_for(self, size: int) -> int:
        index = max(0, (size.bit_length() - 1) - 20)
        return self.divisions[min(index, _INTERVALS - 1)]


def parse_alloc_conf(text: str | None) -> AllocConf:
    """AllocConf from the variable's text. Raises UsageError naming the bad option."""
    if not text or not text.strip():
        return AllocConf()
    values: dict = {}
    for part in _split_top_level(text):
        if not part.strip():
            continue
        key, sep, value = part.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key not in _KNOWN:
            raise UsageError(f"alloc conf: unknown option {part.strip()!r}")
        try:
            if key == "max_split_size_mb":
                mb = int(value)
                if mb <= 20:
                    raise UsageError("alloc conf: max_split_size_mb must be larger than 20")
                values["max_split_size"] = mb * _MB
            elif key == "max_non_split_rounding_mb":
                values["max_non_split_rounding"] = int(value) * _MB
            elif key == "roundup_power2_divisions":
                values["divisions"] = _parse_divisions(value)
            elif key == "expandable_segments":
                values["expandable_segments"] = value.lower() == "true"
            elif key == "backend":
                if value not in ("native", "cudaMallocAsync"):
                    raise UsageError(f"alloc conf: unknown backend {value!r}")
                values["backend"] = value
        except ValueError as exc:
            raise UsageError(f"alloc conf: bad value for {key}: {value!r}") from exc
    return AllocConf(**values)


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _parse_divisions(value: str) -> tuple[int, ...]:
    def check(d: int) -> int:
        if d != 0 and (d & (d - 1)):
            raise UsageError(f"alloc conf: roundup_power2_divisions must be a power of 2, got {d}")
        return d

    if not value.startswith("["):
        return (check(int(value)),) * _INTERVALS
    out = [0] * _INTERVALS
    last = 0
    for item in re.split(r"\s*,\s*", value.strip("[]")):
        k, _, v = item.partition(":")
        d = check(int(v))
        if k.strip() == ">":
            for i in range(last, _INTERVALS):
                out[i] = d
            continue
        mb = int(k)
        if mb & (mb - 1):
            raise UsageError(f"alloc conf: roundup_power2_divisions interval {mb} is not a power of 2")
        index = min(max(0, mb.bit_length() - 1), _INTERVALS - 1)
        if last == 0:  # as c10: the first key also covers every smaller interval
            for i in range(index):
                out[i] = d
        out[index] = d
        last = index + 1
    return tuple(out)
