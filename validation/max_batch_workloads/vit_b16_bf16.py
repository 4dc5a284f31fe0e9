"""ViT-B/16 (random init) at 224x224, AdamW, bf16 autocast. torchvision's model; where torchvision is
not installed, the same architecture from transformers' ViTConfig (ViT-B/16's default)."""
import torch

try:
    import torchvision
except ImportError:  # pragma: no cover - depends on the host
    torchvision = None


def build(batch_size):
    images = torch.randn(batch_size, 3, 224, 224)
    labels = torch.randint(0, 1000, (batch_size,))
    if torchvision is not None:
        return {"model": torchvision.models.vit_b_16(), "inputs": (images,), "target": labels,
                "loss": torch.nn.functional.cross_entropy, "optimizer": "adamw", "amp": "bf16"}
    from transformers import ViTConfig, ViTForImageClassification

    return {"model": ViTForImageClassification(ViTConfig(num_labels=1000)),
            "inputs": {"pixel_values": images, "labels": labels}, "optimizer": "adamw", "amp": "bf16"}
