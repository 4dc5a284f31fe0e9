"""Validation zoo workload: BERT-base (BertConfig()), AdamW, fp32, seq 128 (CONTRACTS.md section 6)."""

import torch
from transformers import BertConfig, BertForSequenceClassification

SEQ = 128


def build(batch_size):
    model = BertForSequenceClassification(BertConfig())
    ids = torch.randint(0, 30522, (batch_size, SEQ))
    return {
        "model": model,
        "inputs": {"input_ids": ids, "labels": torch.randint(0, 2, (batch_size,))},
        "optimizer": "adamw",
        "amp": None,
        "train": True,
        "gradient_checkpointing": False,
    }
