"""BERT-base (from its config, no download) for sequence classification, 256 tokens, AdamW, bf16."""
import torch
from transformers import BertConfig, BertForSequenceClassification

SEQ = 256


def build(batch_size):
    config = BertConfig(num_labels=2)
    ids = torch.randint(0, config.vocab_size, (batch_size, SEQ))
    return {
        "model": BertForSequenceClassification(config),
        "inputs": {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                   "labels": torch.randint(0, 2, (batch_size,))},
        "optimizer": "adamw",
        "amp": "bf16",
    }
