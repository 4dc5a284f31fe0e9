"""Predict the peak GPU memory of a training (or inference) step without a GPU.

Traces three steps of WORKLOAD.py (docs/contracts.md §6) under PyTorch fake tensors, replays every
allocation through a model of the CUDA caching allocator and adds the CUDA context. Needs torch.
Exit 1 when the step does not fit --gpu / --memory-limit.
"""

from __future__ import annotations

import argparse
import sys

from oomdoctor.cli.common import add_output_options, emit, progress
from oomdoctor.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from oomdoctor.units import parse_size

NAME = "estimate"
HELP = "predict peak GPU memory of one training step, without a GPU"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", metavar="WORKLOAD.py", nargs="?", help="file defining build(batch_size) -> dict")
    parser.add_argument("--model", metavar="PATH",
                        help="Hugging Face model directory or config.json instead of a workload file; a hub id "
                             "(org/name) is read from the Hugging Face cache, else fetched if the hub answers one "
                             "short try (docs/estimate.md, 'Offline')")
    parser.add_argument("--task", default="train", help="with --model: train, lora, qlora, infer or generate")
    parser.add_argument("--seq-len", type=int, default=512, metavar="N", help="with --model: tokens per sequence")
    parser.add_argument("--dtype", default=None, help="with --model: weights' dtype fp32, bf16 or fp16 (default bf16)")
    parser.add_argument("--amp", default=None, choices=("bf16", "fp16"), help="with --model: autocast dtype")
    # no argparse default: a --optimizer given for --task infer is refused even when it names the default
    parser.add_argument("--optimizer", default=None,
                        help="with --model: adamw (default), adam, sgd, sgd-momentum, adamw-fused, adamw-8bit")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="with --model: checkpoint layers")
    parser.add_argument("--lora-r", type=int, default=16, metavar="R", help="with --model: LoRA rank")
    parser.add_argument("--lora-targets", metavar="A,B", help="with --model: LoRA target modules (or all-linear)")
    parser.add_argument("--max-new-tokens", type=int, default=128, metavar="N", help="with --task generate")
    parser.add_argument("--num-beams", type=int, default=1, metavar="N", help="with --task generate")
    parser.add_argument("--kbit-prep", action="store_true",
                        help="with --task qlora: the model goes through peft's prepare_model_for_kbit_training "
                             "first (fp32 norms, embeddings and lm_head; gradient checkpointing), as most QLoRA "
                             "recipes do")
    parser.add_argument("--parallel", metavar="STRATEGY",
                        help="with --model: per-rank memory for ddp, zero2, zero3, fsdp or fsdp-hybrid "
                             "(ddp/fsdp traced over a fake process group, zero2/zero3 through emulations of "
                             "DeepSpeed's tensors; each figure prints what hardware measured for its strategy)")
    parser.add_argument("--ranks", type=int, default=8, metavar="N", help="with --parallel: number of ranks")
    parser.add_argument("--shard-size", type=int, metavar="M", help="with --parallel fsdp-hybrid: ranks per shard group")
    parser.add_argument("--no-search", action="store_true",
                        help="with --model --gpu: skip the search for the largest batch and longest sequence")
    parser.add_argument("--batch-size", type=int, metavar="N", help="batch size to estimate")
    parser.add_argument("--gpu", metavar="NAME", help="check the whole process fits this GPU (h100, a100-40gb, l4, ... "
                                                       "or the name nvidia-smi prints, e.g. 'NVIDIA H100 NVL')")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="cap on reserved memory, as set_per_process_memory_fraction (e.g. 20GiB)")
    parser.add_argument("--alloc-conf", metavar="CONF", help="PYTORCH_CUDA_ALLOC_CONF to model (e.g. expandable_segments:True)")
    parser.add_argument("--max-batch", action="store_true", help="find the largest batch size that fits")
    parser.add_argument("--eager-loading", action="store_true", help="context as with CUDA_MODULE_LOADING=EAGER")
    # `--lora` was read by argparse as an ambiguous prefix of --lora-r / --lora-targets, with no hint (session 27):
    # hidden exact options that say which flag was meant
    for flag, task in (("--lora", "lora"), ("--qlora", "qlora")):
        parser.add_argument(flag, nargs=0, action=_TaskHint, task=task, help=argparse.SUPPRESS)
    add_output_options(parser)


class _TaskHint(argparse.Action):
    """A task written as a flag (`--lora`): one line naming the option that selects it."""

    def __init__(self, option_strings, dest, task: str, **kw) -> None:
        super().__init__(option_strings, dest, **kw)
        self.task = task

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} is not an option: use --task {self.task}")


