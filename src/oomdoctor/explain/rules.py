"""Rules that turn one OOM-like event (plus the whole log's context) into weighted evidence.

Each rule adds `weight` to a category with an evidence sentence and a fix for this case. Weights are
log-odds-like: 3 means the text alone settles it, 1 a lead worth checking. Every rule cites the
documented behaviour it rests on. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oomdoctor.explain.events import OomEvent
from oomdoctor.explain.figures import CONTEXT_MAX, breakdown, is_gap, own_figure, unaccounted_of
from oomdoctor.explain.framework import TGI, server_kind
from oomdoctor.explain.kinds import DIRECT_MALLOC
from oomdoctor.explain.patterns import ASYNC_FORMAT
from oomdoctor.knowledge.gpus import GIB, is_slice
from oomdoctor.units import format_bytes as fb

# CUDA context + library workspaces outside PyTorch's cache: 0.3-1 GiB per process (memory-tools §5:
# ~287 MB lazy .. 667 MB eager in 1.13, >1000 MB before CUDA 11.7).
# Above this many times the request, memory cached but unallocated is no longer read as fragmentation
# first (torch_oom below).
FRAG_RATIO_MAX = 3.5
# Memory outside PyTorch's reserve and outside any listed process: another holder when it is most of the
# GPU. In the corpus's confirmed reports (dev, 13 cases) every one at 70% of the GPU or more was another
# process (7); from 37% to 65% all were the job itself (capacity or fragmentation, 6): other libraries
# in the same process, workspaces, a desktop on a 4-8 GB card. The cut lies in that gap; few cases.
HIDDEN_MOST = 0.67
FRAG_SHARE_MIN = 0.2  # ... unless the unallocated cache is at least this share of the GPU
# Split-block slack under SLACK_SHARE of the GPU while the job's tensors fill FULL_SHARE of it: even a
# perfect cache would hand back too little for the step to go on, so the job is at capacity (PyTorch's
# own hint asks about fragmentation only when the unallocated cache is "large"). Dev: 2 confirmed full
# jobs and 1 leak at 0.2-0.8% / 87-99%; the nearest fragmentation case held 1.0% / 75%.
SLACK_SHARE = 0.01
FULL_SHARE = 0.85
# (true_capacity, fragmentation) when the unallocated cache exceeds the request but is under
# FRAG_SHARE_MIN of the GPU. Was fragmentation alone at 2.2-3.0 (0.93 confident); session 7
# (2026-11-27): of the confirmed reports whose cache exceeded the request, dev had 5 fragmentation and
# 3 full jobs, and the fresh t-round reports, scored on arrival, 5 full jobs of 5 (each cured with a
# smaller batch).
NEAR_EDGE_FRAG = (2.2, 2.0)
# ... while that cache is under this size: several GiB split inside the cache (7 GiB of an 80 GB card)
# is the "large" reserved-but-unallocated memory of PyTorch's own hint, fragmentation first (review,
# session 7; dev: the one such case, 5.1 GiB, was fragmentation).
NEAR_EDGE_MAX = 4 * GIB
# PyTorch's figures for its own memory above the card's total by more than rounding: the message does not add up
# for a card alone (a walkthrough, session 28: "total capacty of 8.00 GiB ... 22.44 GiB is allocated by PyTorch" was
# read as a shortfall of 60.84 MiB). Dev, session 28: the 4 reports that show it were all jobs far too big for the card,
# spilling past it (Windows' sysmem fallback).
OVER_CARD = 1.02
# This process's memory (NVML's figure) beyond PyTorch's reserve by at least this much, and this share of the card:
# memory the process holds outside PyTorch's allocator, far more than a CUDA context and library workspaces
# (CONTEXT_MAX). A walkthrough, session 28: NVIDIA/Fuser#2600, "Process N has 39.37 GiB memory in use. Of the allocated
# memory 9.27 GiB is allocated by PyTorch": ~30 GiB that earlier tests in one pytest process never freed.
OUTSIDE_MIN = 2 * CONTEXT_MAX
OUTSIDE_SHARE = 0.25


@dataclass
class Board:
    """Scores per category for one incident."""

    scores: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, list[str]] = field(default_factory=dict)
    fixes: dict[str, list[str]] = field(default_factory=dict)
    # what a sharing layer's own lines in the log added to gpu_sharing_limit, by the layer's fact key
    # ("sharing.hami"): fact_rules takes it back when that layer's limit, in hand, allowed the job;
    # rank._merge scales it with the event's weight
    layer_hints: dict[str, float] = field(default_factory=dict)

    def add(self, cat: str, weight: float, evidence: str, fix: str | None = None) -> None:
        self.scores[cat] = self.scores.get(cat, 0.0) + weight
        ev = self.evidence.setdefault(cat, [])
        if evidence and evidence not in ev:
            ev.append(evidence)
        if fix:
            fx = self.fixes.setdefault(cat, [])
            if fix not in fx:
                fx.append(fix)


ALLOC_CONF_FIX = ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1; one growing "
                  "segment per stream, so freed pieces can be reused for a larger block)")


def torch_oom(ev: OomEvent, b: Board, env: dict[str, list[str]]) -> None:
    """The caching allocator's message (c10/cuda/CUDACachingAllocator.cpp, memory-tools §4.5)."""
    n, d = ev.numbers, ev.details
    X, T, F = n.get("requested_bytes"), n.get("total_bytes"), n.get("free_bytes")
    A, P, C = n.get("allocated_bytes"), n.get("process_bytes"), n.get("allowed_bytes")
    fig, procs, me = breakdown(n, d)
    P, R, U = fig["P"], fig["R"], fig["U"]
    if me is not None:
        held, what = (R, "reserve") if R is not None else (fig["A"], "allocated memory")  # (a cut message: A alone)
        why_me = (f"is PyTorch's {fb(held)} {what} and at most a CUDA context more" if P - held <= CONTEXT_MAX else
                  f"holds PyTorch's {fb(held)}; another process that large could not fit beside it on the {fb(T)} card")
        b.add("true_capacity", 0.0, f"Process {me} ({fb(P)}) {why_me}, so it is this job seen through a container's "
              "pid namespace")
    others = sum(p["bytes"] for p in procs)
    why_x = f"requested {fb(X)}" if X is not None else "the request"
    fits_after_defrag = X is not None and U is not None and U >= X

    if X is not None and T is not None and X > T:
        b.add("true_capacity", 4.0, f"one allocation of {fb(X)} is larger than the whole GPU ({fb(T)})",
              "the tensor itself must shrink: check the shape that produced it (batch x sequence x hidden, "
              "an accidental outer product or broadcast), or shard it across GPUs")
        return
    held = own_figure(P, R, A, U, T)  # what this job holds, for the words (the weights keep own_share below)
    spilled = _over_card(A, R, T)
    if spilled is not None:
        b.add("true_capacity", 0.0, f"the message's figures do not add up for one card: PyTorch reports {fb(spilled)} "
              f"of its own on a GPU of {fb(T)} in total. On Windows the driver lets a job spill past the card into "
              "shared system memory (WDDM's \"shared GPU memory\", NVIDIA's sysmem fallback), slowly, until that runs "
              f"out too: the job needs about {spilled / T:.1f} times this card")
        held = None
    cap_fix = _spilled_fix(X, spilled, T) if spilled is not None and X is not None else _capacity_fix(X, F, U, T)
    if P is not None and R is not None and T and P <= T and P - R >= max(OUTSIDE_MIN, OUTSIDE_SHARE * T):
        outside = P - R
        b.add("true_capacity", 0.0, f"this process holds {fb(P)} of the GPU but PyTorch's allocator only {fb(R)} of "
              f"it: about {fb(outside)} is memory outside PyTorch's cache (other libraries' allocations, CUDA graphs, "
              "NCCL buffers, extra CUDA contexts, or objects of earlier tests or steps that were never freed)")
        b.add("leak_in_code", 1.0, f"about {fb(outside)} of this process's memory is outside PyTorch's allocator: "
              "memory kept from earlier work in the same process (tests run one after another in one pytest process, "
              "models or CUDA graphs made per step and never released) builds up there",
              "find what holds it: compare torch.cuda.memory_reserved() with the process's nvidia-smi figure as the "
              "job goes on; free each test's or step's objects (del, gc.collect(), torch.cuda.empty_cache()), or "
              "run the tests in separate processes")
    if C is not None and ev.kind == "mps_oom":
        # Apple's MPS allocator: "max allowed" is PYTORCH_MPS_HIGH_WATERMARK_RATIO times the GPU's recommended working
        # set of the machine's unified memory, not a CUDA fraction (a walkthrough, session 27, was told of
        # torch.cuda.set_per_process_memory_fraction and that PyTorch held 0 bytes beside "MPS allocated: 17.85 GB")
        held = A if A is not None else 0
        b.add("true_capacity", 3.0, f"the MPS allocator's limit is {fb(C)} (PYTORCH_MPS_HIGH_WATERMARK_RATIO of the "
              f"unified memory macOS lets the GPU use); PyTorch holds {fb(held)} and {why_x}",
              "make the step smaller to fit under the limit (a smaller batch or sequence length, activation "
              "checkpointing, float16); PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 lifts the limit, at the risk of the whole "
              "system running out of memory (PyTorch's own warning)")
        return
    if C is not None:
        # "X allowed" appears only when set_per_process_memory_fraction is active; the allocator then
        # refuses to grow past it even when the device has free memory (CUDACachingAllocator.cpp).
        used = R if R is not None else P if P is not None else (A or 0)
        need = used + (X or 0)
        if fits_after_defrag and U >= 128 * 1024**2:  # a few MiB of split-block slack is not the cause
            b.add("fragmentation", 2.5, f"{fb(U)} is reserved but unallocated, more than the {why_x}, "
                  f"under a {fb(C)} per-process cap", ALLOC_CONF_FIX)
        else:
            now = f" (now {C / T:.4f} of {fb(T)} = {fb(C)}; this allocation needs {fb(need)})" if T else ""
            frac = f"a fraction above {min(1.0, need / T):.4f}" if T else "a larger fraction"
            # a per-process fraction is a sharing limit (docs/contracts.md): it, not the GPU, refused
            # when the device still had room for the request; with the device full too, the job is big
            cat = "gpu_sharing_limit" if F is not None and X is not None and F >= X else "true_capacity"
            # TGI sets the fraction from its own flag (a walkthrough, session 28: its warmup was told PyTorch's call)
            setter = ("TGI's --cuda-memory-fraction" if server_kind(ev.kind, ev.text) == TGI
                      else "torch.cuda.set_per_process_memory_fraction")
            b.add(cat, 3.0, f"{fb(C)} allowed by {setter}; "
                  f"PyTorch holds {fb(used)} and {why_x}" + (f", while the GPU still has {fb(F)} free" if F else ""),
                  f"the cap, not the GPU, is the limit{now}: this allocation alone needs {frac} "
                  f"({setter}), with headroom for the rest of the step; "
                  "or shrink the batch to fit the cap")
        return
    own = R if R is not None else P
    own_share = own / T if own is not None and T else None
    # A message cut before its reserve (or one that prints none) still says what this job's tensors hold: a
    # floor of its own share, enough to tell a job that could not have filled the GPU (session 11, dev
    # e1_transformerlm_21: 0.94 GiB allocated of 11.17 GiB, every rank's torch.load on GPU 0)
    # (with the request: what it held plus what it asked for; a small holding asking for most of the card is
    # still the job's own need: review, session 11)
    least_share = own_share if own_share is not None else ((A + (X or 0)) / T if A is not None and T else None)
    if (U is not None and X is not None and U >= X and U >= 128 * 1024**2 and U > FRAG_RATIO_MAX * X
            and T and U < FRAG_SHARE_MIN * T):
        # Many times the request cached and still no block for it: the cache is mostly where this
        # request cannot go (the small-block pool, other streams' segments), so the job's own footprint
        # is what filled the GPU. In the corpus's confirmed reports (dev) no fragmentation case had the
        # cache above 3.1 x the request while it was under a fifth of the GPU; leaks and full jobs did.
        # A cache that is a large share of the GPU is fragmentation whatever the ratio.
        b.add("fragmentation", 1.4, f"{fb(U)} is cached by PyTorch but unused, {U / X:.0f} times the {why_x}, yet "
              "none of it could serve the request: that cache is split into pieces each too small for it (or kept for "
              "small tensors and other streams)", _frag_fix(X, d))
        b.add("true_capacity", 1.6, f"the {why_x} is small next to what is cached: the GPU is full of this job's "
              "own memory", cap_fix)
    elif (U is not None and X is not None and U >= X and T and A is not None and U < SLACK_SHARE * T
          and A >= FULL_SHARE * T):
        b.add("true_capacity", 2.4, f"this job's tensors hold {fb(A)} of {fb(T)}; the {fb(U)} cached but "
              f"unallocated is under {SLACK_SHARE:.0%} of the GPU: even unsplit it would not let the step go on",
              cap_fix)
        b.add("fragmentation", 1.2, f"{fb(U)} is reserved by PyTorch but unallocated, more than the {why_x}: "
              "a little free memory is split inside PyTorch's cache", _frag_fix(X, d))
    elif U is not None and X is not None and U >= X and U >= 128 * 1024**2:
        # On OOM the allocator frees every unsplit cached block and retries before raising
        # (memory-tools §4.3), so what is still reserved-but-unallocated sits in split segments.
        if T and U < FRAG_SHARE_MIN * T and U < NEAR_EDGE_MAX:
            # A split cache under a fifth of the GPU is what any job at its edge leaves: the threads
            # mostly cured these with a smaller batch (NEAR_EDGE_FRAG), so neither reading leads on
            # the numbers; the words around the message (expandable_segments helped, batch size) decide.
            b.add("true_capacity", NEAR_EDGE_FRAG[0], f"{fb(U)} cached but unallocated is under "
                  f"{FRAG_SHARE_MIN:.0%} of the GPU: the job is at its edge, and a smaller step is the usual cure",
                  cap_fix)
            b.add("fragmentation", NEAR_EDGE_FRAG[1], f"{fb(U)} is reserved by PyTorch but unallocated, more than "
                  f"the {why_x}: free memory exists inside PyTorch's cache but not in one block", _frag_fix(X, d))
        else:
            b.add("fragmentation", 3.0, f"{fb(U)} is reserved by PyTorch but unallocated, more than the {why_x}: "
                  "free memory exists inside PyTorch's cache but not in one block", _frag_fix(X, d))
    elif U is not None and X is not None and U >= 0.5 * X and U >= 512 * 1024**2 and (F is None or U + F >= X):
        b.add("fragmentation", 2.0, f"{fb(U)} reserved-unallocated" + (f" plus {fb(F)} free" if F is not None else "")
              + f" is close to the {why_x}: the cache is fragmented", _frag_fix(X, d))
        b.add("true_capacity", 1.2, "the job uses nearly all of the memory it can get", cap_fix)
    elif X is None:
        b.add("true_capacity", 1.0, "the caching allocator ran out of memory (the message gives no numbers)",
              _capacity_fix(None, F, None, T))
    else:
        # True capacity means this job's own footprint is what fills the GPU (docs/contracts.md §2).
        w = 2.2 if least_share is None or least_share >= 0.5 else 0.8
        holds = f"; this job holds {fb(held)} of {fb(T)}" if held is not None and T else ""
        b.add("true_capacity", w, _shortfall(why_x, X, F, U) + holds, cap_fix)
        if (U is None and ev.kind == "torch_oom" and (own_share is None or own_share >= 0.5)
                and d.get("format") != ASYNC_FORMAT):  # not for cudaMallocAsync: its pool is the driver's
            # The message stops before (or predates) the cache's figure: what PyTorch holds reserved
            # but unallocated is unknown, so free memory in its cache, split, is not ruled out.
            b.add("fragmentation", 1.0, "the message gives no reserved-but-unallocated figure, so free "
                  "memory split inside PyTorch's cache (fragmentation) is not ruled out", _frag_fix(X, d))
    if T is not None and F is not None and others and others >= 0.1 * T:
        w = 3.4 if X is None or F + others >= X else 1.2
        top = ", ".join(f"pid {p['pid']} {fb(p['bytes'])}" for p in sorted(procs, key=lambda p: -p["bytes"])[:3])
        b.add("other_process", w, f"other processes hold {fb(others)} of {fb(T)} ({top})",
              "free the GPU: stop or move those processes (nvidia-smi --query-compute-apps=pid,used_memory "
              "--format=csv), or pick another GPU with CUDA_VISIBLE_DEVICES")
    hidden = unaccounted_of(n, d)  # the scanner's reading too (figures.gap_key)
    if hidden is not None:
        if is_gap(hidden, T):
            # Freeing that memory would have made room for the request and it is a large share of the card (not
            # a desktop's display memory): a little more than the capacity reading (review of session 15). Not
            # the listed branch's 3.4: an MPS pinned limit leaves the same figures (H200 runs of session 15,
            # tests/test_explain_here_s15.py), and 2.6 or more lowered those answers below 0.85. One dev report
            # reaches this branch (af2_qwen7b_vllm_a100_otherproc, first either way): chosen, not fitted.
            room = X is not None and F + hidden >= X and hidden >= 0.25 * T
            b.add("other_process", 2.4 if room else 2.0, f"{fb(hidden)} of the GPU is used by memory this job does not own and "
                  "that no listed process explains (another container or a time-sliced co-tenant)",
                  "find the co-tenant from the node (nvidia-smi on the host); time-slicing gives no memory isolation")
            # Under an MPS pinned-memory limit the client's free figure is what its limit leaves, while the
            # total stays the card's: the same shape with no co-tenant at all (H200, session 15:
            # validation/explain_here_gpu2.py, mps_pinned_*; those cases then drove this line). Not for a gap
            # under a quarter of the card: a desktop's display memory, which PyTorch never lists (review).
            if hidden >= 0.25 * T:
                b.add("gpu_sharing_limit", 1.2, "or a sharing layer's limit: under an MPS pinned-memory limit the "
                      "free figure is what the limit leaves, while the total stays the whole card's",
                      "look for CUDA_MPS_PINNED_DEVICE_MEM_LIMIT / an MPS daemon (oomdoctor explain --here LOG)")
    elif T is not None and F is not None and R is not None and not procs:
        hidden = T - F - R
        if hidden >= max(CONTEXT_MAX, 0.15 * T):
            most = hidden >= HIDDEN_MOST * T
            b.add("other_process", (3.0 if (X is None or hidden >= X) and R < 0.5 * T else 1.8) if most else 1.2,
                  f"{fb(hidden)} of the GPU is outside PyTorch's {fb(R)} reserve; a CUDA "
                  "context takes 0.3-1 GiB, the rest belongs to other processes",
                  "check nvidia-smi for other processes on this GPU before the job starts")
            if not most:
                b.add("true_capacity", 1.0, "memory outside PyTorch's reserve is often the job's own too (other "
                      "libraries in the process, cuDNN/cuBLAS workspaces, a desktop on a small card)",
                      cap_fix)
    if X is not None and F is not None and F >= X + 64 * 1024**2 and C is None:
        # cudaMalloc failed although cudaMemGetInfo reported room: a limit below the device's
        # (MPS pinned memory limit, a hooked sharing layer) or a driver-side failure (env-facts §4).
        # A tenth of the GPU free and ten times the request: the device has plenty of room, so a cap
        # refused (set_per_process_memory_fraction printed without its "allowed" figure, a sharing layer).
        roomy = T is not None and F >= 0.1 * T and F >= 10 * X
        b.add("gpu_sharing_limit", 2.4 if roomy else 1.4, f"{fb(F)} was reported free yet {fb(X)} could not be allocated: "
              "a limit below the device's free memory (a per-process fraction, MPS, HAMi/vGPU) refuses it",
              "compare the limit of the sharing layer with the job's need (`oomdoctor doctor` on that machine, or "
              "`oomdoctor doctor --bundle` of its bundle, shows it)")
        b.add("context_or_driver", 0.8, "the driver refused an allocation that the free figure says fits")
    _slice_evidence(T, env, b)
    if env.get("hami") or env.get("vcuda"):
        _env_hints(b, env)


