"""ViT-B/16 (torchvision, random init) at 224x224, AdamW, bf16 autocast."""
import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.vit_b_16(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "adamw",
        "amp": "bf16",
    }
