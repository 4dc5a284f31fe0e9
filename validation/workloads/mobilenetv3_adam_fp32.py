"""Validation zoo workload: torchvision MobileNetV3-Large, Adam, fp32 (CONTRACTS.md section 6)."""

import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.mobilenet_v3_large(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "adam",
        "amp": None,
        "train": True,
    }
