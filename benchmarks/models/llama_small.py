"""A small transformers Llama with random weights (issue 44's benchmark): 8 layers, hidden 1024, batch 8 × 1024
tokens. `cudaforge profile benchmarks/models/llama_small.py:make_model --inputs benchmarks/models/llama_small.py:example_inputs`."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_model():
    config = LlamaConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
        vocab_size=32000, max_position_embeddings=2048, use_cache=False,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def example_inputs():
    return {"input_ids": torch.randint(0, 32000, (8, 1024))}
