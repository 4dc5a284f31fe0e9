"""GPT-2 small with positions up to 16384, for `max-batch --dim seq`: the longest sequence at a fixed
batch. build(batch_size, seq_len=...) is the compatible extension of the workload contract."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build(batch_size, seq_len=1024):
    config = GPT2Config(n_positions=16384)
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    return {"model": GPT2LMHeadModel(config), "inputs": {"input_ids": ids, "labels": ids},
            "optimizer": "adamw", "amp": "bf16"}
