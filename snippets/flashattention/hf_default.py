"""Which attention Hugging Face transformers uses when it is not told: a tiny Llama,
built from a config on the CPU (no download). Needs transformers
(pip install transformers)."""

import importlib.util

import transformers
from transformers import AutoModelForCausalLM, LlamaConfig

# --8<-- [start:default]
config = LlamaConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=4,
    vocab_size=100,
)
model = AutoModelForCausalLM.from_config(config)  # no attn_implementation given
print(
    f"transformers {transformers.__version__}: "
    f"the default attention is {model.config._attn_implementation!r}"
)

has_flash_attn = importlib.util.find_spec("flash_attn") is not None
print(f"flash-attn installed: {has_flash_attn}")
try:
    AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2")
    print('attn_implementation="flash_attention_2": accepted')
except (ImportError, ValueError) as err:
    print(
        f'attn_implementation="flash_attention_2": {type(err).__name__}:\n'
        f"  ...{str(err).splitlines()[0].rpartition('error: ')[2]}"
    )
# --8<-- [end:default]
