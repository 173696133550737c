"""Greedy generation with a small randomly initialised Llama-style model (RMSNorm,
rotary embeddings, grouped-query attention, SwiGLU), decoding with two attention paths:
PyTorch's SDPA over a preallocated KV cache (rotary applied in PyTorch), and flashdoc's
flash_attn_with_kvcache (which appends to the cache and applies the rotary embedding
itself). In float32 both must produce the same tokens; the tokens per second of each
are printed. On a CPU the model is tiny and the speeds mean nothing (flashdoc's kernels
run in Triton's interpreter there)."""
# flashdoc: gpu-only

import time

import torch
import torch.nn.functional as F
from torch import nn

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
gpu = device == "cuda"

# --8<-- [start:config]
vocab, hidden, layers = (32000, 2048, 16) if gpu else (256, 64, 2)
heads, kv_heads, head_dim = (32, 8, 64) if gpu else (4, 2, 16)
mlp = 4 * hidden
batch, prompt_len, new_tokens = (8, 512, 256) if gpu else (2, 8, 6)
max_len = prompt_len + new_tokens
# --8<-- [end:config]


def rotary_tables(length, dim, base=10000.0):
    """cos and sin, (length, dim / 2): position p turns pair i by p / base^(2i/dim)."""
    inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """Rotary embedding of x (B, S, H, D) with cos/sin (S, D/2), pairs (i, i + D/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# --8<-- [start:attention]
class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(hidden, heads * head_dim, bias=False)
        self.kv = nn.Linear(hidden, 2 * kv_heads * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, cache, pos, start, impl):
        """x: (B, S, hidden) at positions start .. start + S - 1 of every sequence;
        cache: this layer's (k_cache, v_cache), each (B, max_len, kv_heads, head_dim);
        pos: the same start as a (B,) int32 tensor on the GPU, as a server keeps it."""
        B, S, _ = x.shape
        q = self.q(x).view(B, S, heads, head_dim)
        k, v = self.kv(x).view(B, S, 2, kv_heads, head_dim).unbind(2)
        k_cache, v_cache = cache
        cos, sin = ROTARY
        if impl == "flashdoc":  # appends k, v at pos (rotating k and q), then attends
            out = flashdoc.flash_attn_with_kvcache(
                q,
                k_cache,
                v_cache,
                k,
                v,
                rotary_cos=cos,
                rotary_sin=sin,
                cache_seqlens=pos,
                causal=True,
                rotary_interleaved=False,
            )
        else:  # SDPA: rotate in PyTorch, write the cache, attend over its first keys
            q = rotate(q, cos[start : start + S], sin[start : start + S])
            k_cache[:, start : start + S] = rotate(
                k, cos[start : start + S], sin[start : start + S]
            )
            v_cache[:, start : start + S] = v
            keys, vals = (c[:, : start + S].transpose(1, 2) for c in (k_cache, v_cache))
            # S queries at the end of start + S keys: the causal mask's bottom-right
            # corner (for a prompt, start = 0 and the two corners coincide)
            mask = None
            if S > 1:
                mask = torch.ones(S, start + S, dtype=torch.bool, device=x.device)
                mask = mask.tril(diagonal=start)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), keys, vals, attn_mask=mask, enable_gqa=True
            )
            out = out.transpose(1, 2)
        return self.o(out.reshape(B, S, heads * head_dim))


# --8<-- [end:attention]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
        self.attn = Attention()
        self.gate_up = nn.Linear(hidden, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, hidden, bias=False)

    def forward(self, x, cache, pos, start, impl):
        x = x + self.attn(self.norm1(x), cache, pos, start, impl)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens, caches, pos, start, impl):
        x = self.embed(tokens)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache, pos, start, impl)
        return self.head(self.norm(x[:, -1]))  # logits of the last position


# --8<-- [start:generate]
@torch.no_grad()
def generate(model, prompt, impl, dtype):
    """Greedy decoding: the prompt in one call (prefill), then one token per call."""
    caches = [
        tuple(
            torch.zeros(batch, max_len, kv_heads, head_dim, device=device, dtype=dtype)
            for _ in range(2)
        )
        for _ in range(layers)
    ]
    pos = torch.zeros(batch, dtype=torch.int32, device=device)
    start, tokens = 0, prompt
    out = []
    for _ in range(new_tokens):
        logits = model(tokens, caches, pos, start, impl)
        pos += tokens.shape[1]
        start += tokens.shape[1]
        tokens = logits.argmax(-1, keepdim=True)
        out.append(tokens)
    return torch.cat(out, dim=1)


# --8<-- [end:generate]


torch.manual_seed(0)
model = Model().to(device)
for p in model.parameters():  # wider than the usual 0.02: logits far apart, no ties
    if p.dim() > 1:
        nn.init.normal_(p, std=hidden**-0.5)
prompt = torch.randint(0, vocab, (batch, prompt_len), device=device)


def timed_generate(impl, dtype):
    """(tokens, seconds) of one generation, the GPU's work included."""
    if gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = generate(model, prompt, impl, dtype)
    if gpu:
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - start


ROUNDS = 3 if gpu else 1
results, speeds = {}, {}
for dtype in (torch.float32, torch.bfloat16) if gpu else (torch.float32,):
    model = model.to(dtype)
    cos, sin = rotary_tables(max_len, head_dim)
    ROTARY = (cos.to(device, dtype), sin.to(device, dtype))
    name = str(dtype).removeprefix("torch.")
    seconds = {"sdpa": [], "flashdoc": []}
    for impl in seconds:
        generate(model, prompt, impl, dtype)  # warm-up: compiles the kernels
    # the two loops alternate, and each keeps its fastest round: other work on the
    # host can slow a round down, never speed it up
    for _ in range(ROUNDS):
        for impl in seconds:
            results[dtype, impl], s = timed_generate(impl, dtype)
            seconds[impl].append(s)
    for impl in seconds:
        speeds[impl] = batch * new_tokens / min(seconds[impl])
        print(
            f"{name:8s} {impl:8s}: {speeds[impl]:8.0f} tokens/s "
            f"({batch} sequences x {new_tokens} new tokens after {prompt_len})"
        )
    print(
        f"{name}: flashdoc's loop runs {speeds['flashdoc'] / speeds['sdpa']:.2f}x"
        " as fast as SDPA's"
    )
    differ = results[dtype, "sdpa"] != results[dtype, "flashdoc"]
    same = 1 - differ.float().mean()
    # greedy decoding: after one different token, a sequence continues from another text
    agree = torch.where(differ.any(1), differ.int().argmax(1), new_tokens)
    if agree.min() == new_tokens:
        agreement = f"every sequence agrees on all {new_tokens}"
    else:
        agreement = (
            f"the sequences agree on their first {agree.min()} to {agree.max()} tokens"
        )
    print(
        f"{name}: {same:.1%} of the generated tokens are the same in both; "
        f"{agreement}\n"
    )
if not gpu:
    print("(on a CPU flashdoc runs in Triton's interpreter: the speeds mean nothing)")
first = results[torch.float32, "flashdoc"][0, :16].tolist()
print(f"first sequence, first {len(first)} generated tokens:", first)
assert torch.equal(results[torch.float32, "sdpa"], results[torch.float32, "flashdoc"])
