"""LLM-era recipes under the estimator (issue 18), on tiny Hugging Face configs: dtype conversion with
tied embeddings, dtype loading, peft LoRA, checkpointing either way, encoder-decoders, generate() with
its KV cache, gradient accumulation. Each check is one that a wrong trace fails."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from oomdoctor.errors import InputError, UsageError  # noqa: E402
from oomdoctor.estimate.allocator import replay  # noqa: E402
from oomdoctor.estimate.estimator import estimate  # noqa: E402
from oomdoctor.estimate.fake_module import fake_safe_apply  # noqa: E402
from oomdoctor.estimate.trace import trace_spec  # noqa: E402
from oomdoctor.workload.load import WorkloadSpec  # noqa: E402

V = 512


def llama_cfg(**kw):
    base = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=True)
    base.update(kw)
    return transformers.LlamaConfig(**base)


def ids(b, n=32):
    return torch.randint(0, V, (b, n))


def _trace(build, b=2):
    holder = {}

    def make():
        holder["spec"] = WorkloadSpec.from_dict(build(b))
        return holder["spec"]
    trace, info = trace_spec(make)
    return trace, info, holder["spec"]


def _bytes(trace, category):
    """Bytes of every storage ever labelled `category` (labels are set on live storages only)."""
    sizes = {sid: n for op, sid, n, _ in trace.events if op == "a"}
    return sum(sizes[sid] for sid, cat in trace.categories.items() if cat == category)


def _unique_param_bytes(model):
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


def test_fake_safe_apply_keeps_tied_weights_tied_and_converts_grads():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), fake_safe_apply():
        emb, head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)
        head.weight = emb.weight
        emb.weight.grad = torch.zeros(10, 4)
        model = torch.nn.Sequential(emb, head).to(torch.bfloat16)
        assert model[0].weight is model[1].weight
        assert model[0].weight.dtype == torch.bfloat16 and model[0].weight.grad.dtype == torch.bfloat16
        assert isinstance(model[1].weight, torch.nn.Parameter) and model[1].weight.requires_grad
    assert torch.nn.Module._apply is not None and "fake_module" not in torch.nn.Module._apply.__module__


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2"])
def test_dtype_conversion_with_tied_embeddings_traces_one_weight(arch):
    def build(b):
        if arch == "llama":
            model = transformers.LlamaForCausalLM(llama_cfg()).to(torch.bfloat16)
        elif arch == "gpt2":
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_embd=64, n_layer=2,
                                                                         n_head=4, n_positions=64)).half()
        else:
            cfg = transformers.Qwen2Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
            model = transformers.Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16)  # torch_dtype loading
        x = ids(b)
        return {"model": model, "inputs": {"input_ids": x, "labels": x}, "optimizer": "adamw"}

    trace, info, spec = _trace(build)
    model = spec.model
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert {p.dtype for p in model.parameters()} <= {torch.bfloat16, torch.float16}
    assert info["parameter_bytes"] == _unique_param_bytes(model)  # the tied weight once, in 16 bits
    # AdamW's exp_avg and exp_avg_sq: two per (unique) parameter, in the parameter's dtype
    assert _bytes(trace, "optimizer_state") == 2 * _unique_param_bytes(model)


def _lora_build(targets, input_grads=False, ckpt=None):
    peft = pytest.importorskip("peft")

    def build(b):
        model = transformers.LlamaForCausalLM(llama_cfg()).to(torch.bfloat16)
        if ckpt is not None:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ckpt})
        if input_grads:
            model.enable_input_require_grads()
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=targets))
        x = ids(b, 64)
        return {"model": model, "inputs": {"input_ids": x, "labels": x}, "optimizer": "adamw"}
    return build


@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], "all-linear"])
def test_lora_optimizer_state_and_gradients_cover_only_the_adapters(targets):
    trace, info, spec = _trace(_lora_build(targets))
    trainable = [p for p in spec.model.parameters() if p.requires_grad]
    frozen = [p for p in spec.model.parameters() if not p.requires_grad]
    assert trainable and frozen
    lora_bytes = sum(p.numel() * p.element_size() for p in trainable)
    assert _bytes(trace, "optimizer_state") == 2 * lora_bytes
    assert _bytes(trace, "gradients") == 3 * lora_bytes  # one set of gradients per step, three steps
    assert info["parameter_bytes"] == _unique_param_bytes(spec.model)


@pytest.mark.parametrize("reentrant", [True, False])
def test_lora_with_checkpointing_either_way_lowers_the_activation_peak(reentrant):
    plain = replay(_trace(_lora_build(["q_proj", "v_proj"], input_grads=True), b=4)[0].events).peak_allocated
    ckpt = replay(_trace(_lora_build(["q_proj", "v_proj"], input_grads=True, ckpt=reentrant),
                         b=4)[0].events).peak_allocated
    assert ckpt < plain


@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_encoder_decoders_train_with_every_parameter_once(arch):
    def build(b):
        if arch == "t5":
            cfg = transformers.T5Config(vocab_size=V, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16,
                                        decoder_start_token_id=0, pad_token_id=0)
            model = transformers.T5ForConditionalGeneration(cfg)
        else:
            cfg = transformers.BartConfig(vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2,
                                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                          decoder_ffn_dim=128, max_position_embeddings=64)
            model = transformers.BartForConditionalGeneration(cfg)
        return {"model": model, "inputs": {"input_ids": ids(b), "labels": ids(b, 16)}, "optimizer": "adamw",
                "amp": "bf16" if arch == "bart" else None}

    trace, info, spec = _trace(build)
    assert info["parameter_bytes"] == _unique_param_bytes(spec.model)
    assert _bytes(trace, "optimizer_state") == 2 * info["parameter_bytes"]


def _gen_build(new_tokens, beams=1):
    def build(b):
        cfg = llama_cfg(hidden_size=512, num_attention_heads=8, num_key_value_heads=8, intermediate_size=256)
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
        return {"model": model, "inputs": {"input_ids": ids(b, 16), "attention_mask": torch.ones(b, 16, dtype=torch.long)},
                "generate": {"max_new_tokens": new_tokens, "num_beams": beams, "do_sample": False, "pad_token_id": 0}}
    return build


def test_generate_kv_cache_grows_with_new_tokens_and_beams():
    b = 4
    short = estimate(_gen_build(24), b).peak_allocated_bytes
    long = estimate(_gen_build(56), b).peak_allocated_bytes
    # K and V, 2 layers, 8 heads x 64, bf16: 32 more tokens of cache at least
    assert long - short >= 2 * 2 * b * 8 * 64 * 32 * 2
    beams = estimate(_gen_build(24, beams=3), b).peak_allocated_bytes
    assert beams > short


def test_generate_needs_max_new_tokens():
    def build(b):
        return {"model": transformers.LlamaForCausalLM(llama_cfg()), "inputs": {"input_ids": ids(b)}, "generate": {}}
    with pytest.raises(InputError, match="max_new_tokens"):
        estimate(build, 1)


def test_gradient_accumulation_runs_every_micro_batch():
    def build(accum):
        def b_(b):
            x = ids(b)
            return {"model": transformers.LlamaForCausalLM(llama_cfg()), "inputs": {"input_ids": x, "labels": x},
                    "optimizer": "adamw", "accumulation_steps": accum}
        return b_
    one, _, _ = _trace(build(1))
    two, _, _ = _trace(build(2))
    assert sum(1 for m in two.marks if m[1].endswith("/backward")) == 2 * sum(
        1 for m in one.marks if m[1].endswith("/backward"))


@pytest.mark.parametrize("raw, msg", [({"generate": 3}, "generate"), ({"accumulation_steps": 0}, "accumulation"),
                                      ({"accumulation_steps": True}, "accumulation")])
def test_new_workload_keys_are_checked(raw, msg):
    with pytest.raises(InputError, match=msg):
        WorkloadSpec.from_dict({"model": None, "inputs": None, **raw})


# --- estimate --model: the config front end --------------------------------------------------------

import json  # noqa: E402

from oomdoctor.cli import main  # noqa: E402
from oomdoctor.estimate import hf  # noqa: E402

CONFIG = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
          "max_position_embeddings": 256}


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def _cli_json(capsys, *argv):
    rc = main(["estimate", *argv, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("task, extra", [("train", []), ("lora", ["--lora-targets", "q_proj,v_proj"]),
                                         ("infer", []), ("generate", ["--max-new-tokens", "4"])])
def test_cli_model_tasks_report_breakdown_and_accelerate(capsys, model_dir, task, extra):
    rc, out = _cli_json(capsys, "--model", str(model_dir), "--task", task, "--batch-size", "2", "--seq-len", "32",
                        *extra)
    assert rc == 0
    assert out["task"] == task and out["peak_reserved_bytes"] > 0
    for key in ("parameters", "gradients", "optimizer_state", "activations", "workspace", "context"):
        assert key in out["breakdown"]
    assert out["accelerate_estimate"]["source"].startswith("accelerate")
    # accelerate counts fp32 weights; the tied embedding once: same parameter count as ours, 4 bytes each
    if task == "infer":
        assert out["accelerate_estimate_bytes"] == (out["parameter_count"] * 4 + 2 * 8 * 4) // 2  # + rotary buffers
    if task == "lora":
        assert out["breakdown"]["optimizer_state"] < out["breakdown"]["parameters"]
    if task == "train":  # the (batch, seq, vocab) logits and their loss gradient are told apart
        assert out["breakdown"]["logits"] >= 2 * 32 * V * 2


def test_cli_model_analytic_recipes_are_labelled_and_smaller(capsys, model_dir):
    _, lora = _cli_json(capsys, "--model", str(model_dir), "--task", "lora", "--batch-size", "2", "--seq-len", "32")
    _, qlora = _cli_json(capsys, "--model", str(model_dir), "--task", "qlora", "--batch-size", "2", "--seq-len", "32")
    assert not lora["analytic"] and "4-bit" in qlora["analytic"][0]
    assert qlora["breakdown"]["parameters"] < lora["breakdown"]["parameters"]
    _, full = _cli_json(capsys, "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32")
    _, b8 = _cli_json(capsys, "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32",
                      "--optimizer", "adamw-8bit")
    assert "8-bit" in b8["analytic"][0] and b8["breakdown"]["optimizer_state"] < full["breakdown"]["optimizer_state"]


def test_8bit_and_nf4_sizes():
    assert hf._adam8bit_bytes(100, 400) == 400  # small tensors stay 32-bit
    assert hf._adam8bit_bytes(4096 * 4, 4096 * 16) == 4096 * 4 + 4 * 8
    assert hf._nf4_bytes(4096 * 4096) < 4096 * 4096 * 2 // 3


def test_largest_search_is_exact():
    from oomdoctor.estimate.estimator import largest_that_fits  # the search --max-batch and --model share

    for true in (0, 1, 5, 64, 100):
        assert largest_that_fits(lambda n, t=true: n <= t, 4096) == true
    assert largest_that_fits(lambda n: True, 300) == 300


@pytest.mark.parametrize("argv, msg", [
    (["--model", "/nonexistent/dir"], "no such file"),
    (["--model", "{cfg}", "--task", "pretrain"], "--task"),
    (["--model", "{cfg}", "--dtype", "int3"], "--dtype"),
    (["--model", "{cfg}", "--optimizer", "lion"], "--optimizer"),
    (["--model", "{bad}"], "model_type"),
    (["--model", "{vit}"], "no causal language model"),
    (["--model", "{cfg}", "--task", "lora", "--lora-targets", "nope_proj", "--seq-len", "64"], "nope_proj"),
    (["--model", "{gpt2}", "--seq-len", "512"], "context length (max_position_embeddings 256)"),  # a learned table
    ([], "WORKLOAD.py or --model"),
])
def test_cli_model_bad_input_is_one_line_exit_2(capsys, model_dir, tmp_path, argv, msg):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": 3}')
    vit = tmp_path / "vit.json"
    vit.write_text('{"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}')
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text('{"model_type": "gpt2", "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 4, '
                    '"vocab_size": 256}')
    argv = [a.format(cfg=model_dir / "config.json", bad=bad, vit=vit, gpt2=gpt2) for a in argv]
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_reduced_depth_composition_matches_full_depth_on_a_small_model():
    cfg = hf.load_config_dict(dict(CONFIG, num_hidden_layers=18))
    recipe = hf.Recipe(task="train", seq_len=64)
    assert hf.model_depth(cfg) == 18 and hf.model_depth(hf.with_depth(cfg, 4)) == 4
    full = hf.estimate_model(cfg, recipe, 4, reduced=False)
    red = hf.estimate_model(cfg, recipe, 4, reduced=True)  # traced at 4 and 8
    assert "reduced_depth" not in hf.estimate_model(cfg, recipe, 4).details  # default: full up to FULL_DEPTH_MAX
    assert red.details["reduced_depth"] == {"traced_depths": [4, 8], "depth": 18}
    assert red.parameter_count == full.parameter_count
    assert abs(red.peak_allocated_bytes / full.peak_allocated_bytes - 1) < 0.02
    assert -0.03 < red.peak_reserved_bytes / full.peak_reserved_bytes - 1 < 0.10
    assert abs(red.breakdown["optimizer_state"] - full.breakdown["optimizer_state"]) <= 0.02 * full.breakdown[
        "optimizer_state"] or full.peak_phase != red.peak_phase


def test_cli_model_parallel_per_rank_is_marked_not_validated(capsys, model_dir):
    _, out = _cli_json(capsys, "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32", "--parallel", "zero3",
                       "--ranks", "4")
    rank = out["per_rank"]
    assert rank["validated_on_hardware"] is False and rank["ranks"] == 4
    # DeepSpeed's layout: fp32 master + fp32 AdamW state over 1/4 of the parameters (12 P / 4 bytes)
    # against the bf16 recipe's bf16 AdamW state on one GPU (4 P bytes)
    single = out["breakdown"]["optimizer_state"]
    assert single / 4 < rank["breakdown"]["optimizer_state"] <= 0.8 * single
    assert rank["traced"] is True and "DeepSpeed" in rank["validation"]
    assert main(["estimate", "--model", str(model_dir), "--parallel", "fsdp-hybrid", "--ranks", "6",
                 "--shard-size", "4"]) == 2


def test_with_parallel_the_headline_is_the_per_rank_figure(capsys, model_dir):
    """Walkthrough (session 27): the headline said one GPU's peak and the per-rank answer sat in a ~400-character
    line at the bottom."""
    from oomdoctor.units import format_bytes

    argv = ["--model", str(model_dir), "--batch-size", "2", "--seq-len", "32", "--parallel", "zero3", "--ranks", "2",
            "--memory-limit", "8GiB"]
    _, doc = _cli_json(capsys, *argv)
    assert main(["estimate", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(ln for ln in lines if "peak reserved" in ln)
    assert format_bytes(doc["per_rank"]["peak_reserved_bytes"]) in first and "per rank" in first
    assert "zero3 over 2 ranks" in lines[0]
    # the header names the (temporary, long) model path; accelerate's line is not about ranks
    assert all(len(ln) <= 110 for ln in lines[1:] if not ln.lstrip().startswith("accelerate estimate-memory"))
    comparison = "\n".join(lines[lines.index(next(ln for ln in lines if "for comparison" in ln)):])
    assert format_bytes(doc["peak_reserved_bytes"]) in comparison  # one GPU's figure, told as such
    # the contracted top-level keys keep their meaning: one GPU running the whole step (docs/contracts.md)
    assert doc["peak_reserved_bytes"] != doc["per_rank"]["peak_reserved_bytes"]


def test_with_parallel_the_exit_code_follows_the_per_rank_fit(capsys, model_dir, monkeypatch):
    # one GPU without parallelism not fitting is why a user shards; the per-rank fit is the finding
    rank = {"strategy": "zero3", "ranks": 8, "shard_size": None, "peak_reserved_bytes": 1 << 20,
            "process_total_bytes": 2 << 20, "breakdown": {"parameters": 1 << 20}, "peak_phase": "step2/backward",
            "validated_on_hardware": False, "validation": "test", "fits": True}
    monkeypatch.setattr(hf, "estimate_per_rank", lambda *a, **k: rank)
    argv = ["estimate", "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32", "--parallel", "zero3",
            "--memory-limit", "2MiB"]
    assert main(argv) == 0
    assert "DOES NOT FIT" not in capsys.readouterr().out.split("for comparison")[0]
    rank["fits"] = False
    assert main(argv) == 1


def test_zero3_emulation_hooks_raise_no_warning_and_filters_are_restored(capsys, tmp_path):
    """torch's "Full backward hook is firing ..." UserWarning came from our ZeRO-3 gather hooks (the embedding
    takes token ids), and leaked to the user's stderr (walkthrough, session 27)."""
    import warnings

    model_dir = tmp_path  # an embedding over DeepSpeed's persistence threshold (1e5 elements): gathered, hooked
    (tmp_path / "config.json").write_text(json.dumps(dict(CONFIG, vocab_size=4096)))

    argv = ["estimate", "--model", str(model_dir), "--batch-size", "2", "--seq-len", "32", "--parallel", "zero3",
            "--ranks", "2", "--format", "json"]
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # not hidden by an earlier test's once-per-location registry
        assert main(argv) == 0
        before = list(warnings.filters)  # after the first run: importing torch's modules adds filters of theirs
        assert main(argv) == 0
        assert list(warnings.filters) == before  # ours are taken off again
    err = capsys.readouterr().err  # the CLI shows library warnings on stderr (cli.common.library_warnings_once)
    assert "Full backward hook" not in err