def unaccounted(ev: OomEvent) -> int | None:
    """What of the failing GPU the message's own breakdown leaves unexplained (figures.unaccounted_of)."""
    return unaccounted_of(ev.numbers, ev.details)


def _over_card(a: int | None, r: int | None, t: int | None) -> int | None:
    """PyTorch's own figure (reserved, else allocated) where it is above the card's total (OVER_CARD), else None."""
    own = max((v for v in (a, r) if v is not None), default=None)
    return own if own is not None and t and own > OVER_CARD * t else None


def _shortfall(why_x: str, x: int, f: int | None, u: int | None) -> str:
    """What the free figure and the cache say of the request, as the message's own numbers allow (a walkthrough,
    session 28: "requested 2.26 GiB but only 3.03 GiB is free ... it would not fit", and "would not fit" where free
    memory and the cache together covered the request)."""
    if f is None:
        return why_x + (f" and {fb(u)} is cached unallocated" if u is not None else "")
    if f >= x:
        return (f"{why_x} while {fb(f)} is reported free, no less than the request: by the message's own figures it "
                "fits, so a full card is not what these numbers show")
    if u is None:
        return f"{why_x} but only {fb(f)} is free"
    if f + u >= x:
        return (f"{why_x} but only {fb(f)} is free; with the {fb(u)} cached unallocated it would fit, but that cache "
                "is split into pieces that cannot take it")
    return f"{why_x} but only {fb(f)} is free and {fb(u)} is cached unallocated: even without fragmentation it would not fit"


