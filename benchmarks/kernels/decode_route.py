"""``flash_attn_func`` on decode steps: the split-KV kernel it sends them to, against the training forward they
ran on before, and a Hugging Face model generating through ``attn_implementation="flashdoc"`` either way.

    python3 benchmarks/kernels/decode_route.py                 # kernels and generation on the GPU
    python3 benchmarks/kernels/decode_route.py --skip-generate  # the kernels only
    python3 benchmarks/kernels/decode_route.py --skip-kernels --prompts padded  # left-padded generation only

Kernels: bf16, 32 query heads over 8 KV heads (and 32 over 32), head dim 128, a full cache of each length, timed
per call as a CUDA graph of 20 calls (GPU time) and with ``do_bench`` (a call back to back, host included),
beside SDPA's cuDNN and flash backends on (B, H, S, D) copies. ``training`` is the forward ``flash_attn_func``
ran before it routed these calls: ``attn_fwd`` launched directly.

Generation: a randomly initialised Llama-style model built from a config (the size of
``snippets/decoding/generate.py``'s), greedy, with transformers' own cache, on equal prompts and on left-padded
ones, timed in rounds that alternate the implementations. ``flashdoc-training`` is flashdoc with the routing
turned off; on left-padded prompts, whose decode steps attend over the cache in place (``flash_attn_with_kvcache``
with ``cache_leftpad``), ``flashdoc-varlen`` is flashdoc with that branch turned off, so that every step unpads
the cache and runs the varlen training kernel. In float32 every implementation must produce SDPA's tokens.
"""

import argparse
import contextlib
import sys
import time
from pathlib import Path
from unittest import mock

import torch

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import flashdoc  # noqa: E402, I001
import flashdoc.integrations.transformers as flashdoc_hf  # noqa: E402
import flashdoc.interface as interface  # noqa: E402
import triton  # noqa: E402
from benchmarks.decode import graph_time_ms  # noqa: E402
from flashdoc.kernels.forward import attn_fwd  # noqa: E402

# (batch, cache length, query positions, query heads, KV heads)
POINTS = [
    (1, 4096, 1, 32, 8),
    (1, 32768, 1, 32, 8),
    (8, 4096, 1, 32, 8),
    (8, 32768, 1, 32, 8),
    (64, 4096, 1, 32, 8),
    (64, 512, 1, 32, 8),
    (256, 128, 1, 32, 8),
    (1, 32768, 1, 32, 32),
    (8, 4096, 4, 32, 8),
    (8, 4096, 16, 32, 8),
]


def kernel_calls(batch, cache, seqlen_q, heads, kv_heads):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    kw = dict(device="cuda", dtype=torch.bfloat16, generator=g)
    q = torch.randn(batch, seqlen_q, heads, 128, **kw)
    k = torch.randn(batch, cache, kv_heads, 128, **kw)
    v = torch.randn(batch, cache, kv_heads, 128, **kw)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, seqlen_q, device="cuda", dtype=torch.float32)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(
                    qs, ks, vs, is_causal=False, enable_gqa=kv_heads != heads
                )

        return call

    calls = {
        "routed": lambda: flashdoc.flash_attn_func(q, k, v, causal=True),
        "training": lambda: attn_fwd(q, k, v, out, lse, 128**-0.5, True, True),
        "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION),
    }
    # seqlen_q > 1 with causal: SDPA's mask is top-left, so its rows see fewer keys; it is timed unmasked
    ref = flashdoc.flash_attn_func(q, k, v, causal=True)
    attn_fwd(q, k, v, out, lse, 128**-0.5, True, True)
    error = (ref.float() - out.float()).abs().max().item()
    return calls, error


