"""Ranks of one job on several nodes watch one directory on a shared filesystem: one run, not DIR-2, DIR-3...

Without a launcher run id each node keyed its ranks on their parent process, so every node after the first found
"another run" in the directory and recorded beside it. What identifies a job now: the launcher's run id, the
rendezvous point every rank connects to (MASTER_ADDR:MASTER_PORT; a loopback address with the machine), else the
scheduler's job (Slurm job and step, PMIx namespace, LSF, PBS), else the parent process. A key the next run reuses
(a fixed port, a fixed --rdzv-id) does not join a finished or dead run: every block ended, or every process of it
on this machine gone (in another pid namespace: its mark's lock free).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.injob.record import runmeta

ROOT = Path(__file__).resolve().parents[2]
JOB_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "LSB_JOBID", "PBS_JOBID",
            "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "JOB_COMPLETION_INDEX",
            "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
            "OMPI_COMM_WORLD_RANK")


@pytest.fixture
def clean_env(monkeypatch):
    for k in JOB_VARS:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def _on_node(monkeypatch, host: str, parent: int, **env: str) -> str:
    """This process as a rank on `host`, started by `parent`, with the launcher's environment: its job key."""
    monkeypatch.setattr(runmeta.socket, "gethostname", lambda: host)
    monkeypatch.setattr(runmeta.os, "getppid", lambda: parent)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return runmeta.job_key()


def _watch_as(run: Path, key: str) -> str:
    chosen = runmeta.choose_dir(str(run), key)
    os.makedirs(chosen, exist_ok=True)
    runmeta.begin(chosen, key)
    runmeta.note_process(chosen)
    return chosen


def test_ranks_of_one_job_on_two_nodes_share_the_directory(tmp_path, clean_env):
    """torchrun with a static rendezvous (--master-addr, run id "none") on two nodes, nothing else to go by."""
    run = tmp_path / "run"
    job = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "16", "TORCHELASTIC_RUN_ID": "none"}
    a = _on_node(clean_env, "node-a", 4100, RANK="0", LOCAL_RANK="0", **job)
    assert _watch_as(run, a) == str(run)
    b = _on_node(clean_env, "node-b", 7300, RANK="8", LOCAL_RANK="0", **job)
    assert b == a
    assert _watch_as(run, b) == str(run)


@pytest.mark.parametrize("env", [
    {"SLURM_JOB_ID": "81234", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "16"},
    {"PMIX_NAMESPACE": "prterun-login1-3321@1", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_RANK": "3"},
    {"LSB_JOBID": "5521", "WORLD_SIZE": "16", "RANK": "3"},
    {"PBS_JOBID": "1201.pbs-server", "WORLD_SIZE": "16", "RANK": "3"},
    {"MASTER_ADDR": "trainer-0.trainer", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "JOB_COMPLETION_INDEX": "2"},
])
def test_the_job_identity_is_the_same_on_every_node(clean_env, env):
    a = _on_node(clean_env, "node-a", 4100, **env)
    b = _on_node(clean_env, "node-b", 7300, **env)
    assert a == b and not a.startswith(("parent:", "process:"))


def test_a_loopback_rendezvous_is_one_machines(clean_env):
    """MASTER_ADDR=localhost is every single-node job's: two of them on two machines are two jobs."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}
    assert _on_node(clean_env, "node-a", 4100, **env) != _on_node(clean_env, "node-b", 4100, **env)


def test_a_job_of_another_identity_still_records_beside_it(tmp_path, clean_env):
    run = tmp_path / "run"
    a = _on_node(clean_env, "node-a", 4100, MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", WORLD_SIZE="2", RANK="0")
    assert _watch_as(run, a) == str(run)
    b = _on_node(clean_env, "node-b", 7300, MASTER_ADDR="10.0.0.9", MASTER_PORT="29500", WORLD_SIZE="2", RANK="1")
    assert _watch_as(run, b) == f"{run}-2"


DIES_INSIDE = """
import os, signal, sys, oomdoctor
with oomdoctor.watch(sys.argv[1], every_ms=20):
    oomdoctor.step()
    os.kill(os.getpid(), signal.SIGKILL)  # killed inside its block: the run never ends
"""


def test_the_next_run_with_the_same_rendezvous_does_not_join_a_dead_one(tmp_path, clean_env):
    """A fixed MASTER_PORT: the next run has the same key. The last run was killed (no block ended), but its
    processes on this machine are gone: the next run records beside it, leaving the dead run's evidence alone."""
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}
    script = tmp_path / "dies.py"
    script.write_text(DIES_INSIDE)
    child_env = {k: v for k, v in os.environ.items() if k not in JOB_VARS and not k.startswith("OOMDOCTOR")}
    child_env.update(env, PYTHONPATH=str(ROOT / "src"))
    dead = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], env=child_env, timeout=120)
    assert dead.returncode == -signal.SIGKILL
    old = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "end" not in old and old["job"].startswith("rendezvous:")
    for k, v in env.items():
        clean_env.setenv(k, v)
    key = runmeta.job_key()
    assert key == old["job"]
    assert runmeta.choose_dir(str(tmp_path / "run"), key) == f"{tmp_path / 'run'}-2"