def test_transformers_loss_type_warning_is_quiet_during_the_trace_only(capfd, tmp_path):
    """transformers 5 logs "`loss_type=None` was set in the config but it is unrecognized" for a model whose class
    name maps to no loss (GPT2LMHeadModel): a line on the user's terminal about the recipe's labels, not memory."""
    import logging

    clear = getattr(logging.Logger.warning_once, "cache_clear", None)  # transformers: once per process
    if clear:
        clear()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 256, "n_embd": 64,
                                                      "n_layer": 2, "n_head": 4, "vocab_size": 1000,
                                                      "bos_token_id": 0, "eos_token_id": 0}))
    logger = logging.getLogger("transformers.modeling_utils")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    before, keep = list(logger.filters), Keep()
    logger.addHandler(keep)
    try:
        assert main(["estimate", "--model", str(tmp_path), "--batch-size", "2", "--seq-len", "32",
                     "--format", "json"]) == 0
        assert "loss_type" not in capfd.readouterr().err
        assert not [m for m in seen if "loss_type" in m]
        assert logger.filters == before
        if clear:
            clear()
        logger.warning_once("`loss_type=None` was set in the config but it is unrecognized.")  # outside: kept
        assert [m for m in seen if "loss_type" in m]
    finally:
        logger.removeHandler(keep)


