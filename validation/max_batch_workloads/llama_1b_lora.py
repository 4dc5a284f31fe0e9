"""LoRA (peft, r=16 on the attention projections) on the Llama-style 1.1B model, frozen bf16 base,
AdamW on the adapters, 1024 tokens. No download."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def build(batch_size):
    cfg = LlamaConfig(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                      intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (no fp32 copy first)
    try:
        base = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    base.config.use_cache = False
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                  "o_proj"], lora_dropout=0.0))
    ids = torch.randint(0, 32000, (batch_size, 1024))
    return {"model": model, "inputs": {"input_ids": ids, "labels": ids}, "optimizer": "adamw"}
