"""expect: healthy. A Llama-style 1.1B model built from its config (TinyLlama shape), bf16 weights,
AdamW, batch 4 x 512 tokens, with oomdoctor.step() markers (as the HF callback would put them)."""
import time

import torch
from _models import llama

import oomdoctor

model = llama()
model.gradient_checkpointing_enable()
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
t0, step = time.time(), 0
while time.time() - t0 < 35:
    idx = torch.randint(0, 32000, (4, 512), device="cuda")
    out = model(input_ids=idx, labels=idx)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    oomdoctor.step()
print("done", step, "steps")
