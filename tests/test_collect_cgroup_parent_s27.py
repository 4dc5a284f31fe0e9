"""The job's own cgroup says memory.max = max, a parent's says 3 GiB (a Slurm job, a pod-level limit): the limit
is 3 GiB, as the recorder reads it (review, session 27: doctor and record disagreed)."""

from __future__ import annotations

from oomdoctor.collectors.cgroup import collect_cgroup
from oomdoctor.collectors.context import CollectContext

GiB = 1 << 30


def _machine(tmp_path, step_max="max", job_max=str(3 * GiB)):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/slurm/uid_0/job_7/step_0\n")
    (tmp_path / "proc/mounts").write_text("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n")
    job = tmp_path / "sys/fs/cgroup/slurm/uid_0/job_7"
    (job / "step_0").mkdir(parents=True)
    (job / "step_0/memory.max").write_text(step_max + "\n")
    (job / "step_0/memory.current").write_text(f"{GiB}\n")
    (job / "memory.max").write_text(job_max + "\n")
    (job.parent / "memory.max").write_text(f"{8 * GiB}\n")
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("memory\n")
    return {f.key: f for f in collect_cgroup(CollectContext(root=tmp_path, env={}, gpu=None))}


def test_a_parents_limit_binds_when_the_jobs_cgroup_has_none(tmp_path):
    f = _machine(tmp_path)["cgroup.memory_limit_bytes"]
    assert f.value == 3 * GiB and "job_7/memory.max" in f.source and "parent" in f.source


def test_the_jobs_own_limit_is_kept(tmp_path):
    f = _machine(tmp_path, step_max=str(2 * GiB))["cgroup.memory_limit_bytes"]
    assert f.value == 2 * GiB and "step_0/memory.max" in f.source


def test_no_limit_anywhere_stays_none(tmp_path):
    f = _machine(tmp_path, job_max="max")
    assert f["cgroup.memory_limit_bytes"].value == 8 * GiB  # uid_0's
    (tmp_path / "sys/fs/cgroup/slurm/uid_0/memory.max").write_text("max\n")
    f = {e.key: e for e in collect_cgroup(CollectContext(root=tmp_path, env={}, gpu=None))}
    assert f["cgroup.memory_limit_bytes"].value is None