def test_llm_zoo_has_25_distinct_configs_whose_shapes_load():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "validation" / "estimate_llm_zoo.py"
    spec = importlib.util.spec_from_file_location("estimate_llm_zoo", path)
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    names = [z[0] for z in zoo.ZOO]
    assert len(names) >= 25 and len(set(names)) == len(names)
    assert {z[3]["task"] for z in zoo.ZOO} >= {"train", "lora", "infer", "generate"}
    for shape in {z[1] for z in zoo.ZOO}:
        cfg = zoo._config(shape)
        assert hf.model_depth(cfg) is not None
    for z in zoo.ZOO:
        zoo._recipe(z[3]).check()


def test_logits_to_keep_and_fused_adamw():
    def infer(keep):
        def build(b):
            extra = {"logits_to_keep": keep} if keep else {}
            return {"model": transformers.LlamaForCausalLM(llama_cfg()).to(torch.bfloat16),
                    "inputs": {"input_ids": ids(b, 64), "use_cache": False, **extra}, "train": False}
        return build
    full, _, _ = _trace(infer(None), b=4)
    last, _, _ = _trace(infer(1), b=4)
    logits = 4 * 64 * V * 2
    def largest(trace):
        return max(n for op, sid, n, _ in trace.events if op == "a" and trace.categories.get(sid) != "workspace")
    assert largest(full) >= logits > largest(last)

    def train(optimizer):
        def build(b):
            x = ids(b)
            return {"model": transformers.LlamaForCausalLM(llama_cfg()), "inputs": {"input_ids": x, "labels": x},
                    "optimizer": optimizer}
        return build
    fused, _, spec = _trace(train(lambda p: torch.optim.AdamW(p, fused=True)))
    foreach, _, _ = _trace(train("adamw"))
    assert _bytes(foreach, "optimizer_state") == 2 * _unique_param_bytes(spec.model)
    # fused AdamW keeps its float32 `step` counters on the device, one per parameter
    assert _bytes(fused, "optimizer_state") == _bytes(foreach, "optimizer_state") + 4 * len(list(spec.model.parameters()))


