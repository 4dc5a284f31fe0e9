"""Models and data for the record validation jobs: built from code or config, nothing downloaded."""

from __future__ import annotations

import torch
from torch import nn

DEV = "cuda"


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.skip = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                     if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


def cnn(width: int = 64, classes: int = 100, depth: int = 2) -> nn.Module:
    """A ResNet-18-like network (BatchNorm, residual blocks), on the GPU."""
    layers: list[nn.Module] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)]
    c = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        for i in range(depth):
            layers.append(Block(c, width * mult, 2 if (i == 0 and stage > 0) else 1))
            c = width * mult
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers).to(DEV)


class GPT(nn.Module):
    """A decoder-only transformer LM (pre-norm, causal), sized by its arguments."""

    def __init__(self, vocab: int = 8192, d: int = 512, layers: int = 6, heads: int = 8, max_seq: int = 1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.emb(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.body(x, mask=mask, is_causal=True))


def gpt(**kw) -> GPT:
    return GPT(**kw).to(DEV)


def lm_loss(logits, idx):
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), idx[:, 1:].reshape(-1))


def tokens(batch: int, seq: int, vocab: int = 8192):
    return torch.randint(0, vocab, (batch, seq), device=DEV)


def images(batch: int, size: int = 64, classes: int = 100):
    return torch.randn(batch, 3, size, size, device=DEV), torch.randint(0, classes, (batch,), device=DEV)


def llama(hidden: int = 2048, layers: int = 22, heads: int = 32, kv_heads: int = 4, inter: int = 5632,
          vocab: int = 32000):
    """A Llama-style model from a config (TinyLlama-1.1B's shape by default), bf16, on the GPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, intermediate_size=inter, vocab_size=vocab,
                      max_position_embeddings=2048)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(DEV):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model


def rate_limit(t0: float, seconds: float) -> bool:
    """True while the job should go on (wall-clock bound, so the suite's time is predictable)."""
    import time

    return time.time() - t0 < seconds
