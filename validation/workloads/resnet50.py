"""ResNet-50, ImageNet-sized images, SGD with momentum, bf16 autocast (CONTRACTS section 6)."""
import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.resnet50(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "sgd-momentum",
        "amp": "bf16",
    }
