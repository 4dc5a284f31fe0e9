"""oomdoctor.watch writes run.json (how the block ended) and never mixes two runs; `record` refuses a used --dir.

A walkthrough (session 27) found every watch() run reported as "cut short" (no run.json), and a second
`record --dir` into the same directory listing both jobs' processes in one report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import sys, oomdoctor

class OutOfMemoryError(RuntimeError):
    pass

how = sys.argv[2]
try:
    with oomdoctor.watch(sys.argv[1], every_ms=20):
        for _ in range(5):
            oomdoctor.step()
        if how == "oom":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if how == "error":
            raise ValueError("bad batch")
except Exception as exc:
    print("caught", type(exc).__name__)
print("done")
"""


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


def _job(tmp_path, run, how):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    return subprocess.run([sys.executable, str(script), str(tmp_path / run), how], capture_output=True, text=True,
                          env=_env(), cwd=tmp_path, timeout=120)


def _report(run_dir, fmt="text"):
    out = subprocess.run([sys.executable, "-m", "oomdoctor", "report", str(run_dir), "--format", fmt],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode in (0, 1) and not out.stderr, out.stderr  # 1: the verdict is a warning or an error
    return out.stdout


def test_a_watch_run_that_ends_normally_is_not_cut_short(tmp_path):
    job = _job(tmp_path, "run", "clean")
    assert job.returncode == 0 and "done" in job.stdout, job.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["recorded_by"] == "watch" and meta["ended_by"] == "watch"
    assert meta["returncode"] is None and meta["end"] >= meta["start"] and "exception" not in meta
    text = _report(tmp_path / "run")
    assert "cut short" not in text
    assert "ended: the watched block (oomdoctor.watch) ended normally" in text
    doc = json.loads(_report(tmp_path / "run", "json"))
    assert doc["ended"] == "the watched block (oomdoctor.watch) ended normally"
    assert doc["meta"]["ended_by"] == "watch"


def test_a_watch_block_that_raises_is_ended_by_its_exception(tmp_path):
    job = _job(tmp_path, "run", "error")
    assert "caught ValueError" in job.stdout, job.stderr  # the exception reached the job unchanged
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["exception"]["type"] == "ValueError" and meta["exception"]["oom"] is False
    text = _report(tmp_path / "run")
    assert "ended: the watched block (oomdoctor.watch) raised an exception (ValueError)" in text
    assert "cut short" not in text


def test_a_watch_block_ended_by_an_oom_says_so(tmp_path):
    job = _job(tmp_path, "run", "oom")
    assert "caught OutOfMemoryError" in job.stdout, job.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["exception"] == {"type": "OutOfMemoryError", "oom": True, "pid": meta["exception"]["pid"]}
    assert "raised a CUDA out-of-memory error (OutOfMemoryError)" in _report(tmp_path / "run")


def test_a_run_json_with_a_start_but_no_exit_status_is_still_cut_short(tmp_path):
    _job(tmp_path, "run", "clean")
    path = tmp_path / "run" / "run.json"
    meta = json.loads(path.read_text())
    for k in ("end", "returncode", "ended_by", "recorded_by", "blocks_ended"):  # as `record` leaves it when it dies
        meta.pop(k)
    path.write_text(json.dumps(meta))
    text = _report(tmp_path / "run")
    assert "ended: exit status not recorded (the recording was cut short)" in text
    assert "cut short" in text.split("verdict:", 1)[1]


def test_a_process_killed_inside_the_watched_block_is_cut_short(tmp_path):
    """run.json is begun at the start: a block that never ends leaves no end, and that is a cut-short run."""
    _job(tmp_path, "run", "clean")
    path = tmp_path / "run" / "run.json"
    meta = json.loads(path.read_text())
    for k in ("end", "returncode", "ended_by"):
        meta.pop(k)
    path.write_text(json.dumps(meta))
    assert "the recording was cut short" in _report(tmp_path / "run")


def test_an_old_watch_run_without_run_json_is_not_called_cut_short(tmp_path):
    _job(tmp_path, "run", "clean")
    (tmp_path / "run" / "run.json").unlink()
    text = _report(tmp_path / "run")
    assert "cut short" not in text and "no run.json: an in-process recording" in text


def test_watch_into_a_directory_holding_another_run_records_beside_it(tmp_path):
    first = _job(tmp_path, "run", "clean")
    assert first.stderr.count("already holds") == 0
    second = _job(tmp_path, "run", "error")
    assert "caught ValueError" in second.stdout and "done" in second.stdout  # never raised into the job
    assert second.stderr.count("already holds another run's recording") == 1, second.stderr
    assert f"recording into {tmp_path / 'run'}-2" in second.stderr
    assert len(list((tmp_path / "run").glob("timeline-*.jsonl"))) == 1  # the first run is left alone
    assert json.loads((tmp_path / "run" / "run.json").read_text()).get("exception") is None
    assert json.loads((tmp_path / "run-2" / "run.json").read_text())["exception"]["type"] == "ValueError"
    third = _job(tmp_path, "run", "clean")
    assert f"recording into {tmp_path / 'run'}-3" in third.stderr


def test_watch_joins_a_run_json_of_its_own_job(tmp_path, monkeypatch):
    """Ranks of one job (same launcher run id) watch the same directory: one run, not run-2."""
    from oomdoctor.injob.record import runmeta

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    run = tmp_path / "run"
    run.mkdir()
    runmeta.begin(str(run), runmeta.job_key())
    (run / "timeline-rank1.jsonl").write_text("")
    assert runmeta.choose_dir(str(run), runmeta.job_key()) == str(run)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-b")
    assert runmeta.choose_dir(str(run), runmeta.job_key()) == f"{run}-2"


def test_finish_keeps_the_first_exception_of_a_job(tmp_path):
    from oomdoctor.injob.record import runmeta

    runmeta.begin(str(tmp_path), "k")
    runmeta.finish(str(tmp_path), MemoryError(), True)
    runmeta.finish(str(tmp_path), None, False)  # another rank leaving its block cleanly afterwards
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["exception"]["type"] == "MemoryError" and meta["ended_by"] == "watch"


def test_record_refuses_a_dir_that_already_holds_a_recording(tmp_path):
    def record(*cmd):
        return subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(tmp_path / "run"),
                               "--", *cmd], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)

    assert record(sys.executable, "-c", "print('first')").returncode == 0
    second = record(sys.executable, "-c", "print('second')")
    assert second.returncode == 2 and "second" not in second.stdout  # refused before anything ran
    assert second.stderr.count("\n") == 1 and "already holds a recording" in second.stderr
    assert "Traceback" not in second.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "print('first')" in " ".join(meta["argv"])