def time_kernels():
    print("| batch x cache x Sq (H/Hk) | routed | training | sdpa-cudnn | sdpa-flash | routed / training |")
    print("|---|---|---|---|---|---|")
    for batch, cache, seqlen_q, heads, kv_heads in POINTS:
        calls, error = kernel_calls(batch, cache, seqlen_q, heads, kv_heads)
        graph, bench = {}, {}
        for name, call in calls.items():
            try:
                call()
                graph[name] = graph_time_ms([call]) * 1e3
                bench[name] = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            except Exception as e:  # a backend that refuses the shape
                print(f"  ({name}: {str(e).splitlines()[0][:90]})")
                graph[name] = bench[name] = float("nan")
        cells = " | ".join(f"{graph[n]:.1f} / {bench[n]:.1f}" for n in calls)
        ratio = graph["training"] / graph["routed"]
        print(f"| {batch} x {cache} x {seqlen_q} ({heads}/{kv_heads}) | {cells} | {ratio:.2f}x |  max diff {error:.1e}")
    print("(us per call: CUDA graph / do_bench)")


def build_model(dtype, impl):
    import transformers

    import flashdoc.integrations.transformers as flashdoc_hf

    flashdoc_hf.register()
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=impl)
    return model.to(dtype).eval()


# the switches a run turns off, as (module, function): each is patched to answer False
NO_ROUTE = ((interface, "_is_decode_step"),)
NO_IN_PLACE = ((flashdoc_hf, "_may_be_a_decode_step"),)


def generate(model, prompt, mask, new_tokens, off=()):
    with contextlib.ExitStack() as switches, torch.no_grad():
        for module, name in off:
            switches.enter_context(mock.patch.object(module, name, return_value=False))
        torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = model.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        torch.cuda.synchronize()
        return tokens[:, prompt.shape[1] :], time.perf_counter() - start


def time_generation(batch, prompt_len, new_tokens, rounds, padded=False):
    """Tokens per second of each implementation; ``padded``: prompt b is left-padded by b / (2 x batch) of the
    prompt length, as a batch of prompts of different lengths is."""
    for dtype in (torch.float32, torch.bfloat16):
        models = {"sdpa": build_model(dtype, "sdpa"), "flashdoc": build_model(dtype, "flashdoc")}
        models["flashdoc"].load_state_dict(models["sdpa"].state_dict())
        runs = {"sdpa": (models["sdpa"], ()), "flashdoc": (models["flashdoc"], ())}
        runs["flashdoc-training"] = (models["flashdoc"], NO_ROUTE)
        if padded:
            runs["flashdoc-varlen"] = (models["flashdoc"], NO_IN_PLACE)
        prompt = torch.randint(1, 32000, (batch, prompt_len), device="cuda", generator=torch.Generator("cuda"))
        mask = torch.ones_like(prompt)
        if padded:
            for b in range(batch):
                mask[b, : b * prompt_len // (2 * batch)] = 0
            prompt = prompt * mask
        for model, off in runs.values():
            generate(model, prompt, mask, 4, off)  # compiles
        seconds = {name: [] for name in runs}
        tokens = {}
        for r in range(rounds):
            names = list(runs)[r % len(runs) :] + list(runs)[: r % len(runs)]
            for name in names:
                model, off = runs[name]
                tokens[name], s = generate(model, prompt, mask, new_tokens, off)
                seconds[name].append(s)
        rate = {name: batch * new_tokens / min(s) for name, s in seconds.items()}
        same = {name: (tokens[name] == tokens["sdpa"]).float().mean().item() for name in runs}
        line = ", ".join(f"{n} {rate[n]:.0f} tok/s ({same[n]:.1%} of sdpa's tokens)" for n in runs)
        kind = "left-padded prompts up to" if padded else "prompt"
        print(f"{dtype}, batch {batch}, {kind} {prompt_len}, {new_tokens} new: {line}", flush=True)
        del models, runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--skip-kernels", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--prompts", choices=("all", "equal", "padded"), default="all", help="which generation cases to time"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("decode_route.py times GPU kernels: run it where CUDA is available")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    if not args.skip_kernels:
        time_kernels()
    if not args.skip_generate:
        cases = [(8, 512, 128, False), (1, 4096, 128, False), (8, 512, 128, True), (8, 2048, 128, True)]
        for batch, prompt_len, new_tokens, padded in cases:
            if args.prompts in ("all", "padded" if padded else "equal"):
                time_generation(batch, prompt_len, new_tokens, args.rounds, padded)


if __name__ == "__main__":
    main()
