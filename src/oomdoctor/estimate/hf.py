"""`oomdoctor estimate --model PATH`: the common LLM recipes from a Hugging Face config, no Python to write.

PATH is a model directory holding config.json, or a config.json (offline); a hub id ("org/name") needs
huggingface_hub, and is read from the local Hugging Face cache when its config.json is there, else fetched
when the hub answers one short try (estimate/hub.py). The model is built from its config under
fake tensors (never materialised, no weights read) and the recipe's step is traced like a workload
file's (estimate/trace.py):

    train     full fine-tuning: weights in --dtype (fp32 + --amp bf16 is HF Trainer's bf16=True)
    lora      peft LoRA (rank --lora-r on --lora-targets, peft's default targets otherwise) on a frozen
              base in --dtype; adapters in fp32 as peft keeps them
    qlora     lora on a 4-bit base: bitsandbytes kernels cannot run under fake tensors, so the frozen
              Linear weights of the traced bf16 base are resized to NF4 storage (0.5 byte a weight +
              double-quantised absmax) and the largest dequantised weight is added as a workspace:
              an analytic estimate, labelled so
    infer     one forward under no_grad, (batch, seq_len) tokens
    generate  model.generate() of --max-new-tokens after a seq_len prompt, --num-beams, KV cache

`--optimizer adamw-8bit` is bitsandbytes' 8-bit AdamW: the traced AdamW state is resized to one byte
an element plus a float32 absmax per 2048 (tensors under 4096 elements stay 32-bit, as bitsandbytes
does): analytic, labelled so. Beside the answer, accelerate's `estimate-memory` figure for the same
model, computed by accelerate's own code when it is importable (else its formula, said so).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError, UsageError
from oomdoctor.workload.checkpointing import enable_checkpointing, quiet_renames

TASKS = ("train", "lora", "qlora", "infer", "generate")
DTYPES = ("fp32", "bf16", "fp16")
MODEL_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adamw-fused", "adamw-8bit")
NF4_BLOCK = 64  # bitsandbytes 4-bit blocksize
BNB_8BIT_BLOCK = 2048
BNB_MIN_8BIT_SIZE = 4096


@dataclass(frozen=True)
class Recipe:
    task: str = "train"
    seq_len: int = 512
    dtype: str = "bf16"
    amp: str | None = None
    optimizer: str = "adamw"
    gradient_checkpointing: bool = False
    lora_r: int = 16
    lora_targets: tuple[str, ...] | None = None
    max_new_tokens: int = 128
    num_beams: int = 1
    kbit_prep: bool = False  # qlora: peft.prepare_model_for_kbit_training before the adapters
    notes: tuple[str, ...] = field(default=())

    def check(self) -> Recipe:
        if self.task not in TASKS:
            raise UsageError(f"--task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.optimizer not in MODEL_OPTIMIZERS:
            raise UsageError(f"--optimizer must be one of {', '.join(MODEL_OPTIMIZERS)}, got {self.optimizer!r}")
        if self.kbit_prep and self.task != "qlora":
            raise UsageError("--kbit-prep applies to --task qlora")
        if self.gradient_checkpointing and self.task not in ("train", "lora", "qlora"):
            raise UsageError(f"--gradient-checkpointing does not apply to --task {self.task}: it shapes a training step")
        if self.task == "qlora" and self.dtype == "fp32":  # the trace below runs the base in bf16 (as fp16: same size)
            raise UsageError("--task qlora models the 4-bit base's other weights in bf16 or fp16 (the same size); "
                             "--dtype fp32 is not modelled")
        for name in ("seq_len", "lora_r", "max_new_tokens", "num_beams"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        return self


# where configs name their context length: max_position_embeddings (transformers maps GPT-2's n_positions onto it),
# else the names a few architectures use (MPT's max_seq_len, ChatGLM's seq_length)
_CONTEXT_NAMES = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


def context_length(config: Any) -> tuple[int, str] | None:
    """(the model's context length, the config key naming it), or None when the config names none."""
    for name in _CONTEXT_NAMES:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, name
    return None


def _scaled_positions(config: Any) -> str | None:
    """Why the context length may stretch past the config's figure (RoPE scaling, ALiBi), else None."""
    for key in ("rope_scaling", "rope_parameters"):
        rope = getattr(config, key, None)
        if isinstance(rope, dict):
            kind = rope.get("rope_type") or rope.get("type")
            if kind not in (None, "default"):
                return f"{kind} RoPE scaling"
    if getattr(config, "alibi", False) or getattr(config, "position_embedding_type", None) == "alibi":
        return "ALiBi positions"
    return None


def check_context(config: Any, recipe: Recipe) -> str | None:
    """Tokens a sequence reaches (the prompt and every new token under generate) against the model's context
    length: a real run past a learned position table fails (GPT-2 at 2048 of 1024 positions indexes past its
    wpe), so UsageError; where the positions may stretch (rotary, RoPE scaling, ALiBi, a non-standard key) the warning
    to print, since the figure is still the memory such a run takes; None within the context."""
    ctx = context_length(config)
    if ctx is None:
        return None
    limit, name = ctx
    tokens = recipe.seq_len + (recipe.max_new_tokens if recipe.task == "generate" else 0)
    if tokens <= limit:
        return None
    what = (f"--seq-len {recipe.seq_len} + --max-new-tokens {recipe.max_new_tokens} = {tokens} tokens"
            if recipe.task == "generate" else f"--seq-len {tokens}")
    stretch = _scaled_positions(config)
    if stretch is not None or name != "max_position_embeddings":
        why = f"with {stretch} it may run longer" if stretch else f"the config calls it {name}"
        return (f"{what} is past the model's context length ({name} {limit}); {why}: the estimate assumes "
                "the model runs at this length")
    if any(getattr(config, k, None) is not None for k in ("rope_theta", "rope_parameters", "rope_scaling")):
        # rotary positions are computed for any length: such a run works (its quality past training is another
        # matter), so the memory figure stands; a learned table (GPT-2's wpe) has no row past it
        return (f"{what} is past the model's context length ({name} {limit}); its rotary positions were trained "
                "up to there: a longer run works, its quality may not; the estimate assumes it runs at this length")
    raise UsageError(f"{what} is past the model's context length ({name} {limit}): a real run fails there, past "
                     f"its learned position table; use at most {limit} tokens")


def load_config(source: str) -> Any:
    """A transformers config from a model directory, a config.json, or a hub id (cached, or the hub answering)."""
    try:
        import transformers
    except ImportError as exc:
        raise UsageError("estimate --model needs transformers: pip install transformers") from exc
    p = Path(source)
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise InputError(f"{source}: no config.json in this directory")
    if p.is_file():
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{source}: not a readable JSON config: {exc}") from None
        if not isinstance(raw, dict) or "model_type" not in raw:
            raise InputError(f"{source}: a Hugging Face config.json has a model_type")
        try:
            return transformers.AutoConfig.for_model(**raw)
        except Exception as exc:  # noqa: BLE001 - unknown model_type, bad values
            raise InputError(f"{source}: transformers cannot read this config: {_first(exc)}") from None
    if source.count("/") == 1 and not source.startswith((".", "/")):
        try:
            import huggingface_hub  # noqa: F401
        except ImportError:
            raise InputError(f"{source}: no such file or directory (a hub id needs huggingface_hub)") from None
        from oomdoctor.estimate import hub

        cached = hub.locate_config(source)  # the cache, else one bounded try of the hub, else one line
        try:
            if cached:
                return transformers.AutoConfig.from_pretrained(source, local_files_only=True)
            return transformers.AutoConfig.from_pretrained(source)
        except Exception as exc:  # noqa: BLE001 - gated, missing, unknown model_type, the network gone since
            where = "read its cached config" if cached else "fetch its config from the hub"
            raise InputError(f"{source}: cannot {where}: {_first(exc)}") from None
    raise InputError(f"{source}: no such file or directory")


def load_config_dict(raw: dict) -> Any:
    """A transformers config from the dict a config.json holds."""
    import transformers

    return transformers.AutoConfig.for_model(**raw)


def _first(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _optimizer(name: str) -> Any:
    import torch

    if name == "adamw-fused":
        return lambda params: torch.optim.AdamW(params, lr=1e-5, fused=True)
    if name == "adamw-8bit":
        return "adamw"  # traced as AdamW, its state resized afterwards (analytic)
    return name


def make_build(config: Any, recipe: Recipe) -> Callable[[int], dict]:
    """build(batch_size) -> workload dict for the recipe (docs/contracts.md §6)."""
    recipe.check()

    def build(batch_size: int) -> dict:
        import copy

        import torch
        import transformers

        cfg = copy.deepcopy(config)
        dtype = _torch_dtype("bf16" if recipe.task == "qlora" else recipe.dtype)
        seq2seq = bool(getattr(cfg, "is_encoder_decoder", False))
        auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
        try:
            try:
                model = auto.from_config(cfg, dtype=dtype)
            except TypeError:  # transformers < 4.56 calls it torch_dtype
                model = auto.from_config(cfg, torch_dtype=dtype)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            kind = "sequence-to-sequence" if seq2seq else "causal"
            raise InputError(f"model_type {getattr(cfg, 'model_type', '?')!r}: transformers builds no {kind} "
                             f"language model from it ({_first(exc)[:120]})") from None
        if recipe.gradient_checkpointing and recipe.task in ("train", "lora", "qlora"):
            enable_checkpointing(model, {"use_reentrant": False})
        if recipe.task in ("lora", "qlora"):
            try:
                import peft
            except ImportError as exc:
                raise UsageError("--task lora/qlora needs peft: pip install peft") from exc
            if recipe.kbit_prep:
                prepare_kbit(model)
            elif recipe.gradient_checkpointing:
                model.enable_input_require_grads()
            targets = list(recipe.lora_targets) if recipe.lora_targets else None
            if targets == ["all-linear"]:
                targets = "all-linear"
            lcfg = peft.LoraConfig(r=recipe.lora_r, lora_alpha=2 * recipe.lora_r, target_modules=targets,
                                   task_type="SEQ_2_SEQ_LM" if seq2seq else "CAUSAL_LM")
            try:
                with quiet_renames():  # peft reads model.is_gradient_checkpointing, renamed in transformers 5
                    model = peft.get_peft_model(model, lcfg)
            except ValueError as exc:
                if targets is not None:
                    raise InputError(f"LoRA targets {','.join(recipe.lora_targets or ())}: {_first(exc)}") from None
                # peft knows no default targets for this architecture: every linear layer
                lcfg = replace_lora(lcfg, target_modules="all-linear")
                with quiet_renames():
                    model = peft.get_peft_model(model, lcfg)
        vocab = int(getattr(cfg, "vocab_size", 32000))
        ids = torch.randint(0, vocab, (batch_size, recipe.seq_len))
        if recipe.task == "generate":
            mask = torch.ones(batch_size, recipe.seq_len, dtype=torch.long)
            return {"model": model, "inputs": {"input_ids": ids, "attention_mask": mask},
                    # min_new_tokens: no early EOS, so a real run (the GPU zoo) makes every token too
                    "generate": {"max_new_tokens": recipe.max_new_tokens, "min_new_tokens": recipe.max_new_tokens,
                                 "num_beams": recipe.num_beams, "do_sample": False, "pad_token_id": 0},
                    "amp": recipe.amp}
        # Full-length sequences, no padding: no attention_mask. On a GPU transformers drops an all-ones
        # mask (masking_utils: padding_mask.all()) and lets SDPA run causal or unmasked; under fake
        # tensors it cannot read the values and would build the 4-D mask instead, which changes the
        # attention kernel and memory (T5's position-bias mask per layer). Without a mask both take
        # the device's path.
        if recipe.task == "infer":
            return {"model": model, "inputs": {"input_ids": ids}, "train": False,
                    "amp": recipe.amp}
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids},
                "optimizer": _optimizer(recipe.optimizer), "amp": recipe.amp}

    return build