def test_sdpa_mask_needing_grad_gets_an_expanded_gradient_like_cuda():
    """T5's learned position bias reaches the memory-efficient kernel as an attn_mask that requires
    grad; CUDA expands it to (batch, heads, L, S) first, so its gradient is batch-sized."""
    b, h, n, d = 8, 4, 64, 32

    def build(bias_grad):
        class Attn(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q = torch.nn.Linear(d, d)
                self.bias = torch.nn.Parameter(torch.zeros(1, h, n, n), requires_grad=bias_grad)

            def forward(self, x):
                q = self.q(x).view(b, n, h, d // h).transpose(1, 2)
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=self.bias).sum()

        def make(bs):
            return {"model": Attn(), "inputs": (torch.randn(b, n, d),), "loss": lambda out: out, "optimizer": "sgd"}
        return make

    with_grad, _, _ = _trace(build(True))
    sizes = [n_ for op, _, n_, _ in with_grad.events if op == "a"]
    assert b * h * n * n * 4 in sizes  # the expanded bias gradient, fp32, 16-aligned last dim (64)
    without, _, _ = _trace(build(False))
    assert b * h * n * n * 4 not in [n_ for op, _, n_, _ in without.events if op == "a"]


def _sdpa_ops(mask, dropout_p=0.0, amp=False):
    """The aten ops a training SDPA call dispatches under the trace's CUDA semantics."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from oomdoctor.estimate.cuda_semantics import cuda_semantics

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            seen.append((str(func), getattr(first, "dtype", None), tuple(getattr(first, "shape", ()))))
            return out

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), cuda_semantics(amp), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp), Log():
        q = torch.randn(2, 4, 16, 8, requires_grad=True)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=dropout_p)
    return seen


def test_sdpa_mask_without_unit_last_stride_takes_the_math_path_like_cuda():
    """Every fused CUDA kernel needs the mask's last-dim stride to be 1 (sdp_utils'
    check_last_dim_stride_equals_1_dense); T5's position bias, a permuted view (transformers < 5.18),
    fails it, so CUDA runs the math path and keeps the (batch, heads, L, S) matrix."""
    bias = torch.zeros(16, 16, 4).permute(2, 0, 1).unsqueeze(0)  # (1, 4, 16, 16), stride(-1) == 4
    assert bias.stride(-1) != 1
    fused = [op for op, _, _ in _sdpa_ops(bias.contiguous(), dropout_p=0.1)]
    assert "aten._scaled_dot_product_efficient_attention.default" in fused and "aten._softmax.default" not in fused
    math = _sdpa_ops(bias, dropout_p=0.1)
    ops = [op for op, _, _ in math]
    assert "aten._scaled_dot_product_efficient_attention.default" not in ops
    assert ("aten._softmax.default", torch.float32, (2, 4, 16, 16)) in math
    # CUDA's fused dropout (bool mask), not the CPU's full-size noise tensor
    assert ("aten.native_dropout.default", torch.float32, (2, 4, 16, 16)) in math
    assert "aten.bernoulli_.float" not in ops
    # under autocast the math path computes in fp32 (its inputs were cast to bf16 first)
    amp = _sdpa_ops(bias, amp=True)
    assert ("aten._softmax.default", torch.float32, (2, 4, 16, 16)) in amp
    assert any(op == "aten._to_copy.default" and dt == torch.bfloat16 for op, dt, _ in amp)


@pytest.mark.parametrize("task", ["train", "infer", "generate"])
def test_full_length_batches_pass_no_attention_mask_outside_generate(task):
    """An all-ones attention_mask is dropped by transformers on a GPU (the values are read); under
    fake tensors it would build the 4-D mask instead, so train/infer pass none and take the GPU's path."""
    from oomdoctor.estimate.hf import Recipe, make_build

    recipe = Recipe(task=task, seq_len=16, **({"max_new_tokens": 2} if task == "generate" else {}))
    inputs = make_build(llama_cfg(), recipe)(2)["inputs"]
    assert ("attention_mask" in inputs) == (task == "generate")


