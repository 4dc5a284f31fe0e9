"""A model of PyTorch's CUDA caching allocator (native backend), replayed over a trace of mallocs/frees.

Peak *reserved* memory, not the sum of live tensors, decides an OOM, and it depends on how the allocator
rounds, packs, splits and caches blocks. The rules are those of c10/cuda/CUDACachingAllocator.cpp
(memory-tools-and-papers.md section 4.3): 512-byte rounding (or roundup_power2_divisions), a small pool
(<= 1 MiB) carved from 2 MiB segments, 20 MiB segments for 1-10 MiB requests, 2 MiB rounding above,
best fit per (pool, stream) ordered by (size, address), splitting (small pool: remainder >= 512; large:
size < max_split_size and remainder > 1 MiB), coalescing on free, max_split_size_mb /
max_non_split_rounding for oversize blocks, expandable_segments, and a per-process memory cap that
frees cached whole segments and retries before it reports an OOM.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from oomdoctor.estimate.alloc_conf import AllocConf

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_LARGE_BUFFER = 20 << 20
K_ROUND_LARGE = 2 << 20
_MAX = 1 << 62


class AllocatorOOM(Exception):
    """The request cannot be served within the cap (what the real allocator raises as OutOfMemoryError)."""

    def __init__(self, size: int, reserved: int, allocated: int):
        super().__init__(f"out of memory allocating {size} bytes (reserved {reserved}, allocated {allocated})")
        self.size, self.reserved, self.allocated = size, reserved, allocated


def round_size(size: int, conf: AllocConf) -> int:
    """CUDACachingAllocator round_size: 512 bytes, or the next power-of-2 division when configured."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    divisions = conf.divisions_for(size)
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        if size & (size - 1) == 0:
            return size
        floor = 1 << (size.bit_length() - 1)
        step = floor // divisions
        if step == 0:
            return floor << 1
        low = size & ~(step - 1)
        return size if low == size else low + step
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """Segment size cudaMalloc is asked for (get_allocation_size)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


@dataclass
class _Block:
    addr: int
    size: int
    seg: int
    small: bool
    stream: int
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class AllocatorState:
    """Current and peak figures, named as torch.cuda.memory_stats names them."""

    allocated: int = 0
    reserved: int = 0
    requested: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    num_alloc_retries: int = 0
    num_device_alloc: int = 0
    num_device_free: int = 0
    segments: dict[int, int] = field(default_factory=dict)  # segment id -> bytes


class CachingAllocatorModel:
    """Replays malloc/free like the real allocator. `limit` is set_per_process_memory_fraction's cap."""

    def __init__(self, conf: AllocConf | None = None, limit: int | None = None):
        self.conf = conf or AllocConf()
        self.limit = limit
        self.state = AllocatorState()
        self._free: dict[tuple[bool, int], list[tuple[int, int]]] = {}  # (small, stream) -> sorted (size, addr)
        self._blocks: dict[int, _Block] = {}  # addr -> block (free or allocated)
        self._next_addr = 1 << 47
        self._next_seg = 0
        self._expandable_tail: dict[tuple[bool, int], int] = {}  # (small, stream) -> segment id

    # ---------------------------------------------------------------------------------------- public
    def malloc(self, size: int, stream: int = 0) -> int:
        """Returns the block address. Raises AllocatorOOM when the cap (or nothing) can serve it."""
        conf = self.conf
        rsize = round_size(size, conf)
        small = rsize <= K_SMALL_SIZE
        block = self._get_free_block(rsize, small, stream)
        if block is None:
            block = self._alloc_block(rsize, small, stream)
            if block is None and conf.max_split_size < _MAX:
                self._release_available_cached_blocks(rsize, small, stream)
                block = self._alloc_block(rsize, small, stream)
            if block is None:
                self.state.num_alloc_retries += 1
                self.release_cached_blocks()
                block = self._alloc_block(rsize, small, stream)
            if block is None:
                raise AllocatorOOM(size, self.state.reserved, self.state.allocated)
        block = self._split_if_needed(block, rsize)
        block.allocated = True
        st = self.state
        st.allocated += block.size
        st.requested += size
        st.peak_allocated = max(st.peak_allocated, st.allocated)
        return block.addr

    def free(self, addr: int) -> None:
        block = self._blocks[addr]
        if not block.allocated:
            raise ValueError(f"double free of block {addr:#x}")
        block.allocated = False
        self.state.allocated -= block.size
        for nb in (block.prev, block.next):
            if nb is not None and not nb.allocated:
                self._remove_free(nb)
                block = self._merge(block, nb)
        self._insert_free(block)

    def release_cached_blocks(self) -> None:
        """empty_cache(): give back every segment that is entirely free (blocks neither split nor used)."""
        for key in list(self._free):
            for _size, addr in list(self._free[key]):
                b = self._blocks[addr]
                if b.prev is None and b.next is None:
                    self._release_segment(b)

    # --------------------------------------------------------------------------------------- internals
    def _get_free_block(self, size: int, small: bool, stream: int) -> _Block | None:
        pool = self._free.get((small, stream), [])
        i = bisect.bisect_left(pool, (size, -1))
        if i == len(pool):
            return None
        bsize, addr = pool[i]
        mss = self.conf.max_split_size
        if size < mss and bsize >= mss:  # no oversize block for a normal request
            return None
        if size >= mss and bsize >= size + self.conf.max_non_split_rounding:
            return None
        block = self._blocks[addr]
        self._remove_free(block)
        return block

    def _alloc_block(self, size: int, small: bool, stream: int) -> _Block | None:
        if self.conf.expandable_segments:
            return self._grow_expandable(size, small, stream)
        seg_size = allocation_size(size)
        if self.limit is not None and self.state.reserved + seg_size > self.limit:
            return None
        seg = self._new_segment(seg_size)
        # cudaMalloc hands out addresses from the top down; best fit breaks size ties by address
        self._next_addr -= seg_size + (1 << 21)
        block = _Block(self._next_addr, seg_size, seg, small, stream)
        self._blocks[block.addr] = block
        return block

    def _grow_expandable(self, size: int, small: bool, stream: int) -> _Block | None:
        """One segment per (pool, stream) that maps more pages at its end (2 MiB small, 20 MiB large)."""
        page = K_SMALL_BUFFER if small else K_LARGE_BUFFER
        key = (small, stream)
        seg = self._expandable_tail.get(key)
        tail = None
        if seg is not None:
            tail = max((b for b in self._blocks.values() if b.seg == seg), key=lambda b: b.addr)
            if tail.allocated:
                tail = None
        have = tail.size if tail is not None else 0
        grow = -(-(size - have) // page) * page
        if self.limit is not None and self.state.reserved + grow > self.limit:
            return None
        if seg is None:
            seg = self._new_segment(grow)
            self._expandable_tail[key] = seg
            self._next_addr -= 1 << 40  # a whole reserved virtual range
            block = _Block(self._next_addr, grow, seg, small, stream)
            self._blocks[block.addr] = block
            return block
        self.state.segments[seg] += grow
        self.state.reserved += grow
        self.state.peak_reserved = max(self.state.peak_reserved, self.state.reserved)
        self.state.num_device_alloc += 1
        if tail is not None:
            self._remove_free(tail)
            tail.size += grow
            return tail
        last = max((b for b in self._blocks.values() if b.seg == seg), key=lambda b: b.addr)
        block = _Block(last.addr + last.size, grow, seg, small, stream, prev=last)
        last.next = block
        self._blocks[block.addr] = block
        return block

    def _new_segment(self, seg_size: int) -> int:
        seg = self._next_seg
        self._next_seg += 1
        st = self.state
        st.segments[seg] = seg_size
        st.reserved += seg_size
        st.peak_reserved = max(st.peak_reserved, st.reserved)
        st.num_device_alloc += 1
        return seg

    def _split_if_needed(self, block: _Block, size: int) -> _Block:
        remaining = block.size - size
        if block.small or self.conf.expandable_segments:
            split = remaining >= K_MIN_BLOCK
        else:
            split = size < self.conf.max_split_size and remaining > K_SMALL_SIZE
        if not split:
            return block
        rest = _Block(block.addr + size, remaining, block.seg, block.small, block.stream,
                      prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        self._blocks[rest.addr] = rest
        self._insert_free(rest)
        return block

    def _merge(self, a: _Block, b: _Block) -> _Block:
        first, second = (a, b) if a.addr < b.addr else (b, a)
        first.size += second.size
        first.next = second.next
        if second.next is not None:
            second.next.prev = first
        del self._blocks[second.addr]
        return first

    def _insert_free(self, block: _Block) -> None:
        bisect.insort(self._free.setdefault((block.small, block.stream), []), (block.size, block.addr))

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[(block.small, block.stream)]
        i = bisect.bisect_left(pool, (block.size, block.addr))
        del pool[i]

    def _release_segment(self, block: _Block) -> None:
        self._remove_free(block)
        del self._blocks[block.addr]
        self.state.reserved -= self.state.segments.pop(block.seg)
        self.state.num_device_free += 1
        for key, seg in list(self._expandable_tail.items()):
            if seg == block.seg:
                del self._expandable_tail[key]

    def _release_available_cached_blocks(self, size: int, small: bool, stream: int) -> None:
        """With max_split_size set: free one cached oversize block >= the request, else the largest ones."""
        pool = self._free.get((small, stream), [])
        key = max(size, self.conf.max_split_size)
        i = bisect.bisect_left(pool, (key, -1))
        if i < len(pool):
            b = self._blocks[pool[i][1]]
            if b.prev is None and b.next is None:
                self._release_segment(b)
            return
        freed = 0
        for bsize, addr in sorted(pool, reverse=True):
            b = self._blocks[addr]
            if bsize < self.conf.max_split_size or freed >= size:
                break
            if b.prev is None and b.next is None:
                freed += bsize
                self._release_segment(b)


@dataclass(frozen=True)
class ReplayResult:
    peak_allocated: int
    peak_reserved: int
    oom: AllocatorOOM | None
    peak_index: int  # event index at which allocated memory peaked (for the breakdown)
    num_alloc_retries: int


def replay(events: Iterable[tuple[str, int, int, int]], conf: AllocConf | None = None,
           limit: int | None = None) -> ReplayResult:
    """Replay ('a'|'f', storage_id, size, stream) events. Stops at the first OOM (like the real step)."""
    model = CachingAllocatorModel(conf, limit)
    addr_of: dict[int, int] = {}
    peak_index, peak = -1, -1
    oom = None
    for i, (op, sid, size, stream) in enumerate(events):
        if op == "a":
            try:
                addr_of[sid] = model.malloc(size, stream)
            except AllocatorOOM as exc:
                oom = exc
                break
            if model.state.allocated > peak:
                peak, peak_index = model.state.allocated, i
        elif sid in addr_of:
            model.free(addr_of.pop(sid))
    st = model.state
    return ReplayResult(st.peak_allocated, st.peak_reserved, oom, peak_index, st.num_alloc_retries)


@dataclass(frozen=True)
class PhasePeak:
    allocated: int
    reserved: int
    index: int  # event index of the phase's allocated peak


def phase_peaks(events: list[tuple[str, int, int, int]], marks: list[tuple[int, str]],
                conf: AllocConf | None = None) -> dict[str, PhasePeak]:
    """Replay once and report, per phase mark ("step2/backward"), the highest allocated and reserved
    memory reached inside it (the reserved a phase starts with counts for it)."""
    model = CachingAllocatorModel(conf, None)
    addr_of: dict[int, int] = {}
    bounds = sorted(marks)
    out: dict[str, PhasePeak] = {}
    name, k = "setup", 0
    alloc, res, idx = 0, 0, -1
    for i, (op, sid, size, stream) in enumerate(events):
        while k < len(bounds) and bounds[k][0] <= i:
            if idx >= 0 or res:
                out[name] = _merge(out.get(name), PhasePeak(alloc, res, idx))
            name, k = bounds[k][1], k + 1
            alloc, res, idx = model.state.allocated, model.state.reserved, -1
        if op == "a":
            addr_of[sid] = model.malloc(size, stream)
            if model.state.allocated > alloc or idx < 0:
                alloc, idx = max(alloc, model.state.allocated), i
            res = max(res, model.state.reserved)
        elif sid in addr_of:
            model.free(addr_of.pop(sid))
    out[name] = _merge(out.get(name), PhasePeak(alloc, res, idx))
    return out


def replay_of(peaks: dict[str, PhasePeak]) -> ReplayResult:
    """What replay() returns for the same events (uncapped), from phase_peaks' answer: the highest
    allocated and reserved, and the first event at which allocated reached its peak."""
    top = max(v.allocated for v in peaks.values())
    index = min((v.index for v in peaks.values() if v.allocated == top and v.index >= 0), default=-1)
    return ReplayResult(top, max(v.reserved for v in peaks.values()), None, index, 0)


def _merge(a: PhasePeak | None, b: PhasePeak) -> PhasePeak:
    if a is None:
        return b
    best = a if a.allocated >= b.allocated else b
    return PhasePeak(best.allocated, max(a.reserved, b.reserved), best.index)
