"""GPT-2 small (124M, from its config, no download), causal LM on 512 tokens, AdamW, bf16."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

SEQ = 512


def build(batch_size):
    config = GPT2Config()
    ids = torch.randint(0, config.vocab_size, (batch_size, SEQ))
    return {
        "model": GPT2LMHeadModel(config),
        "inputs": {"input_ids": ids, "labels": ids},
        "optimizer": "adamw",
        "amp": "bf16",
    }
