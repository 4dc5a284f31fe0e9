"""ResNet-50 (random init), 224x224, SGD with momentum, fp32: cuDNN picks workspaces, and near the cap
it falls back to smaller ones (issue 19's case: 8 GiB, --margin 0). torchvision's model; where
torchvision is not installed, the same architecture from transformers' ResNetConfig (ResNet-50's default)."""
import torch

try:
    import torchvision
except ImportError:  # pragma: no cover - depends on the host
    torchvision = None


def build(batch_size):
    images = torch.randn(batch_size, 3, 224, 224)
    labels = torch.randint(0, 1000, (batch_size,))
    if torchvision is not None:
        return {"model": torchvision.models.resnet50(), "inputs": (images,), "target": labels,
                "loss": torch.nn.functional.cross_entropy, "optimizer": "sgd-momentum"}
    from transformers import ResNetConfig, ResNetForImageClassification

    return {"model": ResNetForImageClassification(ResNetConfig(num_labels=1000)),
            "inputs": {"pixel_values": images, "labels": labels}, "optimizer": "sgd-momentum"}
