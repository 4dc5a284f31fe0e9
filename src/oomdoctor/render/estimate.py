"""Text, JSON and HTML for `oomdoctor estimate` (formatting only; the numbers come from the estimator)."""

from __future__ import annotations

from typing import Any

from oomdoctor.render.envelope import dumps
from oomdoctor.render.html import render_page
from oomdoctor.units import format_bytes

ORDER = ("parameters", "gradients", "optimizer_state", "optimizer_temporaries", "activations", "logits", "kv_cache", "workspace",
         "allocator_cache", "context")


def estimate_payload(est: Any) -> dict[str, Any]:
    """docs/contracts.md §4 keys first; the rest are additional keys."""
    return {
        "batch_size": est.batch_size,
        "peak_allocated_bytes": est.peak_allocated_bytes,
        "peak_reserved_bytes": est.peak_reserved_bytes,
        "process_total_bytes": est.process_total_bytes,
        "breakdown": {k: int(est.breakdown.get(k, 0)) for k in ORDER if k in est.breakdown},
        "memory_limit_bytes": est.memory_limit_bytes,
        "fits": est.fits,
        "gpu": est.gpu,
        "peak_phase": est.peak_phase,
        "parameter_count": est.parameter_count,
    }


def max_batch_payload(max_batch_size: int, limit: int, tried: dict[int, bool], bound: str = "memory",
                      stopped: str = "") -> dict[str, Any]:
    """`max_batch_size_bound` as for --model (docs/contracts.md §4): "memory", or "search_limit" when the search
    stopped before a batch that does not fit (the answer is then a lower bound; `search_stopped` says why)."""
    out: dict[str, Any] = {"max_batch_size": max_batch_size, "max_batch_size_bound": bound,
                           "memory_limit_bytes": limit, "trials": {str(k): v for k, v in sorted(tried.items())}}
    if bound == "search_limit":
        out["search_stopped"] = stopped
    return out


# text labels: the JSON key, spaced, except where it would not fit the column
_LABELS = {"optimizer_temporaries": "optimizer temps"}


def _label(key: str) -> str:
    return _LABELS.get(key, key.replace("_", " "))


def _bar(used: int, limit: int, width: int = 40) -> str:
    frac = used / limit if limit else 0.0
    filled = min(width, int(round(frac * width)))
    return "[" + "#" * filled + "." * (width - filled) + f"] {100 * frac:.0f}%"


def estimate_text(est: Any, source: str) -> str:
    lines = [f"oomdoctor estimate: {source}, batch size {est.batch_size}", ""]
    lines.append(f"  peak reserved    {format_bytes(est.peak_reserved_bytes):>12}   (torch.cuda.max_memory_reserved)")
    lines.append(f"  peak allocated   {format_bytes(est.peak_allocated_bytes):>12}   (at {est.peak_phase})")
    lines.append(f"  process total    {format_bytes(est.process_total_bytes):>12}   (as NVML shows: + CUDA context)")
    lines.append("")
    lines.append("  at the peak:")
    for k in ORDER:
        if k in est.breakdown:
            lines.append(f"    {_label(k):<18}{format_bytes(est.breakdown[k]):>12}")
    if est.memory_limit_bytes is not None:
        what = f"{est.gpu}" if est.gpu else "memory limit"
        lines.append("")
        lines.append(f"  {what}: {format_bytes(est.memory_limit_bytes)} for the allocator  "
                     f"{_bar(est.peak_reserved_bytes, est.memory_limit_bytes)}")
        lines.append("  FITS" if est.fits else "  DOES NOT FIT: expect CUDA out of memory")
    return "\n".join(lines) + "\n"


def max_batch_text(max_batch_size: int, limit: int, source: str, tried: dict[int, bool], bound: str = "memory",
                   stopped: str = "") -> str:
    trials = ", ".join(f"{b}{'' if ok else ' (no)'}" for b, ok in sorted(tried.items()))
    answer = str(max_batch_size)
    if bound == "search_limit":  # the search ended before memory did: a lower bound, not the edge
        answer = f"at least {max_batch_size} (the search stopped at {max_batch_size}: {stopped})"
    return (f"oomdoctor estimate --max-batch: {source}\n\n  largest batch size that fits "
            f"{format_bytes(limit)}: {answer}\n  traced: {trials}\n")


def estimate_json(est: Any) -> str:
    return dumps(estimate_payload(est))


def estimate_html(est: Any, source: str) -> str:
    rows = [(_label(k), format_bytes(est.breakdown[k])) for k in ORDER if k in est.breakdown]
    return render_page("estimate.html.j2", f"oomdoctor estimate: {source}", est=est, source=source, rows=rows,
                       fmt=format_bytes)


def model_payload(est: Any, source: str, search: dict[str, int] | None,
                  rank: dict[str, Any] | None = None) -> dict[str, Any]:
    """estimate --model: the §4 estimate keys, plus the recipe, accelerate's figure and the fit search."""
    out = estimate_payload(est)
    d = est.details
    out.update({"model": source, "task": d.get("task"), "seq_len": d.get("seq_len"), "dtype": d.get("dtype"),
                "optimizer": d.get("optimizer"), "analytic": list(d.get("analytic") or []),
                "accelerate_estimate_bytes": (d.get("accelerate") or {}).get("bytes"),
                "accelerate_estimate": d.get("accelerate")})
    if d.get("reduced_depth"):
        out["reduced_depth"] = d["reduced_depth"]
    if search is not None:
        out.update(search)
    if rank is not None:
        out["per_rank"] = rank
    return out


