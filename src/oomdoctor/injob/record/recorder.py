"""The in-job recorder: a step marker, a daemon sampler, the OOM observer. Nothing here may raise.

Design: step() is the only code on the training thread's hot path (a dict of allocator counters and
one buffered line). A daemon thread samples the slower sources (NVML, host RSS, cgroup, /dev/shm)
every `every_ms`, attaches the allocator's OOM observer and the bounded allocation history as soon as
the job itself has initialised CUDA, and flushes. Every public entry is wrapped by `_guard`, which
swallows the error and notes it in errors-<label>.log.
"""

from __future__ import annotations

import atexit
import collections
import functools
import os
import sys
import threading
import time
import traceback
from typing import Any

from oomdoctor._version import __version__
from oomdoctor.facts import recording
from oomdoctor.injob.record import oom, probes
from oomdoctor.injob.record.writer import JsonlWriter
from oomdoctor.redact import redact_manifest, redact_text

DEFAULT_EVERY_MS = 500
# Allocation events kept in torch's history ring, with stacks. Off by default: measured on an H100 it
# costs 1.6-3.1% of step time (ResNet-50, GPT-2), above the 2% budget (docs/benchmarks.md). Opt in
# with watch(history=20_000) / `oomdoctor record --history 20000` to get source lines at the OOM.
DEFAULT_HISTORY = 0
SUGGESTED_HISTORY = 20_000
# Sampling right after CUDA comes up: FAST_TICKS samples every FAST_MS (3 s at most), then every_ms.
FAST_MS = 50
FAST_TICKS = 60
# Looks: what is live, by block size, at moments of the run (start-<label>.json); a short run's verdict
# compares what is live at its end with them (analysis.live_growth). One look 0.25 s after CUDA comes
# up, one each time the low-water mark of `allocated` since the last look has risen by 64 MiB or 10%
# (persistent memory, not activations), and one when it has then held for a second (a load or a fill
# that is over). At most MAX_LOOKS, 0.1 s apart. Each costs one allocator snapshot and is taken only
# with history off: with history on, a snapshot from this thread symbolises stacks (seconds, the
# first time, importing torch internals) and, racing the job's own imports, broke them on an H100;
# the looks then come from the history ring at the end instead (snapshot.ring_looks).
LOOK_FIRST_S = 0.25
LOOK_GAP_S = 0.1
LOOK_GROWTH = 64 << 20
LOOK_GROWTH_FRACTION = 0.10
LOOK_SETTLED_S = 1.0
LOOK_WINDOW_S = 0.5  # the low-water mark is taken over this much of the latest samples
MAX_LOOKS = 16
MAX_OOM_DUMPS = 4  # the first observer call + up to 3 fatal exceptions (one per watch/excepthook)


