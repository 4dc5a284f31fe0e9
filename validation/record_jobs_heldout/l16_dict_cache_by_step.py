"""expect: leak. A fast, short leak: a GPT-style LM under bf16 autocast whose training loop stores each
step's logits and targets "for later analysis" in a dict keyed by the step number, on the GPU:
16 x 256 x 8192 bf16 = 64 MiB per step, 80 steps (~5 GiB, in a few seconds). With oomdoctor.step()
markers.

GPU: `python -m oomdoctor record -- python l16_dict_cache_by_step.py`. `--cpu-smoke`: 3 tiny steps on the CPU.
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
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.emb(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        return self.head(self.body(x, mask=mask, is_causal=True))


vocab, seq, batch = (128, 16, 2) if SMOKE else (8192, 256, 16)
model = LM(vocab, 32 if SMOKE else 512, 2 if SMOKE else 4, 4 if SMOKE else 8, seq).to(DEV)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
cache = {}
t0 = time.time()
step = 0
while step < (3 if SMOKE else 80) and time.time() - t0 < 60:
    idx = torch.randint(0, vocab, (batch, seq), device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16):
        logits = model(idx)
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(), idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    cache[step] = {"logits": logits.detach(), "targets": idx}  # kept on the GPU, every step
    step += 1
    oomdoctor.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.3f} cached {len(cache)} steps", flush=True)
print("done", step, "steps", len(cache), "cached")
