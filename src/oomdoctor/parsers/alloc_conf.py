"""PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF: parse and validate like c10's CUDAAllocatorConfig.

Format `<option>:<value>,<option>:<value>`; `roundup_power2_divisions` also takes an interval list
`[256:1,512:2,>:8]`, so commas inside brackets do not split. PyTorch raises at the first CUDA
allocation on an unknown option or a bad value, so those are errors; options that are accepted but do
nothing here (ignored by cudaMallocAsync, a GC threshold without a memory fraction) are warnings.
Reference: docs/source/notes/cuda.md "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"
(memory-tools-and-papers.md section 4.4). Pure: never raises on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DOC = "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"

BOOL_KEYS = frozenset({
    "expandable_segments", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register", "pinned_use_background_threads", "graph_capture_record_stream_reuse",
    "throw_on_cudamalloc_oom",
})
INT_KEYS = frozenset({
    "max_split_size_mb", "max_non_split_rounding_mb", "pinned_num_register_threads", "large_segment_size_mb",
    "pinned_reserve_segment_size_mb",
})
FRACTION_KEYS = frozenset({"garbage_collection_threshold", "per_process_memory_fraction"})
KNOWN_KEYS = BOOL_KEYS | INT_KEYS | FRACTION_KEYS | {"backend", "roundup_power2_divisions"}
IGNORED_BY_ASYNC = ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
                    "expandable_segments")
MIN_MAX_SPLIT_MB = 20  # kLargeBuffer: PyTorch rejects smaller max_split_size_mb


@dataclass(frozen=True)
class AllocIssue:
    severity: str  # "error" (PyTorch refuses it), "warning" (accepted, no effect / risky), "info"
    key: str | None
    message: str


@dataclass(frozen=True)
class AllocConf:
    raw: str
    options: dict[str, str] = field(default_factory=dict)
    issues: tuple[AllocIssue, ...] = ()

    @property
    def backend(self) -> str:
        return self.options.get("backend", "native")

    @property
    def expandable_segments(self) -> bool:
        return self.options.get("expandable_segments") == "True"

    @property
    def ok(self) -> bool:
        return not any(i.severity == "error" for i in self.issues)


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside [...]."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _is_int(v: str) -> bool:
    return bool(re.fullmatch(r"\d+", v))


def _check_power2_divisions(value: str) -> str | None:
    if _is_int(value):
        n = int(value)
        return None if n == 0 or (n & (n - 1)) == 0 else "must be a power of 2"
    m = re.fullmatch(r"\[(.*)\]", value)
    if not m:
        return "must be a power of 2 or a list like [256:1,512:2,>:8]"
    for item in m.group(1).split(","):
        k, sep, v = item.strip().partition(":")
        if not sep or not (k == ">" or _is_int(k)) or not _is_int(v):
            return f"bad interval entry {item.strip()!r} (want SIZE_MB:DIVISIONS or >:DIVISIONS)"
        n = int(v)
        if n and n & (n - 1):
            return f"divisions {n} is not a power of 2"
    return None


def _check_value(key: str, value: str) -> str | None:
    if key == "backend":
        return None if value in ("native", "cudaMallocAsync") else "must be native or cudaMallocAsync"
    if key in BOOL_KEYS:
        return None if value in ("True", "False") else "must be True or False (exactly, capitalised)"
    if key in INT_KEYS:
        if not _is_int(value):
            return "must be a whole number of MiB" if key.endswith("_mb") else "must be a whole number"
        if key == "max_split_size_mb" and int(value) < MIN_MAX_SPLIT_MB:
            return f"must be at least {MIN_MAX_SPLIT_MB} (MiB); PyTorch rejects smaller values"
        return None
    if key in FRACTION_KEYS:
        try:
            f = float(value)
        except ValueError:
            return "must be a fraction between 0 and 1, e.g. 0.8"
        if key == "garbage_collection_threshold" and not 0.0 < f < 1.0:
            return "must be strictly between 0.0 and 1.0"
        if key == "per_process_memory_fraction" and not 0.0 < f <= 1.0:
            return "must be in (0.0, 1.0]"
        return None
    if key == "roundup_power2_divisions":
        return _check_power2_divisions(value)
    return None


def parse_alloc_conf(text: str) -> AllocConf:
    """Parse and validate; every problem becomes an AllocIssue. Never raises."""
    raw = str(text)
    options: dict[str, str] = {}
    issues: list[AllocIssue] = []
    for part in _split_top(raw):
        item = part.strip()
        if not item:
            continue
        key, sep, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            issues.append(AllocIssue("error", key or None, f"{item!r} is not option:value"))
            continue
        if key not in KNOWN_KEYS:
            hint = _closest(key)
            issues.append(AllocIssue("error", key, f"unknown option {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")))
            continue
        if key in options:
            issues.append(AllocIssue("warning", key, f"{key} is given twice; the last value ({value!r}) wins"))
        problem = _check_value(key, value)
        if problem:
            issues.append(AllocIssue("error", key, f"{key}:{value} {problem}"))
            continue
        options[key] = value
    if options.get("backend") == "cudaMallocAsync":
        for key in IGNORED_BY_ASYNC:
            if key in options:
                issues.append(AllocIssue("warning", key, f"{key} is ignored with backend:cudaMallocAsync "
                                         "(it applies to the native caching allocator only)"))
    if "garbage_collection_threshold" in options and "per_process_memory_fraction" not in options:
        issues.append(AllocIssue("warning", "garbage_collection_threshold",
                                 "garbage_collection_threshold only acts when a per-process memory fraction is set "
                                 "(torch.cuda.set_per_process_memory_fraction or per_process_memory_fraction)"))
    return AllocConf(raw, options, tuple(issues))


def _closest(key: str) -> str | None:
    import difflib

    match = difflib.get_close_matches(key.lower(), sorted(KNOWN_KEYS), n=1, cutoff=0.75)
    return match[0] if match else None