# integer options and their smallest meaningful value: argparse takes any int, and a 0 that a falsy test turned
# into a default (`--batch-size 0` ran as batch 1, session 27) is refused instead, like a negative one
_COUNTS = (("batch_size", "--batch-size"), ("seq_len", "--seq-len"), ("ranks", "--ranks"),
           ("shard_size", "--shard-size"), ("max_new_tokens", "--max-new-tokens"), ("num_beams", "--num-beams"),
           ("lora_r", "--lora-r"))


def _check_counts(args: argparse.Namespace) -> None:
    for attr, flag in _COUNTS:
        value = getattr(args, attr, None)
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")


def run(args: argparse.Namespace) -> int:
    from oomdoctor.estimate.alloc_conf import parse_alloc_conf
    from oomdoctor.knowledge.gpus import get_gpu
    from oomdoctor.render import estimate as render

    _check_counts(args)
    limit = parse_size(args.memory_limit) if args.memory_limit else None
    if args.gpu:
        get_gpu(args.gpu)
    conf = parse_alloc_conf(args.alloc_conf)
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise UsageError("estimate needs PyTorch: pip install 'oomdoctor[torch]'") from exc
    from oomdoctor.estimate import estimator
    from oomdoctor.workload.load import load_workload

    if args.model:
        if args.workload:
            raise UsageError("give either WORKLOAD.py or --model PATH, not both")
        _refuse_unused(args)
        return _run_model(args, limit, conf)
    if not args.workload:
        raise UsageError("give WORKLOAD.py or --model PATH")
    _refuse_unused(args)
    workload = load_workload(args.workload)
    if args.max_batch:
        if limit is None and not args.gpu:
            raise UsageError("--max-batch needs --memory-limit SIZE or --gpu NAME")
        with progress(f"searching the largest batch for {args.workload}", args) as update:
            found = estimator.max_batch(workload, memory_limit=limit, gpu=args.gpu, alloc_conf=conf,
                                        progress=update, cpu_fallback_limit=_cpu_fallback_limit())
        cap = limit if limit is not None else get_gpu(args.gpu).total_memory
        if args.format == "json":
            from oomdoctor.render.envelope import dumps

            emit(dumps(render.max_batch_payload(found.max_batch_size, cap, found.tried, found.bound,
                                                found.stopped)), args)
        else:
            emit(render.max_batch_text(found.max_batch_size, cap, args.workload, found.tried, found.bound,
                                       found.stopped), args)
        return EXIT_OK if found.max_batch_size > 0 else EXIT_FINDINGS
    if args.batch_size is None:
        raise UsageError("give --batch-size N (or --max-batch with --memory-limit)")
    with progress(f"tracing {args.workload} at batch size {args.batch_size}", args):
        est = estimator.estimate(workload, args.batch_size, memory_limit=limit, gpu=args.gpu, alloc_conf=conf,
                                 lazy_loading=not args.eager_loading, cpu_fallback_limit=_cpu_fallback_limit())
    if args.format == "json":
        out = render.estimate_json(est)
    elif args.format == "html":
        out = render.estimate_html(est, args.workload)
    else:
        out = render.estimate_text(est, args.workload)
    emit(out, args)
    return EXIT_FINDINGS if est.fits is False else EXIT_OK





def _cpu_fallback_limit() -> int:
    """How much host memory fake tensors' real CPU run of an op without a meta kernel may take: a share of what
    this host (and this process's cgroup) has available (estimate/host_fallback.py)."""
    from oomdoctor.collectors import machine
    from oomdoctor.estimate import host_fallback

    return host_fallback.limit_for(host_fallback.available_from(machine.collect_host_memory()))


DEFAULT_OPTIMIZER = "adamw"
_TRAINING = ("train", "lora", "qlora")

# options that only shape a --model estimate, and the tasks they apply to (None: any task); a value set away from its
# default where it does not apply is refused, rather than silently left out of the figure (--optimizer has no argparse
# default, so naming the default for --task infer is refused too)
_MODEL_ONLY: tuple[tuple[str, str, object, tuple[str, ...] | None], ...] = (
    ("task", "--task", "train", None), ("seq_len", "--seq-len", 512, None), ("dtype", "--dtype", None, None),
    ("amp", "--amp", None, None), ("optimizer", "--optimizer", None, _TRAINING),
    ("gradient_checkpointing", "--gradient-checkpointing", False, _TRAINING),
    ("lora_r", "--lora-r", 16, ("lora", "qlora")), ("lora_targets", "--lora-targets", None, ("lora", "qlora")),
    ("max_new_tokens", "--max-new-tokens", 128, ("generate",)), ("num_beams", "--num-beams", 1, ("generate",)),
    ("kbit_prep", "--kbit-prep", False, ("qlora",)), ("parallel", "--parallel", None, None),
    ("no_search", "--no-search", False, None),
)
# --parallel's own options: refused without it rather than silently dropped
_PARALLEL_ONLY = (("ranks", "--ranks", 8), ("shard_size", "--shard-size", None))


