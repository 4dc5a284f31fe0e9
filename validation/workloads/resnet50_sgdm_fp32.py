"""Validation zoo workload: torchvision ResNet-50, SGD momentum, fp32 (CONTRACTS.md section 6)."""

import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.resnet50(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "sgd-momentum",
        "amp": None,
        "train": True,
    }
