"""Validation zoo workload: 4-layer MLP, AdamW, bf16 autocast (CONTRACTS.md section 6)."""

import torch


def build(batch_size):
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    )
    return {
        "model": model,
        "inputs": (torch.randn(batch_size, 1024),),
        "target": torch.randint(0, 10, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "adamw",
        "amp": "bf16",
        "train": True,
    }
