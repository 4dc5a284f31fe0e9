"""expect: leak. A tiny, long leak: a "gradient drift" debug snapshot, a 256 x 512 fp32 slice of the
LM head's gradient (512 KiB), cloned and kept on the GPU every step for 600 steps (~300 MiB in all).
With oomdoctor.step() markers.

GPU: `python -m oomdoctor record -- python l18_512kib_per_step_long.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

import oomdoctor

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.emb(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.body(x, mask=mask, is_causal=True))


vocab, seq, batch, d = (128, 16, 2, 32) if SMOKE else (8192, 256, 16, 512)
model = LM(vocab, d, 2 if SMOKE else 4, 4 if SMOKE else 8, seq).to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
drift = []
t0 = time.time()
step = 0
while step < (3 if SMOKE else 600) and time.time() - t0 < 75:
    idx = torch.randint(0, vocab, (batch, seq), device=DEV)
    logits = model(idx)
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), idx[:, 1:].reshape(-1))
    loss.backward()
    drift.append(model.head.weight.grad[:256].clone())  # 256 x 512 fp32 = 512 KiB, kept on the GPU
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    oomdoctor.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f} snapshots {len(drift)}", flush=True)
print("done", step, "steps", len(drift), "snapshots")