def test_t5_without_mask_builds_no_batch_sized_position_bias_mask():
    """On the GPU, T5 training with full-length batches keeps the position bias (1, heads, L, L) as
    SDPA's mask; tracing with an all-ones mask used to add a (batch, heads, L, L) mask per layer."""
    from oomdoctor.estimate.hf import Recipe, make_build

    cfg = transformers.T5Config(vocab_size=V, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16,
                                decoder_start_token_id=0, pad_token_id=0)
    b, n = 4, 48  # sizes: mask 4*4*48*48*4, none of the hidden/FFN/logits tensors
    trace, _, _ = _trace(make_build(cfg, Recipe(task="train", seq_len=n, dtype="fp32")), b=b)
    # forward-built masks of that size would be one per attention layer; the gradients of the
    # position bias (expanded by the memory-efficient kernel) are the only batch-sized ones left
    forward_end = next(i for i, m in trace.marks if m == "step1/backward")
    fwd = [s for op, _, s, _ in trace.events[:forward_end] if op == "a"]
    assert b * 4 * n * n * 4 not in fwd


def _bart_cfg(layerdrop):
    return {"model_type": "bart", "vocab_size": V, "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
            "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128, "max_position_embeddings": 64, "decoder_start_token_id": 2, "pad_token_id": 1,
            "encoder_layerdrop": layerdrop, "decoder_layerdrop": layerdrop}


