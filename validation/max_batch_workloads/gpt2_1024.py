"""GPT-2 small (124M) from its config, causal LM on 1024 tokens, AdamW, bf16."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build(batch_size):
    config = GPT2Config()
    ids = torch.randint(0, config.vocab_size, (batch_size, 1024))
    return {"model": GPT2LMHeadModel(config), "inputs": {"input_ids": ids, "labels": ids},
            "optimizer": "adamw", "amp": "bf16"}