def _spilled_fix(x: int, spilled: int, t: int) -> str:
    """The fix where PyTorch holds more than the card (_over_card): no shortfall of a few MiB to quote."""
    return (f"the job needs far more than this {fb(t)} GPU (it already holds {fb(spilled)}, past the card, and asked "
            f"for {fb(x)} more): lower the batch size or the input size, enable activation checkpointing, use bf16 "
            "autocast, or find the largest batch that fits with `oomdoctor estimate WORKLOAD.py --max-batch "
            "--memory-limit SIZE`; on Windows, setting NVIDIA's \"CUDA - Sysmem Fallback Policy\" to \"Prefer No "
            "Sysmem Fallback\" makes such a job fail at the card's size at once instead of slowly")


# The least max_split_size_mb every PyTorch takes: c10/cuda/CUDAAllocatorConfig.cpp (parseMaxSplitSize) checked
# `val > kLargeBuffer / kUnitMB` ("max_split_size_mb too small, must be > 20", kLargeBuffer being 20 MiB) until the
# check moved to c10/core/AllocatorConfig.cpp as `>= 20` (2.13 takes 20). The fix is given for a PyTorch older than
# 2.1 (_frag_fix), which refuses 20 (a walkthrough, session 28, was told max_split_size_mb:20 for a 20 MiB request).
MIN_SPLIT_MB = 21
MAX_SPLIT_MB = 1024


