"""expect: healthy. A transformer encoder classifier (6 layers, d=512, sequences of 256) trained with
Adam; every 5 training steps it evaluates 2 larger batches under model.eval() and torch.no_grad()
(the encoder's inference fast path), then goes back to training. A plain loop without step markers,
recorded with allocation history; about 30 s.

record: --history
GPU: `python -m oomdoctor record --history 20000 -- python h16_transformer_eval_every_5.py`. `--cpu-smoke`: a few tiny steps on the CPU.
"""
import sys
import time

import torch
from torch import nn

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, classes: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, classes)

    def forward(self, idx):
        return self.head(self.enc(self.emb(idx) + self.pos[:, : idx.shape[1]]).mean(1))


vocab, seq, classes = (500, 16, 4) if SMOKE else (16000, 256, 20)
model = Classifier(vocab, 32 if SMOKE else 512, 2 if SMOKE else 6, 4 if SMOKE else 8, classes, seq).to(DEV)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
train_bs, eval_bs = (2, 4) if SMOKE else (32, 64)
t0 = time.time()
step = 0
evals = []
while step < (6 if SMOKE else 5000) and time.time() - t0 < 30:
    model.train()
    idx = torch.randint(0, vocab, (train_bs, seq), device=DEV)
    y = torch.randint(0, classes, (train_bs,), device=DEV)
    loss = nn.functional.cross_entropy(model(idx), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    if step % 5 == 0:
        model.eval()
        correct = 0
        with torch.no_grad():
            for _ in range(2):
                idx = torch.randint(0, vocab, (eval_bs, seq), device=DEV)
                y = torch.randint(0, classes, (eval_bs,), device=DEV)
                correct += (model(idx).argmax(-1) == y).sum().item()
        evals.append(correct / (2 * eval_bs))
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} eval acc {evals[-1]:.3f}", flush=True)
print("done", step, "steps", len(evals), "evals")
