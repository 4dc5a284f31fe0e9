"""Run a command unchanged and record what happened to memory (GPU allocator, NVML, host, cgroup).

Example: `oomdoctor record --dir run -- python train.py ARGS`, then `oomdoctor report run`.
The command's argv, stdin/stdout/stderr, exit code and signals are passed through. Python processes
of the job get the in-job recorder through a sitecustomize bootstrap on PYTHONPATH; it waits for the
job to initialise CUDA itself.
"""

from __future__ import annotations

import argparse
import time

from oomdoctor.errors import UsageError

NAME = "record"
HELP = "run a command and record its memory timeline (then: oomdoctor report RUN_DIR)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", metavar="RUN_DIR", default=None,
                        help="where to write the recording: a new directory, or one without a recording (default: ./oomdoctor-run-<time>)")
    parser.add_argument("--every-ms", type=int, default=500, metavar="N",
                        help="period of the background sampler in milliseconds; step markers add a record per step (default: 500)")
    parser.add_argument("--history", type=int, default=None, metavar="N",
                        help="keep the last N allocation events with Python stacks, so the report names source lines "
                             "(costs about 2-3%% of step time; suggested 20000; default: 0, off)")
    parser.add_argument("--prometheus", type=int, default=None, metavar="PORT",
                        help="serve allocator metrics for Prometheus on this port while the job runs")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                        help="address for --prometheus (default: 127.0.0.1)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing of our own")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the command to run, after --")


def run(args: argparse.Namespace) -> int:
    from oomdoctor.injob.record import launch

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("record needs a command after --, e.g. oomdoctor record -- python train.py")
    if args.every_ms <= 0:
        raise UsageError("--every-ms must be a positive number of milliseconds")
    if args.history is not None and args.history < 0:
        raise UsageError("--history must be 0 or more")
    run_dir = args.dir or time.strftime("oomdoctor-run-%Y%m%d-%H%M%S")
    launch.check_new_run_dir(run_dir)  # before anything runs: exit 2 rather than a shared dir or two runs mixed
    exporter = None
    if args.prometheus is not None:
        if not 0 < args.prometheus < 65536:
            raise UsageError(f"--prometheus {args.prometheus}: not a TCP port")
        from oomdoctor.injob.record import exporter as exp

        port, bind = args.prometheus, args.bind

        def exporter(d: str):  # noqa: ANN202 - started by launch once the child runs
            return exp.serve(d, port=port, addr=bind)
    return launch.run(cmd, run_dir, every_ms=args.every_ms, history=args.history,
                      start_exporter=exporter, collect_env=_collect_env, quiet=args.quiet)


def _collect_env(run_dir: str) -> None:
    """The environment facts of this machine into run_dir/env.json, if the machine collector is installed."""
    try:
        from oomdoctor.collectors import machine  # type: ignore[attr-defined]
    except ImportError:
        return
    from oomdoctor.injob.record import oom

    oom.write_environment(run_dir, machine.collect_live(probe=False, import_torch=False))
