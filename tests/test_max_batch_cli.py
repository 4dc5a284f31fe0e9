"""GIVEN `oomdoctor max-batch` WHEN the input is bad or there is no GPU THEN one line and exit 2;
WHEN a search result is rendered THEN text (with chart), JSON and HTML carry the trials and the fit."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.errors import InputError
from oomdoctor.render import max_batch as render
from oomdoctor.trials.search import ProbeResult, search, summarize, tolerance

MLP = """
import torch
def build(batch_size):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    return {"model": model, "inputs": (torch.randn(batch_size, 64),),
            "target": torch.randint(0, 4, (batch_size,)), "loss": torch.nn.functional.cross_entropy}
"""


def _has_cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.parametrize("argv,needle", [
    (["max-batch", "/nonexistent/w.py"], "no such workload file"),
    (["max-batch", "W", "--margin", "0.7"], "--margin"),
    (["max-batch", "W", "--min", "8", "--max", "4"], "need 1 <= min <= max"),
    (["max-batch", "W", "--fraction", "1.5"], "--fraction"),
    (["max-batch", "W", "--memory-limit", "lots"], "invalid size"),
    (["max-batch", "W", "--device", "cpu"], "CUDA devices"),
    (["max-batch", "W", "--plot", "chart.svg"], "give a .png path"),
    (["max-batch", "W", "--memory-limit", "8GiB", "--fraction", "0.5"], "not allowed with"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    w = tmp_path / "w.py"
    w.write_text(MLP)
    argv = [str(w) if a == "W" else a for a in argv]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from the parser
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


@pytest.mark.skipif(_has_cuda(), reason="checks the no-GPU path")
def test_no_gpu_is_one_line_exit_2_with_the_estimate_hint(tmp_path):
    pytest.importorskip("torch")
    w = tmp_path / "w.py"
    w.write_text(MLP)
    proc = subprocess.run([sys.executable, "-W", "ignore", "-m", "oomdoctor", "max-batch", str(w)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("oomdoctor")]
    assert len(lines) == 1 and "no CUDA GPU" in lines[0] and "oomdoctor estimate" in lines[0]
    assert proc.stdout == ""


def test_broken_workload_named_before_any_gpu_work(tmp_path, capsys):
    pytest.importorskip("torch")
    w = tmp_path / "broken.py"
    w.write_text("def build(:\n")
    assert main(["max-batch", str(w)]) == 2
    err = capsys.readouterr().err.strip()
    assert "broken.py:1: syntax error" in err and len(err.splitlines()) == 1


def _payload():
    GiB, MiB = 1024**3, 1024**2

    def probe(b):
        peak = math.ceil((1 * GiB + 60 * MiB * b) / (2 * MiB)) * 2 * MiB
        return ProbeResult("ok", peak, GiB // 2, GiB // 4, 2.5) if peak <= 12 * GiB else ProbeResult("oom")

    r = search(probe, 12 * GiB)
    return {"workload": "w.py", "device": "cuda:0", "gpu": "Sim GPU", "torch_version": "x",
            "gpu_total_bytes": 80 * GiB, **summarize(r), "wall_seconds": 7.5, "notes": list(r.notes)}


def test_text_report_has_formula_trials_and_chart():
    p = _payload()
    out = render.text(p)
    assert f"max batch size: {p['max_batch_size']}" in out
    assert "memory(batch) = " in out and "MiB x batch" in out
    chart = out.split("\n\n", 1)[1]
    assert chart.count("o") >= 3 and "=" in chart and "|" in chart
    assert "limit - margin" in chart


def test_json_and_html(tmp_path, capsys):
    from oomdoctor.render.envelope import dumps

    p = _payload()
    doc = json.loads(dumps(p))
    assert doc["schema_version"] == 1 and doc["max_batch_size"] == p["max_batch_size"]
    assert {"batch", "purpose", "outcome", "peak_reserved_bytes"} <= set(doc["trials"][0])
    page = render.html(p)
    assert page.startswith("<!doctype html>") and "<svg" in page and "limit - 5% margin" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_png_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "c.png"
    out.write_bytes(render.png(_payload()))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
def test_real_search_on_the_gpu(tmp_path):
    from oomdoctor.trials.max_batch import find_max_batch

    w = Path(tmp_path / "w.py")
    w.write_text(MLP)
    run = find_max_batch(str(w), memory_limit=1 << 30, max_batch=4096, use_estimator=False)
    assert run.result.batch_size is not None and len(run.result.trials) <= 6


def test_orchestrator_with_fake_trial_children(tmp_path, monkeypatch):
    """find_max_batch end to end without a GPU: the child processes' JSON is simulated (a flat start set
    by the optimizer step, as BERT-base on the H100), everything else is the real code path."""
    from oomdoctor.trials import max_batch as mb

    GiB, MiB = 1024**3, 1024**2
    w = tmp_path / "w.py"
    w.write_text(MLP)
    calls = []

    def fake_child(args, timeout):
        calls.append(args)
        if "--info" in args:
            return {"outcome": "ok", "total_bytes": 80 * GiB, "limit_bytes": 10 * GiB, "free_bytes": 78 * GiB,
                    "gpu": "Fake H100", "torch": "x", "wall": 0.1}
        b = int(args[args.index("--batch") + 1])
        fb = 1.9 * GiB + 104 * MiB * b
        peak = math.ceil(max(fb + 50 * MiB, 2.35 * GiB) / (2 * MiB)) * 2 * MiB
        if peak > 10 * GiB:
            return {"outcome": "oom", "detail": "CUDA out of memory.", "wall": 1.0}
        return {"outcome": "ok", "peak_reserved_bytes": peak, "peak_allocated_bytes": int(max(fb, 2.3 * GiB)),
                "fb_peak_bytes": int(fb), "static_bytes": int(1.3 * GiB), "grad_bytes": int(0.44 * GiB),
                "wall": 2.0}

    monkeypatch.setattr(mb, "run_child", fake_child)
    run = mb.find_max_batch(str(w), memory_limit=10 * GiB, use_estimator=False)
    r = run.result
    truth = max(b for b in range(1, 200) if math.ceil((1.9 * GiB + 104 * MiB * b + 50 * MiB) / (2 * MiB)) * 2 * MiB
                <= r.budget_bytes)
    assert len(r.trials) <= 5 and truth - tolerance(truth) <= r.batch_size <= truth
    assert all(t.result.seconds == 2.0 for t in r.trials if t.result.ok)  # fields land where they belong
    assert run.gpu == "Fake H100" and calls[1][calls[1].index("--memory-limit") + 1] == str(10 * GiB)
    from oomdoctor.cli.max_batch import payload_of

    p = payload_of(run)
    assert p["max_batch_size"] == r.batch_size and p["trials"][0]["seconds"] == 2.0


def test_phase_peaks_split_forward_backward_from_the_optimizer_step():
    """The trial child's bookkeeping, with a fake allocator: optimizer.step's peak must not leak into
    the forward+backward peak, and the overall peaks must survive the resets."""
    from types import SimpleNamespace

    from oomdoctor.trials.child import _PhasePeaks

    class FakeCuda:
        alloc_peak = reserved_peak = 0

        def max_memory_allocated(self, dev):
            return self.alloc_peak

        def max_memory_reserved(self, dev):
            return self.reserved_peak

        def reset_peak_memory_stats(self, dev):
            self.alloc_peak = self.reserved_peak = 0

    cuda = FakeCuda()
    peaks = _PhasePeaks(SimpleNamespace(cuda=cuda), "cuda:0")

    class Opt:
        def step(self):
            cuda.alloc_peak, cuda.reserved_peak = 900, 1000  # AdamW temporaries

    opt = Opt()
    peaks.wrap(opt)
    for fb in (500, 600, 550):  # three steps: forward+backward peaks, then the optimizer's
        cuda.alloc_peak, cuda.reserved_peak = fb, fb + 20
        opt.step()
    peaks.mark(fwd_bwd=False)
    assert (peaks.fb, peaks.allocated, peaks.reserved) == (600, 900, 1000)


def test_orchestrator_starts_from_the_real_estimator(monkeypatch):
    """With the estimator installed, the first trial is the estimator's batch; the simulated GPU's slope
    is 50 % steeper than the estimator's line (as the token-MLP's was on the H100)."""
    pytest.importorskip("oomdoctor.estimate.estimator")
    from oomdoctor.trials import max_batch as mb

    GiB = 1024**3
    path = str(Path(__file__).resolve().parents[1] / "validation" / "workloads" / "token_mlp.py")
    prior, why = mb.estimator_prior(path, 10 * GiB, "NVIDIA H100 80GB HBM3")
    assert prior is not None and prior.slope > 0, why

    def fake_child(args, timeout):
        if "--info" in args:
            return {"outcome": "ok", "total_bytes": 80 * GiB, "limit_bytes": 10 * GiB, "free_bytes": 78 * GiB,
                    "gpu": "NVIDIA H100 80GB HBM3", "torch": "x", "wall": 0.1}
        b = int(args[args.index("--batch") + 1])
        fb = 0.35 * GiB + 1.5 * prior.slope * b
        if fb + 0.1 * GiB > 10 * GiB:
            return {"outcome": "oom", "detail": "CUDA out of memory.", "wall": 1.0}
        return {"outcome": "ok", "peak_reserved_bytes": int(fb + 0.1 * GiB), "peak_allocated_bytes": int(fb),
                "fb_peak_bytes": int(fb), "static_bytes": int(0.2 * GiB), "grad_bytes": int(0.05 * GiB), "wall": 2.0}

    monkeypatch.setattr(mb, "run_child", fake_child)
    run = mb.find_max_batch(path, memory_limit=10 * GiB)
    r = run.result
    assert r.trials[0].purpose == "estimator" and r.trials[0].result.ok and len(r.trials) <= 5
    assert r.trials[1].purpose == "estimator-prediction"
    assert "started from the estimator" in run.notes
    truth = int((r.budget_bytes - 0.45 * GiB) / (1.5 * prior.slope))
    assert truth - tolerance(truth) <= r.batch_size <= truth


SEQ_WL = """
import torch

