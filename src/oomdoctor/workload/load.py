"""Workload files (docs/contracts.md §6): plain Python defining `build(batch_size) -> dict`.

Shared by `estimate` (under fake tensors), `max-batch` (real trials) and the validation zoo, so the
three run exactly the same step. Loading a broken file is an InputError naming the file, never a
traceback.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomdoctor.errors import InputError


def _first_line(exc: BaseException) -> str:
    """A user's exception text can span lines; the CLI reports one."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def line_in(exc: BaseException, path: str | Path) -> str:
    """":LINE" of the deepest frame of exc's traceback in the file at `path`, "" when none is: a broken workload
    file is named with its line (docs/max-batch.md)."""
    want = os.path.realpath(path)
    line, tb = "", exc.__traceback__
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == want:
            line = f":{tb.tb_lineno}"
        tb = tb.tb_next
    return line


OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
AMP_MODES = (None, "bf16", "fp16")


@dataclass(frozen=True)
class Workload:
    path: str
    build: Callable[[int], Mapping[str, Any]]

    def accepts_seq_len(self) -> bool:
        """Whether build() takes `seq_len` (sequence models: `max-batch --dim seq`)."""
        try:
            params = inspect.signature(self.build).parameters
        except (TypeError, ValueError):
            return False
        return "seq_len" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def spec(self, batch_size: int, seq_len: int | None = None) -> WorkloadSpec:
        try:
            if seq_len is None:
                raw = self.build(batch_size)
            else:
                if not self.accepts_seq_len():
                    raise InputError(f"{self.path}: build() takes no seq_len argument: define "
                                     "build(batch_size, seq_len=DEFAULT) to search the sequence length")
                raw = self.build(batch_size, seq_len=seq_len)
        except InputError:
            raise
        except SystemExit as exc:  # sys.exit() in build() must not become oomdoctor's exit status
            raise InputError(f"{self.path}: build({batch_size}) called sys.exit({exc.code!r})") from None
        except Exception as exc:  # the user's code: report it, naming the file
            raise InputError(f"{self.path}{line_in(exc, self.path)}: build({batch_size}) raised {type(exc).__name__}: "
                             f"{_first_line(exc)}") from exc
        return WorkloadSpec.from_dict(raw, self.path)


@dataclass(frozen=True)
class WorkloadSpec:
    model: Any
    inputs: Any
    target: Any = None
    loss: Any = None
    optimizer: Any = "sgd"
    amp: str | None = None
    train: bool = True
    gradient_checkpointing: Any = False  # True, or gradient_checkpointing_kwargs ({"use_reentrant": False})
    source: str = "<workload>"
    generate: Any = None  # kwargs for model.generate() (max_new_tokens, num_beams...): the step is generation
    accumulation_steps: int = 1  # forward+backward this many times per optimizer step

    @classmethod
    def from_dict(cls, raw: Any, source: str = "<workload>") -> WorkloadSpec:
        if not isinstance(raw, Mapping):
            raise InputError(f"{source}: build() must return a dict, got {type(raw).__name__}")
        if "model" not in raw or "inputs" not in raw:
            raise InputError(f"{source}: build() must return at least 'model' and 'inputs'")
        unknown = set(raw) - {"model", "inputs", "target", "loss", "optimizer", "amp", "train",
                              "gradient_checkpointing", "generate", "accumulation_steps"}
        if unknown:
            raise InputError(f"{source}: unknown workload keys {sorted(unknown)}")
        opt = raw.get("optimizer", "sgd")
        if isinstance(opt, str) and opt not in OPTIMIZERS:
            raise InputError(f"{source}: optimizer must be one of {OPTIMIZERS} or a callable, got {opt!r}")
        amp = raw.get("amp")
        if amp not in AMP_MODES:
            raise InputError(f"{source}: amp must be None, 'bf16' or 'fp16', got {amp!r}")
        ckpt = raw.get("gradient_checkpointing", False)
        if not isinstance(ckpt, Mapping):
            ckpt = bool(ckpt)
        gen = raw.get("generate")
        if gen is not None and not isinstance(gen, Mapping):
            raise InputError(f"{source}: generate must be None or a dict of model.generate() arguments, got "
                             f"{type(gen).__name__}")
        accum = raw.get("accumulation_steps", 1)
        if isinstance(accum, bool) or not isinstance(accum, int) or accum < 1:
            raise InputError(f"{source}: accumulation_steps must be an integer >= 1, got {accum!r}")
        train = bool(raw.get("train", True)) and gen is None
        return cls(
            model=raw["model"], inputs=raw["inputs"], target=raw.get("target"), loss=raw.get("loss"),
            optimizer=opt, amp=amp, train=train, gradient_checkpointing=ckpt, source=source,
            generate=dict(gen) if gen is not None else None, accumulation_steps=accum,
        )


def workload_missing(path: str | Path) -> str:
    """Why a workload path cannot be loaded, in one line."""
    p = Path(path)
    if p.is_dir():
        hint = " (a Hugging Face model directory: oomdoctor estimate --model DIR)" if (p / "config.json").is_file() else ""
        return f"{path}: a directory, not a workload file (WORKLOAD.py defines build(batch_size)){hint}"
    return f"{path}: no such workload file"


def load_workload(path: str | Path) -> Workload:
    """Import a workload file in isolation. Raises InputError for a missing file, bad syntax or no build()."""
    p = Path(path)
    if not p.is_file():
        raise InputError(workload_missing(path))
    name = f"_oomdoctor_workload_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise InputError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc
    except SystemExit as exc:  # a script-style file (argparse, sys.exit) exits on import: say so, exit 2
        raise InputError(f"{path}: importing it called sys.exit({exc.code!r}); a workload file must only "
                         "define build(batch_size), with no top-level script code") from None
    except Exception as exc:
        raise InputError(f"{path}{line_in(exc, p)}: importing it raised {type(exc).__name__}: {_first_line(exc)}") from exc
    finally:
        sys.modules.pop(name, None)
    build = getattr(module, "build", None)
    if not callable(build):
        raise InputError(f"{path}: defines no build(batch_size) function")
    return Workload(str(path), build)
