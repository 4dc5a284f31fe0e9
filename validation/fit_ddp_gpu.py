"""fit.AutoMicroBatch(ddp=model) on two GPUs with real OOMs (written for validation before its first run).

Run without torchrun: the driver launches one torchrun job (2 processes, NCCL) per case and prints a table.
    PYTHONPATH=src python3 validation/fit_ddp_gpu.py OUTDIR

Model: GPT-NeoX (transformers config, random init, float32), a family fit was not tuned on. Per rank batch 32 of
seq 512, SGD without momentum, 4 steps, each rank its own data. Cases:
  ref      plain DDP, unsplit; also measures the peak memory of a step at 32 and at 16 samples (first, no update)
  cap0     fit ddp=, rank 0 capped (set_per_process_memory_fraction) between those peaks, rank 1 not
  capboth  fit ddp=, both capped
  floor0   as cap0 with min_micro_batch=32: rank 0 cannot split
  floor2   as capboth with min_micro_batch=32
  timing   ref and fit ddp= without any cap, 10 steps each in one job, the last 8 timed
  ref2     plain DDP again (the noise floor: deterministic algorithms on, so 0 unless a kernel is not)
  fit      fit ddp= without any cap (the pieces' path and the hand-made average, nothing split)
  noset    as cap0, but the script never calls torch.cuda.set_device (model.to(rank), DDP(device_ids=[rank])):
           the exchange must use DDP's device, not the current one (a review found a hang there)
  optoom0  (added in session 25, before its run) fit ddp= with Adam (lr 1e-4); at rank 0's first update a step
           pre-hook empties the cache and caps rank 0 at what it holds + 32 MiB: Adam's state cannot be allocated,
           a real OOM in one rank's update. Every rank must raise at the first step, rank 1 with rank 0's message.
  optoom0b (session 25, written after optoom0 split in forward instead: the cap left Adam's state room inside the
           segments still holding gradients) Adam, rank 0 capped at 4.0 GiB from the start: its forward splits
           until a piece fits, then Adam's 2.26 GiB of state cannot be allocated.
  optoom0c (session 25, after optoom0b stopped at its floor in forward) Adam; at rank 0's first update a pre-hook
           caps rank 0 at what it reserves, fills the free space inside its segments with ballast, then allows 32
           MiB more: Adam's state cannot be allocated, a small allocation (the peer broadcast's) can.
Added after the first run (the review, same session): ref2, fit, noset, deterministic algorithms, per-rank files.
Select cases: validation/fit_ddp_gpu.py OUTDIR [CASE ...] (cap and floor cases need ref first).
FIT_DDP_NPROC=4 runs every job on 4 GPUs (session 25); rank 0 is still the only capped rank in the *0 cases.
Pass (pre-registered in the session notes): cap0/capboth finish, diff/update vs ref < 1e-3, rank 1 of cap0 never
splits; floor0/floor2 every rank raises FitOutOfMemoryError well before the NCCL timeout (120 s), job exits.
"""

from __future__ import annotations

import datetime
import json
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import subprocess
import sys
import time
from pathlib import Path

SEQ, BATCH, STEPS = 512, 32, 4
WEIGHTS = Path("/tmp/fit_ddp_gpu_weights")
NPROC = int(os.environ.get("FIT_DDP_NPROC", "2"))  # processes (GPUs) per job; session 25 added 4
BALLAST: list = []  # optoom0c: what fills rank 0's segments during the first update


def build():
    import torch
    import transformers
    cfg = transformers.GPTNeoXConfig(vocab_size=50304, hidden_size=1024, intermediate_size=4096,
                                     num_hidden_layers=16, num_attention_heads=16, max_position_embeddings=SEQ,
                                     use_cache=False)
    torch.manual_seed(0)
    return transformers.GPTNeoXForCausalLM(cfg)


def data(rank: int, steps: int):
    import torch
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randint(0, 50304, (BATCH, SEQ), generator=g) for _ in range(steps)]


def flat(model):
    import torch
    return torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])


