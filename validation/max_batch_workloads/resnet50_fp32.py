"""ResNet-50 (torchvision, random init), 224x224, SGD with momentum, fp32: cuDNN picks workspaces,
and near the cap it falls back to smaller ones (issue 19's case: 8 GiB, --margin 0)."""
import torch
import torchvision


def build(batch_size):
    return {
        "model": torchvision.models.resnet50(),
        "inputs": (torch.randn(batch_size, 3, 224, 224),),
        "target": torch.randint(0, 1000, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "sgd-momentum",
    }
