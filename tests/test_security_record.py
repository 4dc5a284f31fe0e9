"""GIVEN `oomdoctor record` WHEN it writes its run directory THEN the directory is private and holds no secrets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.errors import InputError
from oomdoctor.injob.record.launch import check_run_dir, make_run_dir

ROOT = Path(__file__).parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _record(run_dir: Path, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oomdoctor", "record", "-q", "--dir", str(run_dir), "--", *cmd],
                          capture_output=True, env=ENV, timeout=120)


def test_run_dir_is_created_private_and_argv_is_redacted(tmp_path):
    run = tmp_path / "run"
    rec = _record(run, sys.executable, "-c", "pass", "--password=hunter2", "--hf-token", "abc123secret",
                  "PGPASSWORD=pgsecret")
    assert rec.returncode == 0, rec.stderr
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    meta = (run / "run.json").read_text()
    for secret in ("hunter2", "abc123secret", "pgsecret"):
        assert secret not in meta
    argv = json.loads(meta)["argv"]
    assert "--password=***" in argv and argv[argv.index("--hf-token") + 1] == "***"


def test_the_timeline_holds_the_jobs_argv_and_exception_redacted(tmp_path):
    """A walkthrough found the job's own argv in the timeline's header as given (session 26): run.json was
    redacted, timeline-pid*.jsonl was not; an exception's message is written there too."""
    run = tmp_path / "run"
    job = tmp_path / "job.py"
    job.write_text("import oomdoctor\noomdoctor.step()\nraise ValueError('bad token hf_AbCdEfGhIjKlMnOpQrStUvWx12')\n")
    rec = _record(run, sys.executable, str(job), "--hf-token", "hf_RecArgTokAbCdEfGh0123456", "--db-password",
                  "RecDbPw1")
    assert rec.returncode != 0
    timelines = list(run.glob("timeline-*.jsonl"))
    assert timelines
    text = "".join(t.read_text() for t in timelines)
    for secret in ("hf_RecArgTokAbCdEfGh0123456", "RecDbPw1", "hf_AbCdEfGhIjKlMnOpQrStUvWx12"):
        assert secret not in text
    assert '"--db-password","***"' in text and "ValueError" in text


def test_world_writable_dir_is_refused_before_the_job_runs(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    marker = tmp_path / "ran"
    rec = _record(shared, sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert rec.returncode == 2
    err = rec.stderr.decode()
    assert len(err.strip().splitlines()) == 1 and "writable by other users" in err
    assert not marker.exists() and not (shared / ".bootstrap").exists()


def test_group_writable_dir_is_refused(tmp_path):
    d = tmp_path / "g"
    d.mkdir()
    d.chmod(0o770)
    with pytest.raises(InputError, match="writable by other users"):
        check_run_dir(str(d))


def test_own_private_dir_is_accepted(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    d.chmod(0o755)
    check_run_dir(str(d))
    make_run_dir(str(tmp_path / "new" / "run"))
    assert stat.S_IMODE((tmp_path / "new" / "run").stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a directory of another owner")
def test_dir_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, 12345, 12345)
    with pytest.raises(InputError, match="owned by another user"):
        check_run_dir(str(d))