def worker(case: str, out: Path) -> None:
    import torch
    import torch.distributed as dist

    from oomdoctor import fit
    rank = int(os.environ["RANK"])
    if case == "noset":
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    else:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", rank))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    inner = build().to(f"cuda:{rank}")
    init = flat(inner)
    model = torch.nn.parallel.DistributedDataParallel(inner, device_ids=[rank])
    if case == "optoom0b":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        if rank == 0:
            torch.cuda.set_per_process_memory_fraction(4 * 2**30 / torch.cuda.get_device_properties(rank).total_memory,
                                                       rank)
    elif case == "optoom0c":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        if rank == 0:
            total = torch.cuda.get_device_properties(rank).total_memory

            def fill(o, a, k):
                if o.state:
                    return
                torch.cuda.empty_cache()
                torch.cuda.set_per_process_memory_fraction(torch.cuda.memory_reserved(rank) / total, rank)
                for mib in (256, 64, 16, 4, 2):
                    try:
                        while True:
                            BALLAST.append(torch.empty(mib * 2**20, dtype=torch.uint8, device=f"cuda:{rank}"))
                    except torch.OutOfMemoryError:
                        pass
                torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved(rank) + 32 * 2**20) / total,
                                                           rank)
            opt.register_step_pre_hook(fill)
    elif case == "optoom0":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        if rank == 0:
            def cap(o, a, k):
                if not o.state:  # the first update: Adam's state is still to be allocated
                    torch.cuda.empty_cache()
                    limit = torch.cuda.memory_reserved(rank) + 32 * 2**20
                    torch.cuda.set_per_process_memory_fraction(
                        limit / torch.cuda.get_device_properties(rank).total_memory, rank)
            opt.register_step_pre_hook(cap)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
    res: dict = {"rank": rank}

    def loss_fn(ids):
        ids = ids.to(f"cuda:{rank}", non_blocking=True)
        return model(input_ids=ids, labels=ids).loss

    if case == "ref":
        peaks = {}
        for n in (BATCH, BATCH // 2):  # the peak of one step at n samples, then nothing kept
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            with model.no_sync():
                loss_fn(data(rank, 1)[0][:n]).backward()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            peaks[n] = torch.cuda.max_memory_allocated()
        res["peaks"] = peaks
    capped = case in ("capboth", "floor2") or (case in ("cap0", "floor0", "noset") and rank == 0)
    if capped:
        peaks = json.loads((out / "peaks.json").read_text())
        total = torch.cuda.get_device_properties(rank).total_memory
        limit = (peaks[str(BATCH)] + peaks[str(BATCH // 2)]) / 2
        torch.cuda.set_per_process_memory_fraction(limit / total, rank)
        res["set_device_called"] = case != "noset"
        res["cap_gib"] = limit / 2**30
    runners = {"fit": fit.AutoMicroBatch(opt, ddp=model, min_micro_batch=BATCH if case.startswith("floor") else 1)}
    times: dict[str, list[float]] = {}
    plan = [("ref", STEPS)] if case in ("ref", "ref2") else [("fit", STEPS)]
    if case == "timing":
        plan = [("ref", 10), ("fit", 10)]
    t_start = time.time()
    try:
        for how, steps in plan:
            for ids in data(rank, steps):
                torch.cuda.synchronize(rank)
                t0 = time.perf_counter()
                if how == "ref":
                    opt.zero_grad(set_to_none=True)
                    loss_fn(ids).backward()
                    opt.step()
                else:
                    runners["fit"].step(loss_fn, ids)
                torch.cuda.synchronize(rank)
                times.setdefault(how, []).append(time.perf_counter() - t0)
    except (fit.FitOutOfMemoryError, fit.FitPeerError) as exc:
        res["error"] = {"type": type(exc).__name__, "phase": getattr(exc, "phase", None),
                        "micro_batch": getattr(exc, "micro_batch", None), "text": str(exc)[:600],
                        "after_s": round(time.time() - t_start, 1), "steps_done": runners["fit"].steps}
    res["ballast_mib"] = sum(b.numel() for b in BALLAST) / 2**20
    BALLAST.clear()
    res["events"] = [{k: v for k, v in e.items() if k != "message"} for e in runners["fit"].events]
    res["times"] = times
    res["peak_gib"] = torch.cuda.max_memory_allocated(rank) / 2**30
    w = flat(inner)
    WEIGHTS.mkdir(exist_ok=True)
    torch.save({"init": init, "final": w}, WEIGHTS / f"{case}-{rank}.pt")
    (out / f"{case}-{rank}.json").write_text(json.dumps(res))
    if case == "ref" and rank == 0:
        (out / "peaks.json").write_text(json.dumps(res["peaks"]))
    dist.barrier() if "error" not in res else None
    sys.stdout.flush()
    os._exit(0)


def drive(out: Path, cases: list[str]) -> None:
    import torch
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for case in cases or ("ref", "ref2", "fit", "cap0", "capboth", "noset", "floor0", "floor2", "optoom0", "timing"):
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(NPROC),
                            __file__, case, str(out)], capture_output=True, text=True, timeout=400)
        wall = time.time() - t0
        (out / f"{case}.log").write_text(p.stdout[-20000:] + "\n--- stderr\n" + p.stderr[-20000:])
        ranks = [json.loads((out / f"{case}-{r}.json").read_text()) if (out / f"{case}-{r}.json").exists() else None
                 for r in range(NPROC)]
        rows[case] = {"rc": p.returncode, "wall_s": round(wall, 1), "ranks": ranks}
        print(f"{case}: rc {p.returncode}, {wall:.0f} s", flush=True)
    have_ref = (WEIGHTS / "ref-1.pt").exists()
    ref = [torch.load(WEIGHTS / f"ref-{r}.pt") for r in range(NPROC)] if have_ref else []
    for case in ("ref2", "fit", "cap0", "capboth", "noset"):
        for r in range(NPROC) if case in rows and have_ref else ():
            f = WEIGHTS / f"{case}-{r}.pt"
            if f.exists() and not (rows[case]["ranks"][r] or {}).get("error"):
                got = torch.load(f)
                upd = (ref[r]["final"] - ref[r]["init"]).norm()
                rows[case]["ranks"][r]["diff_over_update"] = float((got["final"] - ref[r]["final"]).norm() / upd)
    t = rows["timing"]["ranks"][0] if "timing" in rows else None
    if t and "ref" in t["times"] and "fit" in t["times"]:
        ref_t, fit_t = sorted(t["times"]["ref"][2:]), sorted(t["times"]["fit"][2:])
        rows["timing"]["median_ref_s"], rows["timing"]["median_fit_s"] = ref_t[len(ref_t) // 2], fit_t[len(fit_t) // 2]
    rows["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                        "gpu": torch.cuda.get_device_name(0), "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
    (out / "fit_ddp_gpu.json").write_text(json.dumps(rows, indent=1))
    print(json.dumps(rows, indent=1)[:6000])


if __name__ == "__main__":
    if "RANK" in os.environ:
        worker(sys.argv[1], Path(sys.argv[2]))
    else:
        drive(Path(sys.argv[1]), sys.argv[2:])