def test_a_live_rank_on_this_machine_keeps_the_run_open(tmp_path, clean_env):
    """The first rank of a node joins while its job's ranks elsewhere run; a second rank on a node with a live one
    joins too."""
    run = tmp_path / "run"
    key = _on_node(clean_env, "node-a", 4100, MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", WORLD_SIZE="4", RANK="0")
    assert _watch_as(run, key) == str(run)  # this process: alive
    assert runmeta.choose_dir(str(run), key) == str(run)


def test_record_still_refuses_a_directory_a_watch_run_recorded_into(tmp_path):
    from oomdoctor.errors import InputError
    from oomdoctor.injob.record import launch

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    runmeta.begin(str(run), "rendezvous:10.0.0.1:29500")
    with pytest.raises(InputError, match="already holds a recording"):
        launch.check_new_run_dir(str(run))


def test_ranks_started_by_rank_0_on_one_machine_share_its_loopback_rendezvous(tmp_path, clean_env):
    """Lightning's strategy="ddp": rank 0 is the user's script (parent: the shell), rank 1 its child, both with
    MASTER_ADDR=127.0.0.1. Their parents differ; the port their rendezvous holds on this machine does not."""
    run = tmp_path / "run"
    job = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "35161", "WORLD_SIZE": "2", "NODE_RANK": "0"}
    rank0 = _on_node(clean_env, "node-a", 4100, LOCAL_RANK="0", **job)
    rank1 = _on_node(clean_env, "node-a", 4242, LOCAL_RANK="1", **job)
    assert rank0 == rank1 and rank0.startswith("rendezvous:")
    assert _watch_as(run, rank0) == str(run)
    assert _watch_as(run, rank1) == str(run)
    other_port = _on_node(clean_env, "node-a", 4100, LOCAL_RANK="0", **{**job, "MASTER_PORT": "35162"})
    assert other_port != rank0


@pytest.mark.parametrize("allocation", [
    {"LSB_JOBID": "5521"},
    {"PBS_JOBID": "1201.pbs-server"},
    {"SLURM_JOB_ID": "81234", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "4"},  # two torchruns in one step
])
@pytest.mark.parametrize("addr", ["127.0.0.1", "10.0.0.1"])
def test_two_launches_side_by_side_in_one_allocation_are_two_runs(tmp_path, clean_env, allocation, addr):
    """Two torchruns in one LSF/PBS/Slurm allocation (ports 29500 and 29600), watching one directory: the allocation
    is theirs both, the rendezvous is each one's own."""
    run = tmp_path / "run"
    job = {"MASTER_ADDR": addr, "WORLD_SIZE": "2", "RANK": "0", "TORCHELASTIC_RUN_ID": "none", **allocation}
    first = _on_node(clean_env, "node-a", 4100, MASTER_PORT="29500", **job)
    second = _on_node(clean_env, "node-a", 5100, MASTER_PORT="29600", **job)
    assert first != second
    assert _watch_as(run, first) == str(run)
    assert _watch_as(run, second) == f"{run}-2"


