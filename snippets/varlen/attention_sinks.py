"""Attention sinks, as gpt-oss uses them: one learned logit per head that joins every
row's softmax and has no value vector. flashdoc's kernels compute attention without
it, and the log-sum-exp they return is enough to fold it in exactly afterwards. Then a
tiny gpt-oss (random weights from a config, nothing to download) on flashdoc against
its own eager attention, which needs transformers 4.55 or newer (gpt-oss)."""

import copy

import torch

import flashdoc

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# --8<-- [start:identity]
batch, seqlen, heads, head_dim = 2, 24, 4, 16
q, k, v = (torch.randn(batch, seqlen, heads, head_dim).to(device) for _ in range(3))
sinks = torch.randn(heads).to(device)  # one logit per head

# The sink as one more column of scores, whose value vector is zeros.
scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * head_dim**-0.5
future = torch.ones(seqlen, seqlen, dtype=torch.bool, device=device).triu(1)
scores = scores.masked_fill(future, float("-inf"))
sink_column = sinks[None, :, None, None].expand(batch, heads, seqlen, 1)
weights = torch.softmax(torch.cat([scores, sink_column], dim=-1), dim=-1)
expected = torch.einsum("bhqk,bkhd->bqhd", weights[..., :-1], v)

# flashdoc without the sink, then each row scaled by sigmoid(lse - sink).
out, lse = flashdoc.flash_attn_func(q, k, v, causal=True, return_lse=True)
keep = torch.sigmoid(lse - sinks[:, None]).transpose(1, 2)  # (batch, seqlen, heads)
with_sinks = out * keep[..., None]
print(f"largest difference: {(with_sinks - expected).abs().max().item():.1e}")
share = ", ".join(f"{x:.2f}" for x in (1 - keep).mean(dim=(0, 1)).tolist())
print(f"mean weight each head's sink takes: {share}")
# --8<-- [end:identity]

# --8<-- [start:gpt_oss]
from transformers import AutoModelForCausalLM, GptOssConfig

import flashdoc.integrations.transformers

flashdoc.integrations.transformers.register()
config = GptOssConfig(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=8,  # every other layer attends to a window of 8 tokens
    layer_types=["sliding_attention", "full_attention"],
)
model = AutoModelForCausalLM.from_config(config, attn_implementation="flashdoc")
eager = AutoModelForCausalLM.from_config(
    copy.deepcopy(config), attn_implementation="eager"
)
model, eager = model.to(device), eager.to(device)
eager.load_state_dict(model.state_dict())

lengths = [12, 5, 9]
input_ids = torch.randint(0, config.vocab_size, (len(lengths), max(lengths)))
input_ids = input_ids.to(device)
attention_mask = torch.zeros_like(input_ids)
for row, n in enumerate(lengths):
    attention_mask[row, max(lengths) - n :] = 1  # left padding
real = attention_mask.bool()


def logits_and_sink_grad(m):
    """Logits at the real tokens, and the full-attention layer's sinks' gradient."""
    logits = m(input_ids, attention_mask=attention_mask).logits[real]
    logits.logsumexp(-1).mean().backward()  # any loss that reaches the sinks
    return logits.detach(), m.model.layers[1].self_attn.sinks.grad


ours, our_grad = logits_and_sink_grad(model)
theirs, their_grad = logits_and_sink_grad(eager)
print(f"attention: {model.config._attn_implementation}")
print(f"largest difference from eager's logits: {(ours - theirs).abs().max():.1e}")
relative = ((our_grad - their_grad).norm() / their_grad.norm()).item()
print(f"sinks' gradient against eager's, relative difference: {relative:.1e}")
# --8<-- [end:gpt_oss]