def _frag_fix(x: int, d: dict) -> str:
    if d.get("format") in ("2.1+", "unknown"):
        return ALLOC_CONF_FIX
    if d.get("format") == "1.0-1.3":
        return ("upgrade PyTorch first: this message's wording is of PyTorch 1.3 or older, which has no allocator "
                "settings (PYTORCH_CUDA_ALLOC_CONF came in 2021); then " + ALLOC_CONF_FIX)
    return (f"export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{_split_mb(x)} (this PyTorch predates "
            "expandable_segments, 2.1; stops cached blocks larger than that being split)")


def _split_mb(x: int) -> int:
    """The largest power of two (MiB) not above the request, within MIN_SPLIT_MB..MAX_SPLIT_MB."""
    mb = max(1, x // 1024**2)
    p = 1
    while p * 2 <= mb:
        p *= 2
    return max(MIN_SPLIT_MB, min(p, MAX_SPLIT_MB))


def _capacity_fix(x: int | None, f: int | None, u: int | None, t: int | None) -> str:
    short = (x or 0) - (f or 0) - (u or 0)
    if f is None and x:  # no free figure (CuPy, JAX): the request itself, not a shortfall
        msg = f"one allocation of {fb(x)} could not be served"
    else:
        msg = f"the step needs at least {fb(short)} more than it can get" if short > 0 else "the step needs more"
    return (msg + (f" on this {fb(t)} GPU" if t else "") + ": lower the batch size or sequence length, enable "
            "activation checkpointing, use bf16 autocast, or find the largest batch that fits with "
            "`oomdoctor estimate WORKLOAD.py --max-batch --memory-limit SIZE`")


def _slice_evidence(total: int | None, env: dict[str, list[str]], b: Board) -> None:
    if total is None:
        return
    for name in env.get("gpu_name", []):
        phys = is_slice(total, name)
        if phys:
            b.add("gpu_sharing_limit", 1.6, f"CUDA reports {fb(total)} in total but the log names a {name} "
                  f"({phys:g} GB physical): the job sees a slice (MIG, vGPU, HAMi or gpu-manager limit)",
                  "ask the sharing layer for a larger slice (e.g. nvidia.com/gpumem, tencent.com/vcuda-memory, "
                  "a bigger MIG profile) or a whole GPU")
            return
    if env.get("mig"):
        # Inside a MIG instance cudaMemGetInfo/torch see only the instance (env-facts §4): the slice's
        # size is the limit that was reached, whatever the rest of the GPU holds.
        b.add("gpu_sharing_limit", 2.4, f"the log shows a MIG instance ({env['mig'][0]}): the OOM is the slice's "
              "limit, not the whole GPU's", "use a larger MIG profile (or a whole GPU) for this job, or shrink "
              "the job to the slice")


def driver_oom(ev: OomEvent, b: Board, env: dict[str, list[str]]) -> None:
    """`CUDA error: out of memory` = cudaErrorMemoryAllocation from the driver/runtime, raised where the
    caching allocator is not involved (it would print 'CUDA out of memory. Tried to allocate'): context
    creation, the first allocation, cuBLAS/cuDNN handles, pinned memory [CUDAERR][OOMTXT]."""
    x, t = ev.numbers.get("requested_bytes"), ev.numbers.get("total_bytes") or _reported_total(env)
    if x and t and x > t:
        # one request larger than the card: the shape or the configuration asks too much, whatever else holds the
        # GPU (a walkthrough, session 28: 1.1 TiB asked of an 80 GB card through cuMemAllocAsync read as the driver's)
        b.add("true_capacity", 4.0, f"one allocation of {fb(x)} is larger than the whole GPU ({fb(t)}): the shape "
              "or the configuration asks too much", "the array itself must shrink: check the shape that produced it "
              "(batch x sequence x hidden, a configuration value such as a maximum length or a number of samples), or "
              "shard it across GPUs")
        return
    site = ev.details.get("call_site")
    where = f" while {site}" if site else ""
    # Where this rule fires, context_or_driver was the label in only 12 of 53 dev reports and 7 of 23 silver items
    # (other_process 14 / 5, true_capacity 18 / 7; session 20's rule-precision audit). Not lowered: at 1.6 / 1.2 the
    # quoted PyTorch message of the seed case (tests/fixtures/seeds/000) became its primary event, and giving the
    # words the vague weight instead (adding the driver OOM to rank.VAGUE_KINDS, not done) let them outweigh NVML's
    # process list (tests/test_explain.py's hog with a bundle). Session 21: its words at a middle weight (1.5 / 2.5)
    # gained too little out of sample (+0 / +3 of the +8 asked): not done either.
    b.add("context_or_driver", 2.6, f"'CUDA error: out of memory' is the driver's error{where}, not the "
          "caching allocator's (no 'Tried to allocate' numbers): the CUDA context or a first allocation failed",
          "run `oomdoctor doctor --probe` on that node (repeated context creation, other processes, driver "
          "and kernel versions, the sharing layer)")
    if site and ("context" in site or ".to()" in site or "handle" in site or "NCCL" in site):
        b.add("context_or_driver", 0.6, "at that point the job has allocated little or nothing itself, so the "
              "GPU was probably not full because of this job")
    b.add("other_process", 1.8, "a context cannot be created when other processes leave less than a context "
          "(~0.3-1 GiB) free", "look at `nvidia-smi` on the node for processes (or containers) already on this GPU")
    if site and "context" in site:
        # Out of memory while the context itself is made: the job holds nothing yet, so the memory is
        # someone else's. In the corpus's confirmed reports (dev) every such case was another process
        # (a second TensorFlow preallocating, TensorBoard beside training, a co-tenant); a driver that
        # does not fit fails context creation with its own codes (driver_error).
        b.add("other_process", 1.6, "the context itself could not get its few hundred MiB: another process "
              "(often a TensorFlow one, which takes nearly all GPU memory by default) filled the GPU first")
    procs = [v.split() for v in env.get("smi_process", []) if len(v.split()) == 2]
    held = [(int(pid), int(mib) * 1024**2) for pid, mib in procs if mib.isdigit() and pid.isdigit()]
    big = [(pid, used) for pid, used in held if used >= GIB]
    if big and (site is None or "context" in site or ".to()" in site or "handle" in site):
        # Before its first allocation the failing process holds nothing: the listed memory is others'.
        top = ", ".join(f"pid {pid} {fb(used)}" for pid, used in sorted(big, key=lambda x: -x[1])[:3])
        b.add("other_process", 2.4, f"nvidia-smi in the log shows other processes holding GPU memory ({top})",
              "stop or move those processes, or run on a free GPU (CUDA_VISIBLE_DEVICES)")
    for v in env.get("smi_used_free", [])[:1]:
        used, free = (int(x) for x in v.split())
        if free * 1024**2 < GIB and used > 4 * free:
            b.add("other_process", 0.8, f"nvidia-smi in the log shows {free} MiB free of {used + free} MiB")
    if site is None:
        b.add("true_capacity", 0.9, "raised mid-run, the driver can also fail a library workspace when the "
              "caching allocator has taken the rest", _capacity_fix(None, None, None, None))
    if "ggml" in ev.text or "llama" in ev.text.lower():
        # ggml/llama.cpp call cudaMalloc directly (no caching allocator): "CUDA error 2 ... out of memory"
        # is their ordinary OOM, the model + context (KV cache) not fitting.
        if env.get("wsl"):
            b.add("context_or_driver", 1.2, "under WSL2, ggml's pinned host buffers fail first (WSL limits "
                  "pinned memory)", "GGML_CUDA_NO_PINNED=1, or more memory for WSL in .wslconfig")
        else:
            b.add("true_capacity", 2.2, "ggml (llama.cpp/ollama) allocates with cudaMalloc directly: this is its "
                  "ordinary out-of-memory, the weights plus the context's KV cache do not fit",
                  "offload fewer layers (-ngl / num_gpu), a smaller context (-c / num_ctx) or a smaller quantisation")
    elif any(m in ev.text for m in DIRECT_MALLOC):
        # Caffe's SyncedMemory and tiny-cuda-nn's GPUMemory call cudaMalloc themselves, for every blob:
        # their "out of memory" is the net not fitting, as for ggml (dev: n3_caffe_3744, n2_dsod_11,
        # m4_instantngpbatch_3, all fixed by a smaller batch, net or resolution).
        b.add("true_capacity", 2.2, "this framework allocates with cudaMalloc directly (no caching allocator): "
              "its out-of-memory is the model, batch and activations not fitting",
              _capacity_fix(None, None, None, None))
    elif env.get("wsl"):
        b.add("context_or_driver", 0.8, "the log is from WSL2, whose driver limits pinned and total memory",
              "raise memory in .wslconfig; try pin_memory=False")
    if site and "pinned" in site:
        b.add("context_or_driver", 0.5, "pinned host memory is limited on WSL and by locked-memory limits",
              "try pin_memory=False in the DataLoader to confirm")
    _env_hints(b, env)


def _reported_total(env: dict[str, list[str]]) -> int | None:
    """The card's total from the async allocator's "Free memory/Total memory: F/T" line (ENV_PATTERNS cuda_free_total)."""
    for v in env.get("cuda_free_total", [])[:1]:
        return int(v.split("/")[1])
    return None


# One fix for HAMi's limit, whether its refusal or only its start-up lines were read: two wordings of it were printed
# one under the other (a walkthrough, session 27)
HAMI_FIX = ("request more nvidia.com/gpumem (or gpumem-percentage) for the pod; setting CUDA_DISABLE_CONTROL=true once "
            "confirms the limit is the cause")


def _env_hints(b: Board, env: dict[str, list[str]]) -> None:
    if env.get("hami"):
        # its own lines ("[HAMI-core Msg ...]: Initializing"): the layer is there, its limit unknown
        b.layer_hints["sharing.hami"] = b.layer_hints.get("sharing.hami", 0.0) + 1.4
        b.add("gpu_sharing_limit", 1.4, "the log shows HAMi (CUDA_DEVICE_MEMORY_LIMIT / HAMI-core): its hook "
              "enforces a per-container memory limit", HAMI_FIX)
    if env.get("vcuda"):
        b.add("gpu_sharing_limit", 1.0, "the log mentions tkestack gpu-manager / vcuda, which hooks CUDA to "
              "enforce tencent.com/vcuda-memory", "raise tencent.com/vcuda-memory, or test once without the sharing layer")
        b.add("context_or_driver", 0.3, "vcuda supports CUDA <= 11.5.1 only")
    for k in env.get("kernel_release", []):
        if k.startswith("3.10"):
            b.add("context_or_driver", 0.4, f"host kernel {k} (EL7): CUDA 12.4 was the last toolkit to list it "
                  "and drivers >= 560 refuse kernels < 4.15",
                  "upgrade the host kernel (>= 4.18) or use the driver branch validated for it")
            break
