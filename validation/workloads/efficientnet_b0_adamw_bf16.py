"""Validation zoo workload: torchvision EfficientNet-B0, AdamW, bf16 autocast (CONTRACTS.md section 6)."""

import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.efficientnet_b0(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "adamw",
        "amp": "bf16",
        "train": True,
    }
