"""A healthy GPT-2 (random init, 6 layers) under bf16 autocast on CUDA, 60 steps of 8 x 512 tokens. Host memory
rises while CUDA and cuBLAS load in the first steps, then stays. Expected: no host-memory lead, no GPU growth."""
import time

import torch
import transformers

import oomdoctor

if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=6, n_embd=512, n_head=8, n_positions=512)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(60):
        ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        time.sleep(0.05)
        oomdoctor.step()