def quantized_linears(model: Any) -> list[tuple[str, Any]]:
    """The Linear layers a 4-bit load quantizes: every nn.Linear but the output head (bitsandbytes
    skips lm_head) and adapters."""
    import torch

    return [(name, m) for name, m in model.named_modules()
            if type(m) is torch.nn.Linear and "lm_head" not in name and "lora_" not in name]


def _linear4bit_forward(self: Any, x: Any) -> Any:
    """bitsandbytes Linear4bit.forward with bf16 compute: the input cast to bf16, the output back."""
    import torch
    import torch.nn.functional as F

    bias = None if self.bias is None else self.bias.to(torch.bfloat16)
    return F.linear(x.to(torch.bfloat16), self.weight, bias).to(x.dtype)


def prepare_kbit(model: Any) -> None:
    """What peft.prepare_model_for_kbit_training does to a 4-bit model, on the traced bf16 one (peft's
    own function would cast the stand-in bf16 Linear weights too): every parameter frozen, every one
    that is not a 4-bit weight (norms, embeddings, lm_head, biases) cast to fp32, so the hidden states
    run in fp32 and each 4-bit Linear casts its input to bf16 and its output back; input gradients and
    gradient checkpointing with peft's arguments."""
    import types

    import torch

    quant = quantized_linears(model)
    four_bit = {id(m.weight) for _, m in quant}
    for p in model.parameters():
        p.requires_grad = False
    with torch.no_grad():
        for p in model.parameters():
            if id(p) not in four_bit and p.dtype in (torch.float16, torch.bfloat16):
                p.data = p.data.to(torch.float32)
    for _, m in quant:
        m.forward = types.MethodType(_linear4bit_forward, m)
    model.enable_input_require_grads()
    # peft passes gradient_checkpointing_kwargs={}, which leaves torch to pick use_reentrant: True, with a
    # warning to name it; named here, the same checkpointing without the warning
    enable_checkpointing(model, {"use_reentrant": True})