def _bound(bound: str | None, context: int | None) -> str:
    """What set a searched figure: memory, the model's context length, or the end of the search."""
    if bound == "context_length":
        return f" (capped by the model's context length, max_position_embeddings {context}; not by memory)"
    if bound == "search_limit":
        return " (the search stops there; memory would allow more)"
    if bound == "memory":
        return " (limited by memory" + (f"; the model's context length is {context})" if context else ")")
    return ""


def _verdict(fits: bool | None) -> str:
    return "  FITS" if fits else "  DOES NOT FIT: expect CUDA out of memory"


def _rank_text(est: Any, header: str, rank: dict[str, Any]) -> str:
    """estimate --parallel: the headline is the per-rank figure (walkthrough, session 27: it said one GPU's
    674 MiB and put the 1.90 GiB per rank in a 400-character line at the bottom); one GPU without parallelism
    follows as the comparison, the validation note wrapped."""
    import textwrap

    plan = f"{rank['strategy']} over {rank['ranks']} ranks" + (
        f" (shard groups of {rank['shard_size']})" if rank.get("shard_size") else "")
    lines = [f"oomdoctor estimate: {header}, batch size {est.batch_size} per rank, {plan}", ""]
    lines.append(f"  peak reserved    {format_bytes(rank['peak_reserved_bytes']):>12}   per rank "
                 "(torch.cuda.max_memory_reserved on each GPU)")
    if rank.get("peak_phase"):
        lines.append(f"  peak at          {rank['peak_phase']}")
    lines.append(f"  process total    {format_bytes(rank['process_total_bytes']):>12}   per rank "
                 "(as NVML shows: + CUDA context)")
    if rank.get("worst_rank_reserved_bytes") is not None:
        lines.append(f"  worst rank       {format_bytes(rank['worst_rank_reserved_bytes']):>12}   where DDP's bucket "
                     "rebuild holds the old buckets through step 2")
        lines.append("                                  (a race: some ranks, some runs; the fit is judged on it;")
        lines.append("                                  DDP(..., gradient_as_bucket_view=True) avoided it in a probe)")
    lines.append("")
    lines.append("  at the peak, per rank:")
    for k in ORDER:
        if k in rank["breakdown"]:
            lines.append(f"    {_label(k):<18}{format_bytes(rank['breakdown'][k]):>12}")
    if est.memory_limit_bytes is not None:
        what = f"{est.gpu}" if est.gpu else "memory limit"
        used = rank.get("worst_rank_reserved_bytes") or rank["peak_reserved_bytes"]
        lines.append("")
        lines.append(f"  {what}: {format_bytes(est.memory_limit_bytes)} for the allocator, per rank  "
                     f"{_bar(used, est.memory_limit_bytes)}")
        if "fits" in rank:
            lines.append(_verdict(rank["fits"]))
    lines.append("")
    note = "NOT VALIDATED: " + (rank.get("validation") or "not validated on hardware")
    lines.extend(textwrap.wrap(note, width=100, initial_indent="  ", subsequent_indent="    "))
    lines.append("")
    lines.append(f"  for comparison, one GPU running the whole step without parallelism: peak reserved "
                 f"{format_bytes(est.peak_reserved_bytes)},")
    lines.append(f"    process total {format_bytes(est.process_total_bytes)} (at {est.peak_phase})"
                 + ("" if est.fits is None else ("; fits" if est.fits else "; does not fit")))
    return "\n".join(lines) + "\n"


def model_text(est: Any, source: str, search: dict[str, int] | None, rank: dict[str, Any] | None = None) -> str:
    d = est.details
    train = d.get("task") in ("train", "lora", "qlora")
    text = estimate_text(est, f"{source} ({d.get('task')}, seq {d.get('seq_len')}, {d.get('dtype')}"
                                  + (f", {d.get('optimizer')})" if train else ")"))
    if rank is not None:  # the per-rank figure is the answer asked for; one GPU's is the comparison
        text = _rank_text(est, f"{source} ({d.get('task')}, seq {d.get('seq_len')}, {d.get('dtype')}"
                                + (f", {d.get('optimizer')})" if train else ")"), rank)
    lines = [text.rstrip("\n")]
    one_gpu = " on one GPU, without --parallel" if rank is not None else ""
    if search is not None:
        lines.append(f"  largest batch that fits{one_gpu} (seq {d.get('seq_len')}): {search['max_batch_size']}"
                     + _bound(search.get("max_batch_size_bound"), None))
        lines.append(f"  longest sequence that fits{one_gpu} (batch {est.batch_size}): {search['max_seq_len']}"
                     + _bound(search.get("max_seq_len_bound"), search.get("context_length")))
    red = d.get("reduced_depth")
    if red:
        lines.append(f"  traced at {red['traced_depths'][0]} and {red['traced_depths'][1]} of {red['depth']} blocks, "
                     "each phase's peak extended linearly")
    acc = d.get("accelerate") or {}
    if acc:
        lines.append("")
        what = "weights, gradients and Adam state" if train else "weights"
        lines.append(f"  accelerate estimate-memory: {format_bytes(acc['bytes'])}  ({acc['row']}; {acc['source']}; "
                     f"{what} only: no activations, workspaces, allocator or context)")
    for note in d.get("analytic") or []:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"