def test_bart_with_layerdrop_traces_every_layer():
    """BART draws torch.rand([]) per layer in training and branches on it (transformers 5.17 even with
    layerdrop 0; later versions when layerdrop > 0): the trace resolves it and keeps every layer."""
    from oomdoctor.estimate import hf

    recipe = hf.Recipe(task="train", seq_len=32, dtype="fp32", amp="bf16")
    plain = hf.estimate_model(hf.load_config_dict(_bart_cfg(0.0)), recipe, 2)
    drop = hf.estimate_model(hf.load_config_dict(_bart_cfg(0.5)), recipe, 2)
    assert drop.parameter_count == plain.parameter_count
    assert drop.peak_allocated_bytes == plain.peak_allocated_bytes
    assert drop.peak_reserved_bytes == plain.peak_reserved_bytes


def _whisper(layerdrop):
    def build(b):
        cfg = transformers.WhisperConfig(
            vocab_size=V, num_mel_bins=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
            max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
            encoder_layerdrop=layerdrop, decoder_layerdrop=layerdrop)
        return {"model": transformers.WhisperForConditionalGeneration(cfg),
                "inputs": {"input_features": torch.randn(b, 16, 64), "labels": ids(b, 16)}, "optimizer": "adamw"}
    return build


def _wav2vec2(layerdrop):
    def build(b):
        cfg = transformers.Wav2Vec2Config(
            vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4, layerdrop=layerdrop, mask_time_prob=0.0)
        # CTC's loss selects the labels by value (data-dependent shape): a loss on the logits instead
        return {"model": transformers.Wav2Vec2ForCTC(cfg), "inputs": {"input_values": torch.randn(b, 4000)},
                "loss": lambda out: out.logits.float().logsumexp(-1).mean(), "optimizer": "adamw"}
    return build