def replace_lora(lcfg: Any, **changes: Any) -> Any:
    import copy

    out = copy.deepcopy(lcfg)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


def _nf4_bytes(numel: int) -> int:
    """bitsandbytes NF4 with double quantisation: 4-bit codes, uint8 absmax per 64, fp32 per 256 absmax."""
    blocks = math.ceil(numel / NF4_BLOCK)
    return math.ceil(numel / 2) + blocks + 4 * math.ceil(blocks / 256) + 64


def _adam8bit_bytes(numel: int, size: int) -> int:
    if numel < BNB_MIN_8BIT_SIZE:
        return size
    return numel + 4 * math.ceil(numel / BNB_8BIT_BLOCK)


def analytic_resizes(trace: Any, info: dict, model: Any, recipe: Recipe) -> tuple[dict[int, int], int, list[str]]:
    """Sizes the traced storages take under the analytic stand-ins (QLoRA's 4-bit base, 8-bit AdamW),
    and the extra workspace (QLoRA's dequantised weight). Returns (sizes by sid, workspace, notes)."""

    sizes: dict[int, int] = {}
    notes: list[str] = []
    workspace = 0
    if recipe.task == "qlora":
        sids = info.get("parameter_sids", {})
        largest = 0
        for _, mod in quantized_linears(model):
            w = mod.weight
            if w.requires_grad or id(w) not in sids:
                continue
            sizes[sids[id(w)]] = _nf4_bytes(w.numel())
            largest = max(largest, w.numel() * 2)
        workspace = largest
        if recipe.kbit_prep:
            notes.append("qlora: prepare_model_for_kbit_training emulated (norms, embeddings, lm_head and biases in "
                         "fp32; hidden states in fp32, each 4-bit Linear computing in bf16; gradient checkpointing)")
        notes.append("qlora: analytic 4-bit base (NF4 + double quantisation sizes replace the traced bf16 "
                      "Linear weights; largest dequantised weight added as workspace); bitsandbytes kernels "
                      "do not run under fake tensors")
    if recipe.optimizer == "adamw-8bit":
        for sid, cat in trace.categories.items():
            if cat == "optimizer_state" and sid in trace.numels:
                size = next(n for op, s, n, _ in trace.events if op == "a" and s == sid)
                sizes[sid] = _adam8bit_bytes(trace.numels[sid], size)
        notes.append("adamw-8bit: analytic (traced AdamW state resized to bitsandbytes' 8-bit blockwise "
                      "layout)")
    return sizes, workspace, notes