def build(batch_size, seq_len=128):
    return {"model": torch.nn.Linear(8, 8), "inputs": (torch.randn(batch_size, seq_len, 8),)}
"""


def test_orchestrator_searches_the_sequence_length_at_a_fixed_batch(tmp_path, monkeypatch):
    from oomdoctor.cli.max_batch import payload_of
    from oomdoctor.render import max_batch as render
    from oomdoctor.trials import max_batch as mb

    GiB, MiB = 1024**3, 1024**2
    w = tmp_path / "seq.py"
    w.write_text(SEQ_WL)
    seen = []

    def fake_child(args, timeout):
        if "--info" in args:
            return {"outcome": "ok", "total_bytes": 80 * GiB, "limit_bytes": 10 * GiB, "free_bytes": 78 * GiB,
                    "gpu": "Fake H100", "torch": "x", "wall": 0.1}
        b, seq = int(args[args.index("--batch") + 1]), int(args[args.index("--seq") + 1])
        seen.append((b, seq))
        alloc = GiB + 4 * b * (2 * MiB * seq + 600 * seq * seq)  # attention: quadratic in the sequence
        if alloc > 10 * GiB:
            return {"outcome": "oom", "detail": "CUDA out of memory.", "wall": 1.0}
        return {"outcome": "ok", "peak_reserved_bytes": alloc, "peak_allocated_bytes": alloc, "fb_peak_bytes": alloc,
                "static_bytes": GiB, "grad_bytes": 0, "wall": 1.0, "tokens_per_s": 1000.0 * b * seq / (seq + 500),
                "alloc_retries": 0, "survived_ooms": 0}

    monkeypatch.setattr(mb, "run_child", fake_child)
    run = mb.find_max_batch(str(w), memory_limit=10 * GiB, dim="seq", batch=4, margin=0.0)
    truth = max(q for q in range(1, 9000) if GiB + 16 * (2 * MiB * q + 600 * q * q) <= 10 * GiB)
    r = run.result
    assert all(b == 4 for b, _ in seen) and truth - tolerance(truth) <= r.batch_size <= truth
    p = payload_of(run)
    assert p["dim"] == "seq" and p["fixed_batch"] == 4 and p["recommended_batch_size"] is not None
    out = render.text(p)
    assert "max sequence length:" in out and "tokens/s" in out
    assert "throughput (tokens/s)" in render.html(p)


def test_seq_needs_a_seq_len_argument(tmp_path):
    from oomdoctor.trials import max_batch as mb

    w = tmp_path / "w.py"
    w.write_text(MLP)
    with pytest.raises(InputError, match="seq_len"):
        mb.find_max_batch(str(w), memory_limit=1 << 30, dim="seq")


def test_a_trial_that_fails_in_the_workloads_code_names_its_line(tmp_path, monkeypatch, capsys):
    # session 27: a broken workload file is named with its line (docs/max-batch.md), as `estimate` names it
    from oomdoctor.trials import child
    from oomdoctor.trials import max_batch as mb
    from oomdoctor.workload.load import load_workload
    from oomdoctor.workload.step import StepRunner

    wl = str(Path(__file__).parent / "fixtures" / "workloads" / "raise_fwd.py")

    def cpu_trial(path, batch, **kw):  # the trial's step, on the CPU: the error comes from the user's forward
        StepRunner(load_workload(path).spec(batch), device_type="cpu").step()

    monkeypatch.setattr(child, "run_trial", cpu_trial)
    child.main([wl, "--batch", "2"])
    out = json.loads(capsys.readouterr().out.split(child.RESULT_PREFIX, 1)[1])
    assert out["outcome"] == "error" and out["line"] == ":11" and "Block wants 4 features" in out["detail"]

    def fake_child(args, timeout):
        if "--info" in args:
            return {"outcome": "ok", "total_bytes": 1 << 34, "limit_bytes": 1 << 33, "gpu": "Fake", "torch": "x"}
        return out

    monkeypatch.setattr(mb, "run_child", fake_child)
    with pytest.raises(InputError, match=r"raise_fwd\.py:11: the trial at batch \d+ failed: ValueError: Block"):
        mb.find_max_batch(wl, memory_limit=1 << 33, use_estimator=False)