@pytest.mark.parametrize("make", [_whisper, _wav2vec2], ids=["whisper", "wav2vec2"])
def test_speech_models_with_layerdrop_trace_every_layer(make):
    plain, drop = estimate(make(0.0), 2), estimate(make(0.3), 2)
    assert (drop.peak_allocated_bytes, drop.peak_reserved_bytes) == \
        (plain.peak_allocated_bytes, plain.peak_reserved_bytes)


def test_kbit_prep_casts_what_is_not_4bit_and_runs_fp32_hidden_states():
    """--kbit-prep: norms, embeddings and lm_head in fp32, 4-bit Linears computing in bf16; the hidden
    states (and so the activations) in fp32: more activation memory than the same QLoRA without it."""
    import torch

    cfg = hf.load_config_dict(dict(CONFIG, tie_word_embeddings=False))
    model = hf.make_build(cfg, hf.Recipe(task="qlora", seq_len=32, kbit_prep=True).check())(2)["model"]
    for name, p in model.named_parameters():
        if "lora_" in name:
            continue
        four_bit = any(k in name for k in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                           "down_proj")) and name.endswith("weight")
        assert p.dtype == (torch.bfloat16 if four_bit else torch.float32), name
        assert not p.requires_grad
    with pytest.raises(UsageError):
        hf.Recipe(task="lora", kbit_prep=True).check()


def test_cli_kbit_prep_is_labelled_and_larger(capsys, model_dir):
    _, plain = _cli_json(capsys, "--model", str(model_dir), "--task", "qlora", "--batch-size", "4", "--seq-len", "64",
                         "--gradient-checkpointing")
    _, prep = _cli_json(capsys, "--model", str(model_dir), "--task", "qlora", "--batch-size", "4", "--seq-len", "64",
                        "--kbit-prep")
    assert any("prepare_model_for_kbit_training" in n for n in prep["analytic"])
    assert prep["breakdown"]["parameters"] > plain["breakdown"]["parameters"]  # fp32 embeddings and norms


