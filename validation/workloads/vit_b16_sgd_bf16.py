"""Validation zoo workload: torchvision ViT-B/16, SGD, bf16 autocast (CONTRACTS.md section 6)."""

import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.vit_b_16(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "sgd",
        "amp": "bf16",
        "train": True,
    }
