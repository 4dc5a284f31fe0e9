"""Injecting the recorder into a command we do not control, through a `sitecustomize` on PYTHONPATH.

`oomdoctor record` writes a bootstrap directory holding `sitecustomize.py` and a link to this package,
and puts it first on the child's PYTHONPATH. Python imports it at start-up; it runs any sitecustomize
it shadows (so site behaviour is unchanged), then starts the recorder, configured by environment
variables. The recorder waits for the job to initialise CUDA itself. Any failure is silent.
"""

from __future__ import annotations

import contextlib
import os
import sys

ENV_DIR = "OOMDOCTOR_RECORD_DIR"
ENV_EVERY_MS = "OOMDOCTOR_RECORD_EVERY_MS"
ENV_HISTORY = "OOMDOCTOR_RECORD_HISTORY"

SITECUSTOMIZE = '''"""oomdoctor record bootstrap: run the sitecustomize this file shadows, then start the recorder."""
import os as _os
import sys as _sys


def _oomdoctor_chain():
    here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        path = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        _sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py itself prints when a sitecustomize fails
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:", file=_sys.stderr)
        print("%s: %s" % (type(exc).__name__, exc), file=_sys.stderr)


def _oomdoctor_start():
    try:
        from oomdoctor.injob.record.bootstrap import start_from_env

        start_from_env()
    except Exception:
        pass


_oomdoctor_chain()
_oomdoctor_start()
'''

# processes started by multiprocessing / launchers' helpers: not the job, do not record them
_HELPER_MARKERS = (b"--multiprocessing-fork", b"multiprocessing.resource_tracker", b"multiprocessing.forkserver",
                   b"multiprocessing.semaphore_tracker", b"torch._inductor.compile_worker",
                   b"torch/_inductor/compile_worker")


def _is_helper_process() -> bool:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        cmdline = " ".join(sys.argv).encode()
    return any(m in cmdline for m in _HELPER_MARKERS)


def start_from_env() -> None:
    run_dir = os.environ.get(ENV_DIR)
    if not run_dir or _is_helper_process():
        return
    from oomdoctor.injob import record

    options = {}
    for key, env in (("every_ms", ENV_EVERY_MS), ("history", ENV_HISTORY)):
        value = os.environ.get(env, "")
        value = value.strip()
        if value.isascii() and value.isdigit():  # "²".isdigit() is True, int("²") fails
            options[key] = int(value)
    record.start(run_dir, **options)


def write_bootstrap(directory: str) -> str:
    """Create the bootstrap dir (sitecustomize.py + a link to this oomdoctor) and return its path."""
    package_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, "sitecustomize.py")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # never write through a link left there
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(SITECUSTOMIZE)
    link = os.path.join(directory, "oomdoctor")
    if not os.path.lexists(link):
        os.symlink(package_dir, link)
    return directory


def child_environment(base: dict[str, str], bootstrap_dir: str, run_dir: str, *, every_ms: int | None,
                      history: int | None) -> dict[str, str]:
    env = dict(base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = bootstrap_dir + (os.pathsep + old if old else "")
    env[ENV_DIR] = os.path.abspath(run_dir)
    if every_ms is not None:
        env[ENV_EVERY_MS] = str(int(every_ms))
    if history is not None:
        env[ENV_HISTORY] = str(int(history))
    return env