def accelerate_figure(config: Any, recipe: Recipe) -> dict[str, Any]:
    """What `accelerate estimate-memory` prints for this model: its 'Total Size' for inference, its
    'Training using Adam' for training (accelerate knows no batch, sequence, LoRA or activations)."""
    import torch
    import transformers

    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, dtype=torch.float32) if _has_dtype_kw() else \
            auto.from_config(config, torch_dtype=torch.float32)
    acc_dtype = {"fp32": "float32", "bf16": "float16", "fp16": "float16"}[recipe.dtype]
    if recipe.task == "qlora":
        acc_dtype = "float16"  # accelerate has no 4-bit training row; its float16 one is what users read
    try:
        from accelerate.commands.estimate import estimate_training_usage
        from accelerate.utils import calculate_maximum_sizes

        total, _largest = calculate_maximum_sizes(model)
        source = "accelerate " + _version("accelerate")
    except ImportError:
        seen: dict[int, Any] = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
        total = sum(t.numel() * t.element_size() for t in seen.values())
        estimate_training_usage = _training_usage
        source = "accelerate's formula, re-implemented (accelerate not installed)"
    if recipe.task in ("infer", "generate"):
        factor = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}[acc_dtype]
        value = int(total / factor)
        what = f"Total Size ({acc_dtype})"
    else:
        value = int(max(estimate_training_usage(total, acc_dtype).values()))
        what = f"Training using Adam ({acc_dtype})"
    return {"bytes": value, "row": what, "source": source}