def test_checkpointing_keeps_sdpa_causal_without_a_mask_as_on_the_gpu():
    """With use_cache off (gradient checkpointing) transformers checks the position ids for packed
    sequences; fake tensors cannot answer, and it used to build a full 4-D mask. On the GPU SDPA runs
    causal, grouped keys and no mask; fp32 grouped-query attention then takes CUDA's math path."""
    from oomdoctor.estimate import cuda_semantics as cs
    from oomdoctor.estimate.estimator import trace_for

    calls = []
    orig = cs.cuda_sdpa

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        calls.append((attn_mask is None, is_causal, enable_gqa, k.shape[-3] != q.shape[-3]))
        return orig(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    cs.cuda_sdpa = spy
    try:
        cfg = hf.load_config_dict(dict(CONFIG))
        trace_for(hf.make_build(cfg, hf.Recipe(task="lora", seq_len=32, gradient_checkpointing=True).check()), 2)
    finally:
        cs.cuda_sdpa = orig
    assert calls and all(c == (True, True, True, True) for c in calls), calls[:3]


@pytest.mark.parametrize("argv", [
    ["--task", "lora", "--gradient-checkpointing"],
    ["--task", "qlora", "--kbit-prep"],
    ["--task", "train", "--gradient-checkpointing", "--gpu", "l4"],  # the fit search builds the model again and again
])
def test_checkpointing_prints_nothing_about_our_own_calls(model_dir, argv):
    """New-user walkthrough (session 27): every run printed transformers' `use_cache=True` notice, peft's
    is_gradient_checkpointing FutureWarning (or torch's use_reentrant warning): all about calls oomdoctor makes.
    A fresh process, as a user's, since transformers says it once a process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "TRANSFORMERS_VERBOSITY")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "estimate", "--model", str(model_dir), "--batch-size", "2",
                           "--seq-len", "32", *argv], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "oomdoctor estimate" in proc.stdout
    assert proc.stderr.strip() == ""


def _fake_search(monkeypatch, max_seq_fits, max_batch_fits=10**9):
    """hf.search_fit over a stand-in estimate_model whose fit is a threshold (each real point is a full trace)."""
    from types import SimpleNamespace

    def fake(config, recipe, batch, gpu=None, **kw):
        return SimpleNamespace(fits=recipe.seq_len <= max_seq_fits and batch <= max_batch_fits)

    monkeypatch.setattr(hf, "estimate_model", fake)


def test_the_longest_sequence_says_whether_the_context_length_or_memory_set_it(monkeypatch):
    """New-user walkthrough (session 27): 'longest sequence that fits' printed max_position_embeddings when memory
    would have allowed more, as if memory had set it."""
    cfg = hf.load_config_dict(dict(CONFIG))  # max_position_embeddings 256
    recipe = hf.Recipe(seq_len=32)
    _fake_search(monkeypatch, max_seq_fits=10**6)
    s = hf.search_fit(cfg, recipe, 1, "l4")
    assert s["max_seq_len"] == 256 and s["max_seq_len_bound"] == "context_length" and s["context_length"] == 256
    assert s["max_batch_size"] == 4096 and s["max_batch_size_bound"] == "search_limit"
    _fake_search(monkeypatch, max_seq_fits=100, max_batch_fits=7)
    s = hf.search_fit(cfg, recipe, 1, "l4")
    assert (s["max_seq_len"], s["max_seq_len_bound"]) == (100, "memory")
    assert (s["max_batch_size"], s["max_batch_size_bound"]) == (7, "memory")
    _fake_search(monkeypatch, max_seq_fits=10**6)
    s = hf.search_fit(hf.load_config_dict({"model_type": "t5", "vocab_size": V}), recipe, 1, "l4")  # relative positions
    assert s["max_seq_len_bound"] == "search_limit" and s["context_length"] is None


def test_the_fit_search_text_says_what_bounds_each_figure(monkeypatch):
    from types import SimpleNamespace

    import oomdoctor.render.estimate as r

    est = SimpleNamespace(details={"task": "train", "seq_len": 32, "dtype": "bf16", "optimizer": "adamw"},
                          batch_size=1)
    capped = {"max_batch_size": 4096, "max_batch_size_bound": "search_limit", "max_seq_len": 256,
              "max_seq_len_bound": "context_length", "context_length": 256}
    memory = {"max_batch_size": 7, "max_batch_size_bound": "memory", "max_seq_len": 100, "max_seq_len_bound": "memory",
              "context_length": 256}
    monkeypatch.setattr(r, "estimate_text", lambda est, source: "head\n")  # the figures above the search
    a, b = r.model_text(est, "m", capped), r.model_text(est, "m", memory)
    assert "longest sequence that fits (batch 1): 256 (capped by the model's context length" in a
    assert "4096 (the search stops there" in a
    assert "longest sequence that fits (batch 1): 100 (limited by memory; the model's context length is 256)" in b
    assert "largest batch that fits (seq 32): 7 (limited by memory)" in b


def test_cli_search_on_a_tiny_model_says_the_context_length_caps_it(capsys, model_dir):
    assert main(["estimate", "--model", str(model_dir), "--seq-len", "32", "--gpu", "l4"]) == 0
    out = capsys.readouterr().out
    assert "longest sequence that fits (batch 1): 256 (capped by the model's context length" in out


def test_search_stops_on_its_time_budget_with_a_lower_bound():
    from oomdoctor.estimate.estimator import search_largest

    clock = iter(range(0, 10_000, 10))  # every call, 10 s later
    found = search_largest(lambda n: True, 1 << 20, seconds=35, clock=lambda: next(clock))
    assert found.bound == "search_limit" and found.best == 8 and "35 s of doubling" in found.stopped
    # once a batch has not fitted, the bisection runs to the edge (a few traces more): the exact answer
    clock = iter(range(0, 10_000, 10))
    found = search_largest(lambda n: n <= 100, 1 << 20, seconds=75, clock=lambda: next(clock))
    assert (found.best, found.bound, found.first_no) == (100, "memory", 101)
    assert search_largest(lambda n: n <= 100, 1 << 20) == search_largest(lambda n: n <= 100, 1 << 20, seconds=1e9)
    assert (search_largest(lambda n: n <= 100, 1 << 20).best, search_largest(lambda n: n <= 100, 1 << 20).bound) == \
        (100, "memory")
