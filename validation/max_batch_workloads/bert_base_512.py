"""BERT-base from its config (no download), sequence classification on 512 tokens, AdamW, bf16."""
import torch
from transformers import BertConfig, BertForSequenceClassification


def build(batch_size):
    config = BertConfig(num_labels=2)
    ids = torch.randint(0, config.vocab_size, (batch_size, 512))
    return {"model": BertForSequenceClassification(config),
            "inputs": {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                       "labels": torch.randint(0, 2, (batch_size,))},
            "optimizer": "adamw", "amp": "bf16"}
