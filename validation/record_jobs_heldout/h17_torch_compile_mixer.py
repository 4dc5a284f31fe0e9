"""expect: healthy. An MLP-Mixer-style image model wrapped in torch.compile (inductor, fixed shapes),
trained with Adam; the first step compiles forward and backward (a burst of allocations while
inductor autotunes/benchmarks), then steady training with oomdoctor.step() markers. If compilation
is not available on this machine the job says so and trains the eager model (still healthy).
About 20 s of compilation then about 20 s of training.

GPU: `python -m oomdoctor record -- python h17_torch_compile_mixer.py`. `--cpu-smoke`: a few tiny steps on the CPU (eager).
"""
import sys
import time

import torch
from torch import nn

import oomdoctor

SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
torch.manual_seed(0)


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.n2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Mixer(nn.Module):
    def __init__(self, img: int, patch: int, dim: int, depth: int, classes: int):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, patch, stride=patch)
        tokens = (img // patch) ** 2
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


img, batch, classes = (32, 4, 10) if SMOKE else (128, 128, 1000)
eager = Mixer(img, 16 if not SMOKE else 8, 64 if SMOKE else 512, 2 if SMOKE else 6, classes).to(DEV)
opt = torch.optim.Adam(eager.parameters(), lr=3e-4)


def train_step(model) -> torch.Tensor:
    x = torch.randn(batch, 3, img, img, device=DEV)
    y = torch.randint(0, classes, (batch,), device=DEV)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


t0 = time.time()
model = eager
step = 0
if not SMOKE:
    try:
        compiled = torch.compile(eager, dynamic=False)
        train_step(compiled)  # compiles forward and backward
        torch.cuda.synchronize()
        model = compiled
        step = 1
        print(f"compiled in {time.time() - t0:.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - no compiler toolchain here: the eager model is the same job
        print(f"torch.compile unavailable ({type(exc).__name__}: {str(exc)[:200]}); training eagerly", flush=True)
oomdoctor.step()
t1 = time.time()
while step < (3 if SMOKE else 20000) and time.time() - t1 < 20 and time.time() - t0 < 75:
    loss = train_step(model)
    step += 1
    oomdoctor.step()
    if step % 200 == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
print("done", step, "steps", "compiled" if model is not eager else "eager")