def _training_usage(nbytes: int, mixed_precision: str) -> dict:
    """accelerate.commands.estimate.estimate_training_usage (accelerate 1.x), for when it is absent."""
    if mixed_precision == "float32":
        return {"model": nbytes, "gradients": nbytes, "optimizer": 2 * nbytes, "step": 4 * nbytes}
    return {"model": nbytes, "gradients": nbytes + nbytes // 2, "optimizer": 2 * nbytes, "step": 2 * nbytes}


def _has_dtype_kw() -> bool:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    minor = int(transformers.__version__.split(".")[1])
    return (major, minor) >= (4, 56)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


LAYER_ATTRS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers",
               "decoder_layers")
SAMPLE_DEPTHS = (4, 8)  # traced depths when composing
# Models up to this many blocks are traced in full. Composing from 4 and 8 blocks keeps peak allocated
# within ~1% but not the reserved peak: reserved is a running maximum whose slack at 4-8 blocks is
# still set by the depth-independent logits, so its linear extension ran +10% to +22% over the H100
# (Qwen2.5-1.5B, Llama-3.2-3B, GPT-2 large training) where the full traces were within 1.1%.
FULL_DEPTH_MAX = 40


def model_depth(config: Any) -> int | None:
    """The number of repeated blocks, when every stack of the model has the same depth; else None."""
    depths = {int(getattr(config, a)) for a in LAYER_ATTRS if isinstance(getattr(config, a, None), int)}
    return depths.pop() if len(depths) == 1 else None


def with_depth(config: Any, depth: int) -> Any:
    """A copy of `config` with `depth` blocks in every stack (per-layer lists cut to match)."""
    import copy

    cfg = copy.deepcopy(config)
    for a in LAYER_ATTRS:
        if isinstance(getattr(cfg, a, None), int):
            setattr(cfg, a, depth)
    for a in ("layer_types",):
        v = getattr(cfg, a, None)
        if isinstance(v, list):
            setattr(cfg, a, v[:depth])
    if isinstance(getattr(cfg, "max_window_layers", None), int):
        cfg.max_window_layers = min(cfg.max_window_layers, depth)
    return cfg


def estimate_model(config: Any, recipe: Recipe, batch_size: int, *, gpu: str | None = None,
                   memory_limit: int | None = None, alloc_conf: Any = None, reduced: bool | None = None,
                   parallel: Any = None) -> Any:
    """Estimate the recipe at one batch size; Estimate.details carries the notes and accelerate's figure.
    `reduced` (default: when the model has more than FULL_DEPTH_MAX blocks): trace 4 and 8 blocks and
    extend every phase's peak linearly to the full depth (estimate/hf.py compose_depth), instead of
    tracing them all. `parallel` (estimate.parallel_trace.Plan): rank 0 of a DDP / FSDP2 / DeepSpeed ZeRO job, traced
    with the real wrapper over a fake process group; `batch_size` is then the per-rank micro-batch."""
    depth = model_depth(config)
    if reduced is None:
        # DeepSpeed's emulations hold fixed-size buffers and a cap on gathered parameters that do not
        # grow with depth: extending 4 and 8 blocks put them 26-33% over the full trace; trace them whole
        zero = parallel is not None and getattr(parallel, "strategy", "") in ("zero2", "zero3")
        reduced = depth is not None and depth > FULL_DEPTH_MAX and not zero
    sd = SAMPLE_DEPTHS
    if reduced and depth is not None and depth > sd[1]:
        lo, hi = (estimate_model(with_depth(config, d), recipe, batch_size, gpu=gpu, memory_limit=memory_limit,
                                 alloc_conf=alloc_conf, reduced=False, parallel=parallel) for d in sd)
        est = compose_depth(lo, hi, sd, depth, memory_limit)
        details = dict(est.details)
        details["accelerate"] = accelerate_figure(config, recipe)
        return replace(est, details=details)
    return _estimate_full(config, recipe, batch_size, gpu=gpu, memory_limit=memory_limit, alloc_conf=alloc_conf,
                          parallel=parallel)