def test_a_second_watch_block_of_one_process_is_a_new_run(tmp_path):
    """A notebook cell run twice: the first block ended, so the second records beside it, not appended to it."""
    script = tmp_path / "twice.py"
    script.write_text(
        "import sys, oomdoctor\n"
        "for _ in range(2):\n"
        "    with oomdoctor.watch(sys.argv[1], every_ms=20):\n"
        "        oomdoctor.step()\n")
    job = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                         env=_env(), cwd=tmp_path, timeout=120)
    assert job.returncode == 0 and job.stderr.count("already holds another run's recording") == 1, job.stderr
    for run in ("run", "run-2"):
        (timeline,) = (tmp_path / run).glob("timeline-*.jsonl")
        kinds = [json.loads(x)["kind"] for x in timeline.read_text().splitlines()]
        assert kinds.count("header") == 1 and kinds.count("step") == 1, (run, kinds)


def test_a_run_id_reused_by_the_next_job_is_a_new_run_once_every_rank_ended(tmp_path, monkeypatch):
    """A fixed --rdzv-id: the same key for two jobs. While ranks are still in their blocks the directory is
    joined; once WORLD_SIZE blocks have ended, the next job records beside it."""
    from oomdoctor.injob.record import runmeta

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "fixed")
    monkeypatch.setenv("WORLD_SIZE", "2")
    run = tmp_path / "run"
    run.mkdir()
    key = runmeta.job_key()
    runmeta.begin(str(run), key)
    runmeta.finish(str(run), None, False)  # rank 0 left its block
    assert runmeta.choose_dir(str(run), key) == str(run)  # rank 1 may still join
    runmeta.finish(str(run), None, False)  # rank 1 left its block: the job is over
    assert runmeta.choose_dir(str(run), key) == f"{run}-2"
