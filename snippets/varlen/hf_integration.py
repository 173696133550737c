"""A Hugging Face transformers model on flashdoc's kernels, with a padded batch:
register once, then attn_implementation="flashdoc". A tiny Llama from a config (random
weights, nothing to download) keeps it fast on a CPU; with a checkpoint,
from_pretrained takes the same argument."""

import copy

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

torch.manual_seed(0)  # the model's random weights, and so the differences printed below
device = "cuda" if torch.cuda.is_available() else "cpu"

# --8<-- [start:five_lines]
import flashdoc.integrations.transformers

flashdoc.integrations.transformers.register()  # adds attn_implementation="flashdoc"
tiny = dict(hidden_size=64, num_hidden_layers=2, vocab_size=256)
config = LlamaConfig(**tiny, num_attention_heads=4, num_key_value_heads=2)
# or .from_pretrained(name, ...)
model = AutoModelForCausalLM.from_config(config, attn_implementation="flashdoc")
model = model.to(device)
# --8<-- [end:five_lines]

# --8<-- [start:padded]
# the same weights, transformers' own attention
eager = AutoModelForCausalLM.from_config(
    copy.deepcopy(config), attn_implementation="eager"
)
eager = eager.to(device)
eager.load_state_dict(model.state_dict())

lengths = [12, 5, 9]
input_ids = torch.randint(0, config.vocab_size, (len(lengths), max(lengths)))
input_ids = input_ids.to(device)
attention_mask = torch.zeros_like(input_ids)
for row, n in enumerate(lengths):
    attention_mask[row, max(lengths) - n :] = 1  # left padding, as for generation

with torch.no_grad():
    ours = model(input_ids, attention_mask=attention_mask).logits
    theirs = eager(input_ids, attention_mask=attention_mask).logits
real = attention_mask.bool()
print(
    f"attention: {model.config._attn_implementation}, "
    f"batch of {len(lengths)} with lengths {lengths}"
)
difference = (ours - theirs)[real].abs().max().item()
print(f"largest difference from eager at real tokens: {difference:.1e}")
# --8<-- [end:padded]

# Packed, padding-free: the three sequences in one row, positions restarting at 0.
packed_ids = input_ids[real][None]
position_ids = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
with torch.no_grad():
    packed = model(packed_ids, position_ids=position_ids, use_cache=False).logits[0]
difference = (packed - ours[real]).abs().max().item()
print(
    f"packed {tuple(packed_ids.shape)} against padded: "
    f"largest difference {difference:.1e}"
)