def _refuse_unused(args: argparse.Namespace) -> None:
    from oomdoctor.estimate.hf import TASKS

    for attr, flag, default in _PARALLEL_ONLY:
        if getattr(args, attr, default) != default and not getattr(args, "parallel", None):
            raise UsageError(f"{flag} applies with --parallel STRATEGY (with --model)")

    for attr, flag, default, tasks in _MODEL_ONLY:
        if getattr(args, attr, default) == default:
            continue
        if not args.model:
            raise UsageError(f"{flag} shapes a --model estimate; a WORKLOAD.py builds its own model and step")
        if args.task not in TASKS:
            return  # hf.Recipe.check names the tasks
        if tasks == _TRAINING and args.task not in tasks:
            raise UsageError(f"{flag} does not apply to --task {args.task}: it shapes a training step "
                             "(--task train, lora or qlora)")
        if tasks is not None and args.task not in tasks:
            raise UsageError(f"{flag} applies to --task {' or '.join(tasks)}; this is --task {args.task}"
                             + (" (a full fine-tune)" if args.task == "train" else ""))


def optimizer_of(args: argparse.Namespace) -> str:
    """--optimizer as given, else the default (argparse holds None so that an explicit one can be told apart)."""
    return args.optimizer or DEFAULT_OPTIMIZER


def _run_model(args: argparse.Namespace, limit: int | None, conf) -> int:
    from oomdoctor.estimate import hf
    from oomdoctor.render import estimate as render

    if args.max_batch:
        raise UsageError("with --model, --gpu NAME already reports the largest batch and longest sequence")
    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip()) if args.lora_targets else None
    recipe = hf.Recipe(task=args.task, seq_len=args.seq_len, dtype=args.dtype or "bf16", amp=args.amp,
                       optimizer=optimizer_of(args), gradient_checkpointing=args.gradient_checkpointing,
                       lora_r=args.lora_r, lora_targets=targets, max_new_tokens=args.max_new_tokens,
                       num_beams=args.num_beams, kbit_prep=args.kbit_prep).check()
    batch = 1 if args.batch_size is None else args.batch_size
    if args.parallel:
        from oomdoctor.estimate.parallel import STRATEGIES

        if args.parallel not in STRATEGIES:
            raise UsageError(f"--parallel must be one of {', '.join(STRATEGIES)}, got {args.parallel!r}")
        if args.ranks < 1 or (args.shard_size is not None and (args.shard_size < 1 or args.ranks % args.shard_size)):
            raise UsageError("--ranks must be at least 1 and --shard-size must divide it")
        if recipe.task in ("infer", "generate"):
            raise UsageError("--parallel applies to training tasks (train, lora, qlora)")
        if recipe.task == "qlora" and args.parallel != "ddp":
            raise UsageError("--parallel with --task qlora: only ddp is modelled (FSDP-QLoRA and ZeRO over a "
                             "4-bit base are not)")
    config = hf.load_config(args.model)
    warning = hf.check_context(config, recipe)  # refuses a run past a learned position table
    if warning:
        print(f"oomdoctor estimate: warning: {warning}", file=sys.stderr)
    with progress(f"tracing {args.model} ({recipe.task}) at batch size {batch}", args) as update:
        est = hf.estimate_model(config, recipe, batch, gpu=args.gpu, memory_limit=limit, alloc_conf=conf)
        search = None
        if args.gpu and not args.no_search:
            update("searching the largest batch and longest sequence")
            search = hf.search_fit(config, recipe, batch, args.gpu)
    rank = None
    if args.parallel:
        from oomdoctor.estimate.parallel_trace import Plan

        with progress(f"tracing rank 0 of {args.parallel} over {args.ranks} ranks", args) as update:
            rank = hf.estimate_per_rank(config, recipe, batch, Plan(args.parallel, args.ranks, args.shard_size),
                                        gpu=args.gpu, memory_limit=limit, alloc_conf=conf, on_step=update)
    if args.format == "json":
        from oomdoctor.render.envelope import dumps

        out = dumps(render.model_payload(est, args.model, search, rank))
    else:
        out = render.model_text(est, args.model, search, rank)
    emit(out, args)
    # with --parallel the per-rank figure is the answer: one GPU without parallelism not fitting is the reason to
    # shard, not a finding
    fits = est.fits if rank is None else rank.get("fits")
    return EXIT_FINDINGS if fits is False else EXIT_OK
