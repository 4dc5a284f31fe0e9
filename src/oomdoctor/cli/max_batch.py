"""Find the largest batch size (or, with --dim seq, sequence length) that runs three full training steps.

Each trial runs in a fresh child process under the memory cap (torch.cuda.set_per_process_memory_fraction)
with a time limit. Two small batches (or the estimator's prediction) give a line; near the cap it is a
lower bound, so the estimator's prediction is tried and the band between the last batch that ran and
the first that did not is closed to within 1 (under 50) or 2%. Each trial's throughput gives the
recommended batch. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from oomdoctor.cli.common import add_output_options, emit, progress, stderr_console
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, InputError, UsageError
from oomdoctor.units import format_bytes, parse_size

NAME = "max-batch"
HELP = "find the largest batch size (or sequence length) that runs on this GPU (real trials, about 4)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", metavar="WORKLOAD.py", help="workload file defining build(batch_size) (docs/max-batch.md)")
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--memory-limit", metavar="SIZE", help="cap on the allocator's reserved memory, e.g. 16GiB")
    cap.add_argument("--fraction", type=float, metavar="F", help="cap as a fraction of the GPU's memory (0-1]")
    p.add_argument("--margin", type=float, default=0.05, help="share of the limit kept free (default 0.05)")
    p.add_argument("--min", type=int, default=1, dest="min_batch", help="smallest batch to consider (default 1)")
    p.add_argument("--max", type=int, default=8192, dest="max_batch", help="largest batch to consider (default 8192)")
    p.add_argument("--device", default="cuda:0", help="CUDA device (default cuda:0)")
    p.add_argument("--trial-timeout", type=float, default=300, metavar="S", help="seconds per trial (default 300)")
    p.add_argument("--no-estimator", action="store_true", help="measure two small batches even if the estimator is installed")
    p.add_argument("--dim", choices=("batch", "seq"), default="batch",
                   help="search the batch size (default) or, with seq, the longest sequence at --batch "
                        "(build(batch_size, seq_len=...)); --min/--max then bound the sequence length")
    p.add_argument("--batch", type=int, default=1, help="the fixed batch size for --dim seq (default 1)")
    p.add_argument("--max-trials", type=int, default=8, help="most trials to run (default 8; usually 3-5 run)")
    p.add_argument("--plot", metavar="PNG", help="also write the memory-vs-batch chart as PNG (needs the `plot` extra)")
    add_output_options(p)


def _validate(args: argparse.Namespace) -> int | None:
    if not 0 <= args.margin < 0.5:
        raise UsageError(f"--margin {args.margin}: use a share between 0 and 0.5, e.g. 0.05")
    if args.min_batch < 1 or args.max_batch < args.min_batch:
        raise UsageError(f"--min {args.min_batch} --max {args.max_batch}: need 1 <= min <= max")
    if args.fraction is not None and not 0 < args.fraction <= 1:
        raise UsageError(f"--fraction {args.fraction}: use a value in (0, 1]")
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch}: need >= 1")
    if args.max_trials < 2:
        raise UsageError(f"--max-trials {args.max_trials}: need >= 2")
    if args.trial_timeout <= 0:
        raise UsageError("--trial-timeout must be positive")
    if not str(args.device).startswith("cuda"):
        raise UsageError(f"--device {args.device}: max-batch measures CUDA devices (cuda or cuda:N)")
    return parse_size(args.memory_limit) if args.memory_limit else None


def payload_of(run: Any) -> dict[str, Any]:
    from oomdoctor.trials.search import summarize

    return {"workload": run.workload, "device": run.device, "gpu": run.gpu, "torch_version": run.torch_version,
            "gpu_total_bytes": run.total_bytes, **summarize(run.result),
            "wall_seconds": round(run.wall_seconds, 3), "notes": run.notes + list(run.result.notes),
            "dim": getattr(run, "dim", "batch"), "fixed_batch": getattr(run, "fixed_batch", None)}


def run(args: argparse.Namespace) -> int:
    limit = _validate(args)
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot {args.plot}: give a .png path")
    from oomdoctor.trials.max_batch import find_max_batch

    err = stderr_console()

    def on_info(info: dict[str, Any]) -> None:
        err.print(f"[dim]{info.get('gpu')}: {format_bytes(info.get('total_bytes'))} total, "
                  f"{format_bytes(info.get('free_bytes'))} free, cap {format_bytes(info.get('limit_bytes'))}[/dim]")

    def on_trial(t: Any) -> None:
        r = t.result
        what = format_bytes(r.peak_bytes) if r.ok else r.outcome.upper()
        rate = f", {r.throughput:,.1f}/s" if r.ok and r.throughput else ""
        err.print(f"trial: {args.dim} {t.batch:>6} ({t.purpose}) -> {what}{rate} in {r.seconds:.1f} s")

    with progress(f"max-batch {args.workload}: running trials in child processes", args):
        result = find_max_batch(args.workload, memory_limit=limit, fraction=args.fraction, margin=args.margin,
                                min_batch=args.min_batch, max_batch=args.max_batch, device=args.device,
                                trial_timeout=args.trial_timeout, use_estimator=not args.no_estimator,
                                on_trial=on_trial, on_info=on_info, dim=args.dim, batch=args.batch,
                                max_trials=args.max_trials)
    payload = payload_of(result)
    from oomdoctor.render import max_batch as render

    if args.plot:
        try:
            image = render.png(payload)
        except ImportError as exc:
            raise UsageError("--plot needs matplotlib: pip install 'oomdoctor[plot]'") from exc
        try:
            Path(args.plot).write_bytes(image)
        except OSError as exc:
            raise InputError(f"cannot write {args.plot}: {exc.strerror or exc}") from exc
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.format == "json":
        from oomdoctor.render.envelope import dumps

        emit(dumps(payload), args)
    elif args.format == "html":
        emit(render.html(payload), args)
    else:
        emit(render.text(payload), args)
    return EXIT_OK if payload["max_batch_size"] is not None else EXIT_FINDINGS
