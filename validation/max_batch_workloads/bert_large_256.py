"""BERT-large (340M) from its config, sequence classification on 256 tokens, AdamW, bf16."""
import torch
from transformers import BertConfig, BertForSequenceClassification


def build(batch_size):
    config = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                        num_labels=2)
    ids = torch.randint(0, config.vocab_size, (batch_size, 256))
    return {"model": BertForSequenceClassification(config),
            "inputs": {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                       "labels": torch.randint(0, 2, (batch_size,))},
            "optimizer": "adamw", "amp": "bf16"}