def compose_depth(lo: Any, hi: Any, depths: tuple[int, int], depth: int, memory_limit: int | None) -> Any:
    """Full-depth Estimate from two reduced-depth ones: each phase's allocated and reserved peak and
    each breakdown term extended linearly in the number of blocks; the peak is the highest phase."""
    d1, d2 = depths

    def ext(a: float, b: float) -> int:
        return max(0, int(round(b + (b - a) * (depth - d2) / (d2 - d1))))

    p1, p2 = lo.details["phase_peaks"], hi.details["phase_peaks"]
    phases = [p for p in p2 if p in p1]
    allocated = {p: ext(p1[p][0], p2[p][0]) for p in phases}
    # live bytes grow linearly with depth (within about 1% on the tests' models); the allocator's slack
    # (segment rounding, cached blocks) mostly does, but not exactly: each phase's reserved peak is
    # extended linearly too, and never put below the extended live bytes plus the deeper sample's slack
    reserved = {p: max(ext(p1[p][1], p2[p][1]), allocated[p] + max(0, p2[p][1] - p2[p][0])) for p in phases}
    top = max(phases, key=lambda p: (reserved[p], allocated[p]))
    seg = 2 << 20
    peak_reserved = -(-reserved[top] // seg) * seg
    peak_allocated = max(allocated.values())
    def ext_bd(p: str) -> dict[str, int]:
        b2 = hi.details["phase_breakdowns"].get(p) or hi.breakdown
        b1 = lo.details["phase_breakdowns"].get(p) or lo.breakdown
        return {k: ext(b1.get(k, 0), b2[k]) for k in b2 if k not in ("allocator_cache", "context")}

    breakdown = ext_bd(top)
    breakdown["allocator_cache"] = max(0, peak_reserved - sum(breakdown.values()))
    breakdown["context"] = hi.breakdown["context"]
    limit = hi.memory_limit_bytes if memory_limit is None else memory_limit
    fits = None if limit is None else peak_reserved <= limit
    details = dict(hi.details)
    details["reduced_depth"] = {"traced_depths": list(depths), "depth": depth}
    for k in ("phase_peaks", "phase_breakdowns"):
        details.pop(k, None)
    details["phases"] = {p: (reserved[p], ext_bd(p)) for p in phases}
    return replace(hi, peak_allocated_bytes=peak_allocated, peak_reserved_bytes=peak_reserved,
                   process_total_bytes=peak_reserved + breakdown["context"], breakdown=breakdown,
                   fits=fits, peak_phase=top,
                   parameter_count=ext(lo.parameter_count, hi.parameter_count), details=details)


def _labeler(config: Any, recipe: Recipe) -> Callable[[Any], str | None]:
    """Breakdown labels by shape: (..., vocab) tensors are logits (and their loss gradient); in
    inference and generation, (batch, kv_heads, tokens, head_dim) tensors are the KV cache."""
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "num_heads", None) or \
        getattr(config, "n_head", None) or getattr(config, "decoder_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    hidden = getattr(config, "hidden_size", None) or getattr(config, "d_model", None) or getattr(config, "n_embd", None)
    head_dim = getattr(config, "head_dim", None) or getattr(config, "d_kv", None) or \
        (hidden // heads if hidden and heads else None)
    cache = recipe.task in ("infer", "generate") and kv and head_dim

    def label(t: Any) -> str | None:
        shape = tuple(t.shape)
        if vocab and len(shape) >= 2 and shape[-1] == vocab:
            return "logits"
        if cache and len(shape) == 4 and shape[1] == kv and shape[3] == head_dim:
            return "kv_cache"
        return None
    return label


def estimate_per_rank(config: Any, recipe: Recipe, batch_size: int, plan: Any, *, gpu: str | None = None,
                      memory_limit: int | None = None, alloc_conf: Any = None,
                      on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The per-rank answer for `plan` (estimate.parallel_trace.Plan): rank 0 traced, and under DDP also the rank whose
    bucket rebuild holds the old buckets through step 2 (a race; parallel.from_traced judges `fits` on it)."""
    from oomdoctor.estimate.parallel import from_traced

    kw = {"gpu": gpu, "memory_limit": memory_limit, "alloc_conf": alloc_conf}
    est = estimate_model(config, recipe, batch_size, parallel=plan, **kw)
    worst = None
    if plan.strategy == "ddp":
        if on_step is not None:
            on_step("tracing a rank on which DDP's bucket rebuild holds the old buckets")
        worst = estimate_model(config, recipe, batch_size, parallel=replace(plan, rebuild_held=True), **kw)
    return from_traced(est, plan.strategy, plan.ranks, plan.shard_size, worst)


def _estimate_full(config: Any, recipe: Recipe, batch_size: int, *, gpu: str | None = None,
                   memory_limit: int | None = None, alloc_conf: Any = None, parallel: Any = None) -> Any:
    from oomdoctor.estimate.alloc_conf import AllocConf, parse_alloc_conf
    from oomdoctor.estimate.allocator import phase_peaks, replay_of, round_size
    from oomdoctor.estimate.estimator import _from_trace, trace_for
    from oomdoctor.knowledge.gpus import get_gpu

    recipe.check()
    spec_gpu = get_gpu(gpu) if gpu else None
    conf = alloc_conf if isinstance(alloc_conf, AllocConf) else parse_alloc_conf(alloc_conf)
    build = make_build(config, recipe)
    holder: dict[str, Any] = {}

    def keep(b: int) -> dict:
        raw = build(b)
        holder["model"] = raw["model"]
        return raw

    trace, info = trace_for(keep, batch_size, spec_gpu, labeler=_labeler(config, recipe), parallel=parallel)
    sizes, workspace, notes = analytic_resizes(trace, info, holder["model"], recipe)
    if sizes or workspace:
        trace = trace.resized(sizes)
        if workspace:
            sid = -1
            trace.events.insert(0, ("a", sid, workspace, 0))
            trace.categories[sid] = "workspace"
            trace.marks = [(i + 1, m) for i, m in trace.marks]
    peaks = phase_peaks(trace.events, trace.marks, conf)
    est = _from_trace(trace, info, batch_size, conf, memory_limit, spec_gpu, True, replay_of(peaks))
    model = holder["model"]
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    block_bytes = max((sum(p.numel() * p.element_size() for p in m.parameters())
                       for m in model.modules() if type(m).__name__ in blocks), default=0)
    details = dict(est.details)
    details.update({"task": recipe.task, "seq_len": recipe.seq_len, "dtype": recipe.dtype,
                    "optimizer": recipe.optimizer, "analytic": notes,
                    "accelerate": accelerate_figure(config, recipe), "block_bytes": block_bytes,
                    "phase_peaks": {p: (v.allocated, v.reserved) for p, v in peaks.items()},
                    "phase_breakdowns": {p: trace.breakdown_at(v.index, lambda n: round_size(n, conf))
                                         for p, v in peaks.items() if v.index >= 0}})
    details["phases"] = {p: (peaks[p].reserved, bd) for p, bd in details["phase_breakdowns"].items()}
    return replace(est, details=details)


def search_fit(config: Any, recipe: Recipe, batch_size: int, gpu: str, *, upper_batch: int = 4096,
               upper_seq: int | None = None) -> dict[str, Any]:
    """Largest batch (at recipe.seq_len) and longest sequence (at batch_size) that fit `gpu`:
    doubling, then bisection, each point a full trace. 0 when even 1 does not fit. Each figure comes
    with what bounds it (`*_bound`): "memory" (one more does not fit), "context_length" (the longest
    sequence reached the model's max_position_embeddings, past which it is not meant to run, whatever
    the memory) or "search_limit" (the search stops there; memory was not reached)."""
    def fits_batch(b: int) -> bool:
        return bool(estimate_model(config, recipe, b, gpu=gpu).fits)

    def fits_seq(n: int) -> bool:
        return bool(estimate_model(config, replace(recipe, seq_len=n), batch_size, gpu=gpu).fits)

    context = getattr(config, "max_position_embeddings", None)
    context = context if isinstance(context, int) and context > 0 else None
    limit_seq = upper_seq or context or 1 << 17
    from oomdoctor.estimate.estimator import largest_that_fits

    batch = largest_that_fits(fits_batch, upper_batch)
    seq = largest_that_fits(fits_seq, limit_seq)
    at_cap = "context_length" if limit_seq == context else "search_limit"
    return {"max_batch_size": batch, "max_batch_size_bound": "search_limit" if batch == upper_batch else "memory",
            "max_seq_len": seq, "max_seq_len_bound": at_cap if seq == limit_seq else "memory",
            "context_length": context}
