"""expect: healthy. A 12-layer GPT-style LM (d=768, sequences of 512, ~110M parameters) trained with
AdamW and activation (gradient) checkpointing on every block (torch.utils.checkpoint,
use_reentrant=False): the backward pass recomputes each block's activations. TF32 matmuls, a plain
loop without step markers; about 30 s.

GPU: `python -m oomdoctor record -- python h18_grad_checkpointing_12_layers.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False)
        return self.head(self.ln(x))


vocab, seq, batch = (256, 16, 2) if SMOKE else (16384, 512, 16)
model = LM(vocab, 64 if SMOKE else 768, 2 if SMOKE else 12, 4 if SMOKE else 12, seq).to(DEV)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
t0 = time.time()
step = 0
while step < (3 if SMOKE else 2000) and time.time() - t0 < 30:
    idx = torch.randint(0, vocab, (batch, seq), device=DEV)
    logits = model(idx)
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
print("done", step, "steps")