def _guard(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the job must never see our errors
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and threading.current_thread() is threading.main_thread():
                raise
            self._note_error(fn.__name__, exc)
            return None
    return wrapper


class Recorder:
    def __init__(self, run_dir: str, *, every_ms: int = DEFAULT_EVERY_MS, history: int = DEFAULT_HISTORY,
                 top: int = 15, trace_tail: int = 50, sampler: bool = True, max_lines: int = 500_000):
        self.run_dir = os.path.abspath(str(run_dir))
        self.every_ms = max(10, int(every_ms))
        self.history = max(0, int(history))
        self.top, self.trace_tail = top, trace_tail
        self.pid = os.getpid()
        self.rank = _env_rank()
        self.label = recording.label_for(self.rank, self.pid)
        self.steps = 0
        self.active = False
        self._sampler = sampler
        self._max_lines = max_lines
        self._writer: JsonlWriter | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._nvml = probes.Nvml()
        self._cuda_attached = False
        self._history_on = False
        self._oom_dumps = 0
        self._attached_at: float | None = None
        self._start_points: list[dict[str, Any]] = []
        self._look: dict[str, Any] = {}  # the last look: when, the low-water mark then, why it was taken
        self._recent: collections.deque[tuple[float, float]] = collections.deque()
        self._oom_events = 0
        self._device: int | None = None
        self._last_oom: dict[str, Any] | None = None
        self._errors = 0
        self._lock = threading.Lock()
        self._prev_hook: Any = None

    # -- lifecycle -------------------------------------------------------------------------------
    @_guard
    def start(self) -> Recorder:
        os.makedirs(self.run_dir, exist_ok=True)
        header = {"kind": "header", "schema_version": recording.SCHEMA_VERSION, "format": recording.FORMAT,
                  "tool_version": __version__, "t": time.time(), "pid": self.pid, "rank": self.rank,
                  "label": self.label, "argv": redact_manifest(list(sys.argv)), "every_ms": self.every_ms,
                  "history": self.history, "host": os.uname().nodename}
        path = os.path.join(self.run_dir, recording.timeline_name(self.label))
        self._writer = JsonlWriter(path, header, max_lines=self._max_lines)
        self.active = True
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)
        atexit.register(self._at_exit)
        self._chain_excepthook()
        self._tick()
        if self._sampler:
            self._thread = threading.Thread(target=self._loop, name="oomdoctor-sampler", daemon=True)
            self._thread.start()
        return self

    def _forked(self) -> None:
        # a fork (DataLoader worker) shares our objects but not our thread: stay silent there
        self.active = False
        self._writer = None

    def _at_exit(self) -> None:
        # the process ends: leave torch's history as it is (disabling it then makes torch warn on stderr)
        self.stop(restore=False)

    @_guard
    def stop(self, final_snapshot: bool = True, restore: bool = True) -> None:
        if not self.active or os.getpid() != self.pid:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._tick()
        torch = probes.cuda_ready()
        if final_snapshot and torch is not None and self._oom_dumps == 0:
            device = self._device if self._device is not None else probes.busiest_device(torch)
            ev = oom.collect(torch, device, top=self.top, tail=self.trace_tail, history_on=self._history_on)
            ev.update({"kind": "final", "t": time.time(), "pid": self.pid, "rank": self.rank, "label": self.label,
                       "step": self.steps})
            oom.write_evidence(self.run_dir, recording.final_name(self.label), ev)
        if restore:
            self._history(torch, enable=False)
        self.active = False
        if self._writer is not None:
            self._writer.write({"kind": "end", "t": time.time(), "steps": self.steps}, force=True)
            self._writer.close()
        self._nvml.close()
        if self._prev_hook is not None and sys.excepthook is self._excepthook:
            sys.excepthook = self._prev_hook

    # -- the hot path ----------------------------------------------------------------------------
    @_guard
    def step(self, n: int | None = None) -> None:
        if not self.active:
            return
        self.steps = self.steps + 1 if n is None else int(n)
        rec: dict[str, Any] = {"kind": "step", "t": time.time(), "step": self.steps}
        torch = probes.cuda_ready()
        if torch is not None:
            if not self._cuda_attached:
                self._attach(torch)
            alloc = probes.allocator(torch)  # the training thread's current device
            if alloc:
                self._device = alloc["device"]
            if alloc:
                rec.update(alloc)
        rec["rss"], file_backed = probes.host_memory()
        if file_backed is not None:
            rec["rss_file"] = file_backed
        if self._writer is not None:
            # written through at once: buffered, the steps since the last sample (up to every_ms of them, or all
            # of a short run's) died with a SIGKILLed job (walkthrough, session 26); one write(2) of ~200 bytes
            # beside the /proc read above
            self._writer.write(rec, now=True)

    # -- the sampler -----------------------------------------------------------------------------
    def _loop(self) -> None:
        # Until the job brings CUDA up, look every FAST_MS (a cheap check) so sampling starts at once;
        # then, for FAST_TICKS samples, sample every FAST_MS: a short run (an evaluation loop that fills
        # the GPU in a second) still has a curve to judge, and a fast-sampled start shows the
        # forward/backward cycles the growth model infers steps from. After that, every `every_ms`.
        fast = min(FAST_MS, self.every_ms) / 1000.0
        fast_left = FAST_TICKS
        last = time.monotonic()
        while not self._stop.wait(fast if (not self._cuda_attached or fast_left > 0) else self.every_ms / 1000.0):
            if not self.active:
                return
            now = time.monotonic()
            if not self._cuda_attached and now - last < self.every_ms / 1000.0 and probes.cuda_ready() is None:
                continue
            if self._cuda_attached and fast_left > 0:
                fast_left -= 1
            last = now
            self._tick()

    @_guard
    def _tick(self) -> None:
        if self._writer is None:
            return
        rec: dict[str, Any] = {"kind": "sample", "t": time.time(), "step": self.steps}
        torch = probes.cuda_ready()
        if torch is not None:
            if not self._cuda_attached:
                self._attach(torch)
            device = self._device if self._device is not None else probes.busiest_device(torch)
            alloc = probes.allocator(torch, device) if device is not None else None
            if alloc:
                rec.update(alloc)
            if device is not None and alloc and isinstance(alloc.get("allocated"), (int, float)):
                self._maybe_look(torch, device, alloc["allocated"])
        rec["rss"], file_backed = probes.host_memory()
        if file_backed is not None:
            rec["rss_file"] = file_backed
        nv = self._nvml.sample()
        if nv is not None:
            rec["gpu_proc_used"] = nv["gpu_proc_used"]
            if nv["devices"]:
                rec["gpu_devices"] = nv["devices"]
        rec.update(probes.cgroup_memory())
        rec.update(probes.shm_usage())
        self._writer.write(rec)
        self._discover_rank()
        self._writer.flush()

    def _maybe_look(self, torch: Any, device: int, allocated: float) -> None:
        n = len(self._start_points)
        if self._attached_at is None or n >= MAX_LOOKS or self._oom_dumps or self._history_on:
            return
        now = time.monotonic()
        recent = self._recent
        recent.append((now, allocated))
        while recent and now - recent[0][0] > LOOK_WINDOW_S:
            recent.popleft()
        low = min(v for _, v in recent)  # the low-water mark of the last LOOK_WINDOW_S: persistent memory
        look = self._look
        if not n:
            if now - self._attached_at < LOOK_FIRST_S:
                return
            why = "first"
        elif now - look["at"] < LOOK_GAP_S:
            return
        elif low - look["base"] >= max(LOOK_GROWTH, LOOK_GROWTH_FRACTION * look["base"]):
            why = "growth"
        elif look["why"] == "growth" and now - look["at"] >= LOOK_SETTLED_S:
            why = "settled"
        else:
            return
        if _stacks_recorded(torch):  # the job turned history on itself: a snapshot here would symbolise
            return
        self._look = {"at": now, "base": low, "why": why}
        point = oom.live_now(torch, device)
        point.update({"t": time.time(), "step": self.steps, "why": why})
        self._start_points.append(point)
        try:  # a full disk loses the look, never the tick's sample
            oom.write_evidence(self.run_dir, recording.start_name(self.label),
                               {"kind": "start", "pid": self.pid, "rank": self.rank, "label": self.label,
                                "device": device, "history": self._history_on, "points": self._start_points})
        except OSError as exc:
            self._note_error("start_look", exc)

    def _discover_rank(self) -> None:
        if self.rank is not None:
            return
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            rank = int(dist.get_rank())
        except Exception:
            return
        self.rank = rank
        new_label = recording.label_for(rank, self.pid)
        if self._writer is not None:
            if self._writer.rename(os.path.join(self.run_dir, recording.timeline_name(new_label))):
                self.label = new_label
            self._writer.write({"kind": "rank", "t": time.time(), "rank": rank}, force=True)

    # -- CUDA: OOM observer and allocation history -----------------------------------------------
    def _attach(self, torch: Any) -> None:
        with self._lock:
            if self._cuda_attached:
                return
            self._cuda_attached = True
            self._attached_at = time.monotonic()
        try:
            torch._C._cuda_attach_out_of_memory_observer(self._observer)
        except Exception as exc:
            self._note_error("attach_out_of_memory_observer", exc)
        self._history(torch, enable=self.history > 0)

    def _history(self, torch: Any, *, enable: bool) -> None:
        if torch is None or enable == self._history_on:
            return
        try:
            if enable:
                torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                         max_entries=self.history)
            else:
                torch.cuda.memory._record_memory_history(enabled=None)
            self._history_on = enable
        except Exception as exc:
            self._note_error("record_memory_history", exc)

    def _observer(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        try:
            self._on_oom({"source": "observer", "device": int(device), "requested": int(alloc),
                          "device_limit": int(device_allocated), "device_free_at_oom": int(device_free)})
        except BaseException as exc:  # noqa: BLE001
            self._note_error("oom_observer", exc)

    @_guard
    def _on_oom(self, info: dict[str, Any]) -> None:
        """From the allocator's observer. It fires for every failed attempt, including those the job
        survives (cuDNN retries a convolution with a smaller workspace), so only the first one pays
        for a full dump; the rest are cheap timeline records. The fatal one is dumped again when the
        exception reaches us (record_exception), while its frames still hold the live tensors."""
        if not self.active:
            return
        self._oom_events += 1
        self._last_oom = info
        if self._writer is not None and self._oom_events <= 500:
            self._writer.write({"kind": "oom", "t": time.time(), "step": self.steps, **info}, force=True)
            self._writer.flush()
        if self._oom_dumps == 0:
            self._dump(info, None)

    def _dump(self, info: dict[str, Any], message: str | None) -> None:
        if self._oom_dumps >= MAX_OOM_DUMPS:
            return
        self._oom_dumps += 1
        ev: dict[str, Any] = {"kind": "oom", "t": time.time(), "pid": self.pid, "rank": self.rank,
                              "label": self.label, "step": self.steps, "oom_events": self._oom_events, **info}
        if message:
            ev["message"] = message[:4000]
        torch = probes.cuda_ready()
        if torch is not None:
            ev.update(oom.collect(torch, info.get("device"), top=self.top, tail=self.trace_tail,
                                  history_on=self._history_on))
        ev["outside"] = oom.outside_view(self._nvml)
        oom.write_evidence(self.run_dir, recording.oom_name(self.label, self._oom_dumps), ev)
        try:
            oom.environment(self.run_dir)
        except Exception as exc:
            self._note_error("environment", exc)

    @_guard
    def record_exception(self, exc: BaseException) -> None:
        if not self.active or self._writer is None:
            return
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self._writer.write({"kind": "exception", "t": time.time(), "step": self.steps,
                            "type": type(exc).__name__, "message": redact_text(message[:4000])}, force=True)
        self._writer.flush()
        if oom.is_oom_exception(exc):
            # the fatal OOM: the last observer call (if any) says what was requested
            info = {k: v for k, v in (self._last_oom or {}).items() if k != "source"}
            self._dump({**info, "source": "exception", "fatal": True}, message)

    def _chain_excepthook(self) -> None:
        self._prev_hook = sys.excepthook
        sys.excepthook = self._excepthook

    def _excepthook(self, etype: Any, value: Any, tb: Any) -> None:
        if value is not None:
            self.record_exception(value)
        (self._prev_hook or sys.__excepthook__)(etype, value, tb)

    def _note_error(self, where: str, exc: BaseException) -> None:
        try:
            self._errors += 1
            if self._errors > 100:
                return
            os.makedirs(self.run_dir, exist_ok=True)
            with open(os.path.join(self.run_dir, f"errors-{self.label}.log"), "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {where}: {type(exc).__name__}: {exc}\n")
        except BaseException:  # noqa: BLE001
            pass


def _stacks_recorded(torch: Any) -> bool:
    """True when anyone (the job itself, or us) records allocation history, or when torch cannot say:
    a snapshot then symbolises stacks, which must not happen on the sampler thread (see LOOK_*)."""
    try:
        enabled = torch._C._cuda_isHistoryEnabled
    except AttributeError:
        return True
    try:
        return bool(enabled())
    except Exception:
        return True


def _env_rank() -> int | None:
    for key in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        v = os.environ.get(key, "").strip()
        if v.isascii() and v.isdigit():  # "²".isdigit() is True, int("²") fails
            return int(v)
    return None