def test_an_allocation_without_a_rendezvous_is_still_one_job_across_nodes(clean_env):
    env = {"LSB_JOBID": "5521", "WORLD_SIZE": "16", "RANK": "3"}
    assert _on_node(clean_env, "node-a", 4100, **env) == _on_node(clean_env, "node-b", 7300, **env) == "lsf:5521"


HOLDS_A_MARK = """
import os, sys
from oomdoctor.injob.record import runmeta
os.makedirs(sys.argv[1], exist_ok=True)
runmeta.begin(sys.argv[1], sys.argv[2])
runmeta.note_process(sys.argv[1])
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
"""


def test_a_rank_in_another_pid_namespace_on_this_machine_is_not_taken_for_dead(tmp_path, clean_env):
    """Pods with hostNetwork (docker --net=host) share the machine's name, not its pids: pod A's rank is pid 1 in its
    namespace, and pod B read pid 1 (its own init, started at another time) as A's rank gone, recording into DIR-2.
    Once A's rank is gone, the next run with the same key still records beside the dead one."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True, timeout=60).returncode != 0:
        pytest.skip("no unprivileged pid namespaces here")
    run, key = tmp_path / "run", "rendezvous:10.0.0.1:29500"
    script = tmp_path / "holds.py"
    script.write_text(HOLDS_A_MARK)
    child_env = {k: v for k, v in os.environ.items() if k not in JOB_VARS and not k.startswith("OOMDOCTOR")}
    child_env.update(WORLD_SIZE="2", RANK="0", PYTHONPATH=str(ROOT / "src"))
    pod_a = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
                              sys.executable, str(script), str(run), key],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env)
    try:
        ready = pod_a.stdout.readline().split()
        assert ready[:1] == ["ready"] and int(ready[1]) != os.getpid()
        assert runmeta.choose_dir(str(run), key) == str(run)  # pod B joins pod A's live run
    finally:
        pod_a.communicate("\n", timeout=60)
    assert runmeta.choose_dir(str(run), key) == f"{run}-2"


def test_a_mark_of_another_pid_namespace_that_cannot_be_checked_counts_as_alive(tmp_path, clean_env, monkeypatch):
    """A filesystem without file locks: a process of another pid namespace cannot be told alive or dead; joining its
    run is the safer mistake (a split run hides nothing, but it is what a live rank's mark must not cause)."""
    import errno
    import fcntl

    run, key = tmp_path / "run", "rendezvous:10.0.0.1:29500"
    clean_env.setenv("WORLD_SIZE", "2")
    _watch_as(run, key)
    runmeta.release_process(str(run))
    monkeypatch.setattr(runmeta, "_pid_namespace", lambda: "4026530000")  # a checker in another namespace
    assert runmeta.choose_dir(str(run), key) == f"{run}-2"  # the mark's lock is free: its process is gone

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert runmeta.choose_dir(str(run), key) == str(run)


def test_two_lone_processes_with_the_same_loopback_port_are_two_jobs(clean_env):
    """RANK=0 WORLD_SIZE=1 and a fixed MASTER_PORT in two shells: watch() may begin before the process group holds
    the port, and a job of one process shares its run with nobody."""
    env = {"MASTER_ADDR": "localhost", "MASTER_PORT": "12355", "WORLD_SIZE": "1", "RANK": "0"}
    one = _on_node(clean_env, "node-a", 4100, **env)
    clean_env.setattr(runmeta.os, "getpid", lambda: 999_999)
    other = _on_node(clean_env, "node-a", 5100, **env)
    assert one.startswith("process:") and one != other
