"""A transformer-FFN-shaped MLP over 64 tokens of width 1024, Adam, bf16 autocast: activations dominate."""
import torch

TOKENS, WIDTH = 64, 1024


class TokenMLP(torch.nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                torch.nn.Linear(4 * WIDTH, WIDTH)) for _ in range(depth))
        self.head = torch.nn.Linear(WIDTH, 10)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=1))


def build(batch_size):
    return {
        "model": TokenMLP(),
        "inputs": (torch.randn(batch_size, TOKENS, WIDTH),),
        "target": torch.randint(0, 10, (batch_size,)),
        "loss": torch.nn.functional.cross_entropy,
        "optimizer": "adam",
        "amp": "bf16",
    }
