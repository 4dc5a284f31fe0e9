"""oomdoctor: find out why a PyTorch job ran out of GPU memory, and stop it from happening again.

The core imports no torch and touches no GPU. Heavier parts (estimate, record, fit) import torch
lazily, only when called.
"""

from oomdoctor._version import __version__

__all__ = ["__version__"]
