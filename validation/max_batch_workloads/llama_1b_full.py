"""A Llama-style 1.1B model (TinyLlama's shape) from its config, full fine-tune: bf16 weights, AdamW
(state in bf16), 1024 tokens. No download."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def config():
    return LlamaConfig(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                       intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096)


def build(batch_size):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (no fp32 copy first)
    try:
        model = LlamaForCausalLM(config())
    finally:
        torch.set_default_dtype(previous)
    model.config.use_cache = False
    ids = torch.randint(0, 32000, (batch_size, 1024))
    return {"model": model, "inputs": {"input_ids": ids, "labels": ids}, "optimizer": "adamw"}
