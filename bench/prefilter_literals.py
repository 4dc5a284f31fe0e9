"""Why explain's pre-filter literals look the way they do: simulate, time and re-derive them.

explain's pre-filter (explain/prefilter.py) runs oom_patterns.EVENT_LITERALS through
ahocorasick-rs, whose packed SIMD "Teddy" searcher is fast only when few positions of the log look
like the start of a literal. Teddy (aho-corasick 1.x, src/packed/teddy) fingerprints the first
mask = min(4, shortest literal) bytes of each literal; literals go into 8 buckets (<= 32 literals) or
16 ("fat", half the bytes per step), those with the same low-nibble prefix together, the others by
list index ((N - 1) - index % N); a bucket accepts any byte whose low and high nibbles occur at that
position among its members. Every accepted position is verified in the bucket. This script models
exactly that (numpy, no timing noise), then times the real searcher.

Each literal is a piece of the fixed text that its patterns require (REQUIREMENTS): any piece of it
finds the same lines, so the piece can start where its first 4 bytes are rare in logs.

Usage: PYTHONPATH=src python bench/prefilter_literals.py [--text LOG ...] [--optimise] [--markdown]
  default      simulated candidate positions and literal hits per MiB, and the Teddy pass timed,
               for the literals before this tuning (41, Hyperscan era) and now, on the three
               bench/loggen.py styles (and any --text)
  --optimise   coordinate descent over pieces and list order on half of the text, checked on the
               other half; prints the list it finds (how EVENT_LITERALS was made)
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loggen import sample  # noqa: E402

from oomdoctor.explain import patterns as P  # noqa: E402

# The fixed text each event literal stands for: the longest text that every match of the patterns it
# serves contains (oom_patterns.LINE_PATTERNS). tests/test_prefilter_engine.py checks that there are
# as many literals in EVENT_LITERALS as requirements here, and that each requirement has a literal
# that is a piece of it.
REQUIREMENTS: dict[str, bytes] = {
    "out of memory": b"f memory", "Out of Memory": b"f Memory", "OUT OF MEMORY": b"OUT OF MEMORY",
    "shared memory": b"shared memory", "allocate memory": b"allocate memory",
    "CPU allocator": b"DefaultCPUAllocator: not enough memory", "HAMi device full": b"cuMemoryAllocate failed res=2",
    "vLLM cache blocks": b"No available memory for the cache blocks", "vLLM free memory": b"Free memory on device ",
    "TensorRT": b"Requested amount of GPU memory (", "error": b"rror", "ERROR": b"RROR", "oom-kill": b"oom-kill",
    "killed": b"illed", "SIGKILL": b"died with <Signals.SIGKILL", "driver": b"river", "NVRM": b"NVRM: ",
    "cuBLAS/cuDNN status": b"_STATUS_", "NVML assert": b"NVML_SUCCESS == ",
    "Tried to allocate": b"Tried to allocate ", "KV cache": b"KV cache",
    "batch finder": b"No executable batch size found, reached zero", "shm file": b"</torch_",
    "no space": b"No space left on device", "status -9": b"exit status -9", "bad_alloc": b"std::bad_alloc",
    "device-side assert": b"device-side assert", "misaligned": b"misaligned address",
    "launch failure": b"unspecified launch failure", "illegal": b"illegal", "invalid": b"invalid ",
    "forward compatibility": b"forward compatibility was attempted",
    "unsatisfied condition": b"unsatisfied condition: cuda>=", "CUDA device": b"CUDA-capable device",
    "vcuda": b"vcuda", "hijack": b"hijack_call.c", "cuda-control": b"cuda-control",
    "exit": b"exit", "Exit": b"Exit", "EXIT": b"EXIT", "return": b"eturn", "RETURN": b"ETURN",
    # issue 17's shapes
    "eviction": b"low on resource: memory", "batch-size finder retry": b"failed, trying batch size",
    "DSO mismatch": b"does not match DSO version", "ROCm access fault": b"Memory access fault",
    "RMM": b"rmm::", "memory leak": b"memory leak", "Colab RAM": b"using all available RAM",
    "batch size decreased": b"size decreased from",
    # session 6: recovered OOMs seen in real logs (in place of "size reduced/halved/lowered from", which no
    # collected log ever printed)
    # session 8: the literal is "tactic", for "Skipping tactic 13 due to insufficient memory" as well
    "TensorRT tactics skipped": b"tactics do not have sufficient workspace memory",
    "DeepSpeed allocator retries": b"pytorch allocator cache flushes since last step",
    "cuDNN build mismatch": b"but source was compiled", "SIGBUS": b"SIGBUS",
    "TGI capacity": b"Not enough memory to handle",
    "fabric manager": b"system not yet initialized", "torch CUDA init warning": b"CUDA initialization: ",
    "Ray object store": b"exceeds the capacity of /dev/shm", "TF cuDNN init": b"cuDNN failed to initialize",
    "ONNX Runtime arena": b"requested buffer of size", "XLA request": b"RESOURCE_EXHAUSTED: Failed to allocate request", "kernel assert": b"], thread: [", "YOLO AutoBatch": b"AutoBatch: Using batch-size", "Slurm OUT_OF_MEMORY": b"OUT_OF_MEMORY",
}

# EVENT_LITERALS before this tuning (Hyperscan, one literal per requirement, 3-byte "OOM" and "Xid",
# exit 137 found through "137").
BEFORE: tuple[bytes, ...] = (
    b"f memory", b"f Memory", b"OF MEMORY", b"OF_MEMORY", b"shared memory", b"MemoryError", b"allocate memory",
    b"enough memory", b"memory access", b"MemoryAlloc", b"available memory", b"Free memory", b"Requested amount",
    b"rror", b"RROR", b"OOM", b"oom-kill", b"illed", b"SIGKILL", b"river", b"Xid",
    b"_STATUS_", b"NVML_SUCCESS", b"Tried to allocate", b"KV cache", b"batch size found", b"</torch_",
    b"No space left", b"status -9", b"bad_alloc", b"device-side", b"misaligned", b"launch failure",
    b"illegal instruction", b"invalid", b"compatibility was attempted", b"unsatisfied condition",
    b"CUDA-capable", b"vcuda", b"hijack", b"cuda-control",
)

W_HIT = 1000.0  # a literal hit sends its line to Python (~20 us), a spurious Teddy candidate costs ~20 ns
_POP = np.array([bin(i).count("1") for i in range(1 << 16)], dtype=np.int64)


def teddy_buckets(lits: list[bytes]) -> tuple[int, int, dict[int, int]]:
    """(mask length, buckets, literal index -> bucket), as aho-corasick assigns them."""
    mask = min(4, min(map(len, lits)))
    n = 16 if len(lits) > 32 else 8
    order = sorted(range(len(lits)), key=lambda i: -len(lits[i]))  # leftmost-longest iteration order
    bucket_of: dict[int, int] = {}
    by_nibbles: dict[bytes, int] = {}
    for i in order:
        key = bytes(b & 0xF for b in lits[i][:mask])
        bucket_of[i] = by_nibbles.setdefault(key, (n - 1) - (i % n))
    return mask, n, bucket_of


def simulate(lits: list[bytes], text: bytes) -> dict[str, float]:
    """Per MiB of `text`: positions Teddy must verify, literal compares there, and literal hits."""
    mask, n, bucket_of = teddy_buckets(lits)
    table = np.zeros((mask, 256), dtype=np.uint32)
    for k in range(mask):
        lo, hi = np.zeros(16, np.uint32), np.zeros(16, np.uint32)
        for i, b in bucket_of.items():
            lo[lits[i][k] & 0xF] |= 1 << b
            hi[lits[i][k] >> 4] |= 1 << b
        table[k] = lo[np.arange(256) & 0xF] & hi[np.arange(256) >> 4]
    size = np.bincount(list(bucket_of.values()), minlength=n)
    x = np.frombuffer(text, dtype=np.uint8)
    span = len(x) - mask + 1
    cand = table[0][x[:span]]
    for k in range(1, mask):
        cand &= table[k][x[k:k + span]]
    hit = cand[cand != 0]
    compares = sum(int(np.count_nonzero(hit & (1 << b))) * int(size[b]) for b in range(n))
    per = (1 << 20) / max(1, len(text))
    return {"positions": hit.size * per, "compares": compares * per,
            "hits": sum(text.count(lit) for lit in lits) * per}


def cost(lits: list[bytes], texts: list[bytes]) -> float:
    total = 0.0
    for t in texts:
        s = simulate(lits, t)
        total += s["positions"] + 0.3 * s["compares"] + W_HIT * s["hits"]
    return total / len(texts)


def pieces(req: bytes, shortest: int = 8) -> list[bytes]:
    """Pieces of a requirement that may stand for it: from each start, up to 24 bytes, at least
    `shortest` (or all of it): short pieces find the same lines but match more text that is not."""
    if len(req) <= shortest:
        return [req]
    return [req[j:j + 24] for j in range(0, len(req) - shortest + 1)]


def optimise(train: list[bytes], seed: int = 0, passes: int = 3) -> list[bytes]:
    rnd = random.Random(seed)
    names = list(REQUIREMENTS)
    choice = {k: pieces(REQUIREMENTS[k])[0] for k in names}
    order = list(names)
    best = cost([choice[k] for k in order], train)
    for p in range(passes):
        improved = False
        for k in names:
            for piece in pieces(REQUIREMENTS[k]):
                old, choice[k] = choice[k], piece
                c = cost([choice[x] for x in order], train)
                if c < best - 1e-9:
                    best, improved = c, True
                else:
                    choice[k] = old
        for _ in range(200):  # which literals share a bucket
            i, j = rnd.randrange(len(order)), rnd.randrange(len(order))
            order[i], order[j] = order[j], order[i]
            c = cost([choice[x] for x in order], train)
            if c < best - 1e-9:
                best, improved = c, True
            else:
                order[i], order[j] = order[j], order[i]
        print(f"  pass {p}: cost {best:,.0f}", file=sys.stderr)
        if not improved:
            break
    return [choice[k] for k in order]


def time_teddy(lits: list[bytes], text: bytes, repeat: int = 9) -> float:
    """Seconds per GiB of one ahocorasick-rs pass (best of `repeat`), on `text` repeated to >= 8 MiB."""
    import ahocorasick_rs

    ac = ahocorasick_rs.BytesAhoCorasick(list(lits), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST)
    block = bytearray(text * max(1, (8 << 20) // max(1, len(text))))
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        ac.find_matches_as_indexes(block)
        best = min(best, time.perf_counter() - t)
    return best * (1 << 30) / len(block)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", nargs="*", default=[], help="more logs to simulate on (the first 2 MiB of each)")
    ap.add_argument("--optimise", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    texts = {s: sample(2 << 20, s, seed=1) for s in ("train", "hf", "json")}  # the shapes the literals were fitted on
    for f in args.text:
        with open(f, "rb") as fh:
            texts[Path(f).name] = fh.read(2 << 20)
    sets = {f"before ({len(BEFORE)})": list(BEFORE),
            f"now ({len(P.EVENT_LITERALS)} + side {len(P.SIDE_LITERALS)})": list(P.EVENT_LITERALS)}
    if args.optimise:
        train = [t[: len(t) // 2] for t in texts.values()]
        held = [t[len(t) // 2:] for t in texts.values()]
        found = optimise(train)
        print(f"optimised: train cost {cost(found, train):,.0f}, held-out {cost(found, held):,.0f}; "
              f"now: train {cost(list(P.EVENT_LITERALS), train):,.0f}, held-out {cost(list(P.EVENT_LITERALS), held):,.0f}")
        print("(", ", ".join(repr(x) for x in found), ")")
        sets[f"optimised here ({len(found)})"] = found
    rows = []
    for name, lits in sets.items():
        for tname, text in texts.items():
            s = simulate(lits, text)
            rows.append((name, tname, f"{s['positions']:,.0f}", f"{s['hits']:,.1f}", f"{time_teddy(lits, text):.3f}"))
    side = time_teddy(list(P.SIDE_LITERALS), texts["train"])
    head = ("literals", "log", "Teddy positions to verify / MiB", "literal hits / MiB", "Teddy pass, s/GiB (1 thread)")
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|---|---|---:|---:|---:|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print("  ".join(f"{h:>18}" for h in head))
        for r in rows:
            print("  ".join(f"{c:>18}" for c in r))
    print(f"\nside pass {P.SIDE_LITERALS!r} (one literal, memmem), train: {side:.3f} s/GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
