"""oomdoctor: find out why a PyTorch job ran out of GPU memory, and stop it from happening again.

The core imports no torch and touches no GPU. Heavier parts (estimate, record, fit) import torch
lazily, only when called.
"""

from oomdoctor._version import __version__

__all__ = ["__version__", "watch", "step", "estimate", "estimate_module", "fit"]


def __getattr__(name: str):  # PEP 562: `oomdoctor.watch` without importing the recorder (or torch) eagerly
    if name in ("watch", "step"):
        from oomdoctor.injob import record

        return getattr(record, name)
    if name in ("estimate", "estimate_module"):  # predict peak GPU memory (oomdoctor.estimate.estimator)
        from oomdoctor.estimate import estimator

        return getattr(estimator, name)
    if name == "fit":  # `from oomdoctor import fit`: the OOM-surviving micro-batcher (docs/fit.md)
        from oomdoctor.injob import fit

        return fit
    raise AttributeError(f"module 'oomdoctor' has no attribute {name!r}")
