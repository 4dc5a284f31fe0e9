"""MPS as an H200 really showed it (validation/doctor_mps_gpu.py, session 15): the control daemon keeps its pid
file in the pipe directory while it runs and removes it on `quit`, but its control socket stays behind; NVML
lists the MPS server (68 MiB, its own context) beside the clients, each with its own memory."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from oomdoctor.collectors.bundle_write import build_bundle
from oomdoctor.collectors.context import CollectContext
from oomdoctor.collectors.machine import collect_bundle
from oomdoctor.collectors.nvml import PynvmlBackend
from oomdoctor.collectors.sharing import collect_sharing
from oomdoctor.facts.gpu import is_mps_server
from oomdoctor.redact import redact_env
from test_collectors_live import FakeNvml, FakeRunner  # noqa: E402

_LISTENING: list[socket.socket] = []  # sockets of "running daemons", closed after each test


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    while _LISTENING:
        _LISTENING.pop().close()


def _machine(tmp_path: Path, pid_file: bool, sock: bool, env: dict | None = None,
             listening: bool | None = None) -> CollectContext:
    """listening (default: pid_file and sock): a daemon that runs answers on its socket; one that quit or was
    killed leaves the socket file with nothing behind it (connections refused)."""
    pipe = tmp_path / "root" / "tmp" / "nvidia-mps"
    pipe.mkdir(parents=True)
    if sock:  # a real unix socket, as the daemon makes it
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(pipe / "control"))
        if (pid_file if listening is None else listening):
            s.listen(1)
            _LISTENING.append(s)
        else:
            s.close()
    if pid_file:
        (pipe / "nvidia-cuda-mps-control.pid").write_text("953")
    return CollectContext(root=tmp_path / "root", env=redact_env(env or {"PATH": "/bin"}),
                          gpu=PynvmlBackend(FakeNvml()), runner=FakeRunner({}), self_pids=frozenset())


def _mps(ctx: CollectContext):
    return next(e for e in collect_sharing(ctx) if e.key == "sharing.mps")


def test_a_running_daemon_is_mps(tmp_path):
    m = _mps(_machine(tmp_path, pid_file=True, sock=True))
    assert m.value and m.value["control_present"]


def test_the_socket_a_quit_daemon_left_is_not_mps(tmp_path):
    m = _mps(_machine(tmp_path, pid_file=False, sock=True))
    assert m.value is None and "left by a daemon that has exited" in m.source


def test_the_job_s_mps_variables_still_count_without_a_daemon(tmp_path):
    m = _mps(_machine(tmp_path, pid_file=False, sock=True, env={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps"}))
    assert m.value and not m.value["control_present"]


def test_bundles_carry_a_running_daemon_and_not_a_stale_socket(tmp_path):
    for pid_file, expected in ((True, True), (False, False)):
        where = tmp_path / str(pid_file)
        where.mkdir()
        w = build_bundle(ctx=_machine(where, pid_file=pid_file, sock=True))
        out = where / "b.tar.gz"
        w.write(out)
        v = collect_bundle(out).value("sharing.mps")
        assert bool(v and v["control_present"]) is expected, pid_file


def test_an_older_bundle_with_the_socket_marker_alone_still_counts(tmp_path):
    w = build_bundle(ctx=_machine(tmp_path, pid_file=True, sock=True))
    del w.files["tmp/nvidia-mps/nvidia-cuda-mps-control.pid"]  # as bundles written before session 15
    out = tmp_path / "old.tar.gz"
    w.write(out)
    assert collect_bundle(out).value("sharing.mps")["control_present"]


def test_the_mps_server_is_no_co_tenant():
    assert is_mps_server({"name": "nvidia-cuda-mps-server"})
    assert is_mps_server({"name": "/usr/bin/nvidia-cuda-mps-server --foo"})
    assert not is_mps_server({"name": "/opt/torch/.venv/bin/python3"}) and not is_mps_server({})


def test_a_daemon_killed_without_quit_is_no_mps_limit(tmp_path):
    """SIGKILL leaves the pid file and the socket; the socket refuses connections (validation/mps_killed_daemon_gpu.py,
    session 16, on an H100)."""
    ctx = _machine(tmp_path, pid_file=True, sock=True, listening=False)
    m = _mps(ctx)
    assert m.value["daemon_gone"] and not m.value["control_present"] and "no longer answers" in m.source
    from oomdoctor.checks.engine import diagnose  # noqa: PLC0415
    from oomdoctor.facts.base import FactSet  # noqa: PLC0415

    report = diagnose(FactSet([m]))
    shr = [f for f in report.findings if f.id == "SHR002"]
    assert shr and "no longer answers" in shr[0].title
    # no OOM cause: the first device run's verdict read it as a sharing limit while clients ran normally
    assert shr[0].category is None and str(getattr(report.verdict.category, "value", "")) != "gpu_sharing_limit"


def test_a_killed_daemon_in_a_bundle(tmp_path):
    w = build_bundle(ctx=_machine(tmp_path, pid_file=True, sock=True, listening=False))
    assert not any(k.endswith("nvidia-cuda-mps-control.pid") for k in w.files)
    out = tmp_path / "b.tar.gz"
    w.write(out)
    v = collect_bundle(out).value("sharing.mps")
    assert v["daemon_gone"] and not v["control_present"]


def _run_facts(mps: dict, procs: list | None = None):
    from oomdoctor.facts.base import Fact, FactSet  # noqa: PLC0415

    return FactSet([Fact("sharing.mps", mps, "t"), Fact("sharing.processes", procs or [], "NVML")])


def test_explain_weighs_a_dead_daemon_as_a_lead_at_most():
    """Replays the device run (results_final.json's sharing.mps, its too_big.log): the answer stays the job's
    own need; a gone daemon's limit is a lead at most (0.5) unless an MPS server still runs (its clients keep
    their limits; run 1's server survived the daemon)."""
    import json  # noqa: PLC0415

    from oomdoctor.explain.rank import explain_text  # noqa: PLC0415

    run = ROOT / "validation" / "results" / "mps_killed_h100_s16"
    mps = json.loads((run / "results_final.json").read_text())["2_fact"]["value"]
    assert mps["daemon_gone"]
    log = (run / "too_big.log").read_text().splitlines()
    dead = explain_text(log, _run_facts(mps))
    assert dead.hypotheses[0].category == "true_capacity" and dead.hypotheses[0].confidence >= 0.8
    assert {h.category: h.score for h in dead.hypotheses}.get("gpu_sharing_limit", 0.0) <= 0.5
    # a message an MPS pin could explain: gone daemon and no server -> a lead; a server still running -> as alive
    msg = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of "
           "79.10 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 19.00 GiB memory "
           "in use. Of the allocated memory 18.50 GiB is allocated by PyTorch, and 10.00 MiB is reserved by "
           "PyTorch but unallocated."]
    server = [{"gpu": 0, "pid": 644, "used_bytes": 66 << 20, "name": "nvidia-cuda-mps-server", "self": False}]

    def share(procs):
        hyps = explain_text(msg, _run_facts(mps, procs)).hypotheses
        return {h.category: h.score for h in hyps}.get("gpu_sharing_limit", 0.0)

    assert share(server) > share([]) + 1.0


ROOT = Path(__file__).resolve().parent.parent
