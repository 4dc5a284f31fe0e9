"""Validation zoo workload: GPT-2 small, AdamW, bf16 autocast, seq 512 (CONTRACTS.md section 6)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SEQ = 512


def build(batch_size):
    model = GPT2LMHeadModel(GPT2Config())
    ids = torch.randint(0, 50257, (batch_size, SEQ))
    inputs = {"input_ids": ids, "labels": ids}
    return {
        "model": model,
        "inputs": inputs,
        "optimizer": "adamw",
        "amp": "bf16",
        "train": True,
        "gradient_checkpointing": False,
    }
