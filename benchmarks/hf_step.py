"""One training step of a Hugging Face Llama-style model with ``attn_implementation="flashdoc"`` against "sdpa".

    python3 benchmarks/hf_step.py --out OUT            # the run (about 2 minutes on an H200, compiles included)
    python3 benchmarks/hf_step.py --out OUT --quick    # fewer timed steps, no eager attention
    python3 benchmarks/hf_step.py --out OUT --smoke    # a tiny model in float32 (the interpreter on a CPU)

The target it checks: the step time of the model (forward + backward, bf16, 8k tokens) with flashdoc's attention
is at most SDPA's, measured in the same run, in each layout below.

**The model** is a ``LlamaConfig`` with random weights (nothing is downloaded): hidden 1024, 8 layers, 16 query
heads over 8 KV heads (head dim 64, grouped-query attention), MLP 2816, vocabulary 32000, about 160M parameters.
Attention has to be a visible share of the step for the step time to say anything about it, and that share
falls as the model widens (its FLOPs per token grow with the sequence length, the matmuls' with the hidden size):
at this size the attention matmuls are 6% of the matmul FLOPs in the dense layout, 5% packed and 1.5% padded
(padding inflates the projections, not the varlen attention), and their share of the time is larger, since
attention at head dim 64, with its softmax, runs well below the projections' matmul rate. A smaller model would be
host-bound. The share is measured, not assumed: the same model with attention replaced by the identity on its
queries (``no_attention``) is timed beside the others, and ``attention_share`` (1 - that time / the step's time) is
recorded for each implementation; ``meta.layouts.*.attention_flop_share`` holds the FLOP shares.
Weights are drawn with std 2 / sqrt(hidden) (``init_std``) rather than transformers' 0.02, so that the attention
weights are far from uniform and the loss checks below can see a masking mistake.

**The step** is the model's forward with ``labels`` (transformers' shifted cross-entropy, in float32) and
``loss.backward()``, gradients set to None between steps. No optimizer: AdamW's update is the same work for every
attention implementation (the same parameters), so it would add one constant to both times and only dilute the
ratio this measures. Dropout is 0 (the config's default); the model is in training mode.

**The batches** hold the same 8192 real tokens (seeded random ids) in three layouts:

1. ``dense``: 8 rows of 1024 tokens, no padding and no mask.
2. ``padded``: sequences with lengths drawn log-uniformly from 128 to 2048 (seeded, the last one trimmed so that
   they sum to 8192), right-padded to the longest, with a 2-D ``attention_mask``; the labels of padding are -100.
   flashdoc unpads inside each attention layer (one varlen call); SDPA gets transformers' 4-D boolean mask.
3. ``packed``: the same sequences in one row, padding-free, with ``position_ids`` restarting at 0 for each; the
   first label of each sequence is -100, so the loss counts the same predictions as the padded layout. flashdoc
   finds the sequences from the position ids and runs one varlen call. transformers (``masking_utils``, 4.5x and
   5.x) builds SDPA's mask from the same position ids when there is no 2-D mask and no cache
   (``find_packed_sequence_indices``): a 4-D block-diagonal causal mask over the whole row, so SDPA runs packed
   too, through a masked backend; the run checks that transformers has that function and records it
   (``meta.sdpa_packed``), and skips SDPA's packed row if not. ``use_cache=False`` throughout (with a cache,
   transformers does not look for packed sequences).

Eager attention (transformers' matmul-softmax-matmul) is timed too, in the dense and padded layouts and not with
``--quick``: a third reference that costs a few seconds. Its packed row would materialise 8k x 8k scores per
head and layer, so it is left out.

**Timing.** All implementations share one set of weights (one model's ``state_dict`` loaded into the others). Each
is warmed up (the first call compiles and autotunes flashdoc's kernels; that call's wall time is recorded as
``first_call_s``), then timed in rounds: every round times each implementation for a few consecutive steps,
starting with the next implementation from round to round, with CUDA events around each step; a record's ``ms``
is the median over all its steps (``ms_p20`` and ``ms_p80`` beside it). The timing process's threads are pinned to
one CPU, as in ``benchmarks.run`` (host work decides part of a step of a model this small). ``tokens_per_s``
counts the 8192 real tokens, never padding. ``peak_gb`` is the peak memory allocated during one step minus what
was allocated before it.

**Checks.** Without an optimizer every step computes the same loss; the first step's loss of each implementation
is compared with SDPA's in the same layout (``loss_check``: relative difference within ``LOSS_RTOL``), and each
implementation's packed loss with its padded loss (the same predictions, so they agree unless a layout mixes
sequences).

Outputs in ``--out``: ``results.json`` (``meta``, ``records``, ``targets``, ``loss_checks``), rewritten after every
layout, and ``hf_step.md`` (the table and the target rows), both printed at the end. Without a GPU, ``--smoke``
runs a 2-layer model of hidden 64 on 64 tokens in float32, flashdoc's kernels in Triton's interpreter: a check of
the script and its outputs, whose numbers mean nothing.
"""

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: the checkout's flashdoc and benchmarks
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flashdoc  # noqa: E402, F401, I001  (first: without a GPU it turns on Triton's interpreter)

from benchmarks import peers, timing  # noqa: E402
from benchmarks.run import environment  # noqa: E402
from benchmarks.varlen import draw_lengths  # noqa: E402

MODEL = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=8,
    vocab_size=32000,
    max_position_embeddings=4096,
)
SMOKE_MODEL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=96,
    max_position_embeddings=128,
)
SHAPE = dict(tokens=8192, dense_rows=8, min_len=128, max_len=2048)
SMOKE_SHAPE = dict(tokens=64, dense_rows=2, min_len=8, max_len=32)
# (warm-up steps, rounds, timed steps per implementation and round)
STEPS = dict(full=(3, 6, 5), quick=(2, 3, 4), smoke=(1, 1, 2))
IMPLS = ("flashdoc", "sdpa", "eager")
# The same model with attention replaced by the identity on the queries: the step's time without attention, so
# that (step - this) is attention's share of the step, whatever implements it.
NO_ATTENTION = "no_attention"
LAYOUTS = ("dense", "padded", "packed")
EAGER_LAYOUTS = ("dense", "padded")
# The losses are float32 means over thousands of tokens; bf16 activations move them by far less than this.
LOSS_RTOL = {torch.bfloat16: 5e-3, torch.float32: 1e-4}
SEED = 0


# ---------------------------------------------------------------------------------------------------------------
# The model and the batches
# ---------------------------------------------------------------------------------------------------------------


def build_models(model_kwargs, impls, device, dtype):
    """{impl: model} with identical weights (the first model's state_dict loaded into the others), in training
    mode."""
    import transformers

    import flashdoc.integrations.transformers as flashdoc_hf

    flashdoc_hf.register()
    transformers.AttentionInterface.register(NO_ATTENTION, _no_attention)
    transformers.AttentionMaskInterface.register(NO_ATTENTION, _no_mask)
    config = transformers.LlamaConfig(
        **model_kwargs,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        initializer_range=init_std(model_kwargs["hidden_size"]),
    )
    models, state = {}, None
    for impl in impls:
        torch.manual_seed(SEED)
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl)
        if state is None:
            state = model.state_dict()
        else:
            model.load_state_dict(state)
        models[impl] = model.to(dtype=dtype).train()
    return models


def _no_attention(module, query, key, value, attention_mask, **kwargs):
    """The step without attention: each layer's output is its queries, (batch, seqlen, heads, head_dim)."""
    return query.transpose(1, 2), None


def _no_mask(*args, **kwargs):
    return None


def init_std(hidden):
    """Weights drawn with std 2 / sqrt(hidden): the attention logits q.k / sqrt(d) then have a std near 4, so the
    attention weights are far from uniform and the loss checks can see a masking mistake (with transformers'
    default of 0.02 every logit is near 0 and every loss is log(vocabulary) to six digits). The step's work does
    not depend on the values."""
    return 2 / math.sqrt(hidden)


def make_batches(shape, vocab, device):
    """{layout: model kwargs}: the same real tokens dense, padded (right, with a 2-D mask) and packed (one row,
    position ids), and the sequence lengths of the padded and packed layouts."""
    total = shape["tokens"]
    if total % shape["dense_rows"]:
        raise ValueError(f"tokens ({total}) must be a multiple of dense_rows ({shape['dense_rows']})")
    lengths = draw_lengths(total, shape["min_len"], shape["max_len"], seed=SEED)
    ids = torch.randint(0, vocab, (total,), generator=torch.Generator().manual_seed(SEED + 1))
    dense = ids.view(shape["dense_rows"], -1)

    longest = max(lengths)
    padded = torch.zeros(len(lengths), longest, dtype=torch.long)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()[:-1]]
    for row, (start, n) in enumerate(zip(starts, lengths, strict=True)):
        padded[row, :n] = ids[start : start + n]
        mask[row, :n] = 1

    packed = ids[None].clone()
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    packed_labels = packed.clone()
    packed_labels[0, starts] = -100  # no prediction across a boundary between sequences

    batches = dict(
        dense=dict(input_ids=dense, labels=dense.clone()),
        padded=dict(input_ids=padded, attention_mask=mask, labels=padded.masked_fill(mask == 0, -100)),
        packed=dict(input_ids=packed, position_ids=position_ids, labels=packed_labels),
    )
    for batch in batches.values():
        for name in list(batch):
            batch[name] = batch[name].to(device)
        batch["use_cache"] = False
    return batches, lengths


def attention_flop_share(model_kwargs, seqlens, padded_tokens):
    """The attention matmuls' share of the forward's matmul FLOPs (backward: the same share, near enough).

    Attention: 4 x heads x head_dim x n^2 / 2 per causal sequence of n tokens; the projections, the MLP and the
    vocabulary's head: 2 x parameters x tokens (the tokens the matmuls run on, padding included)."""
    h, heads, kv = model_kwargs["hidden_size"], model_kwargs["num_attention_heads"], model_kwargs["num_key_value_heads"]
    d = h // heads
    per_layer = h * heads * d * 2 + h * kv * d * 2 + 3 * h * model_kwargs["intermediate_size"]
    linear = 2 * padded_tokens * (model_kwargs["num_hidden_layers"] * per_layer + h * model_kwargs["vocab_size"])
    attention = model_kwargs["num_hidden_layers"] * sum(2 * heads * d * n * n for n in seqlens)
    return attention / (attention + linear)


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------


def make_step(model, batch):
    def step():
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss

    return step


def timed_steps(step, n, device):
    """The times in ms of ``n`` consecutive steps: CUDA events around each on a GPU, the wall clock on a CPU."""
    if device != "cuda":
        times = []
        for _ in range(n):
            start = time.perf_counter()
            step()
            times.append((time.perf_counter() - start) * 1e3)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def warm_up(step, n, device):
    """The first step's loss and wall time (compiles, autotunes), then n - 1 more steps, the last one measuring
    the peak memory a step allocates beyond what was allocated before it."""
    timing.sync(device)
    start = time.perf_counter()
    loss = step().item()
    timing.sync(device)
    first_call_s = time.perf_counter() - start
    for _ in range(max(n - 2, 0)):
        step()
    peak_gb = None
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak_gb = (torch.cuda.max_memory_allocated() - before) / 2**30
    elif n > 1:
        step()
    return loss, first_call_s, peak_gb


def time_layout(models, impls, batch, steps, device):
    """{impl: record} for one layout: warm-ups, then rounds of steps in a rotated order."""
    warmup, rounds, per_round = steps
    runs, records = {}, {}
    for impl in impls:
        step = make_step(models[impl], batch)
        try:
            loss, first_call_s, peak_gb = warm_up(step, warmup, device)
        except Exception as e:  # out of memory, a transformers that cannot run this layout, ...
            records[impl] = dict(error=peers.failure_reason(e))
            print(f"    {impl}: {records[impl]['error']}", flush=True)
            continue
        finally:
            models[impl].zero_grad(set_to_none=True)
        runs[impl] = step
        records[impl] = dict(loss=loss, first_call_s=first_call_s, peak_gb=peak_gb, step_ms=[])
    order = list(runs)
    for r in range(rounds):
        shift = r % max(len(order), 1)
        for impl in order[shift:] + order[:shift]:
            records[impl]["step_ms"] += timed_steps(runs[impl], per_round, device)
            models[impl].zero_grad(set_to_none=True)
    for record in records.values():
        if "step_ms" in record:
            ms = sorted(record["step_ms"])
            record.update(ms=statistics.median(ms), ms_p20=_quantile(ms, 0.2), ms_p80=_quantile(ms, 0.8))
    return records


def _quantile(sorted_values, q):
    i = q * (len(sorted_values) - 1)
    lo, hi = math.floor(i), math.ceil(i)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (i - lo)


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


def sdpa_packed_support():
    """(supported, why): whether transformers builds SDPA's mask from packed position ids."""
    try:
        from transformers import masking_utils
    except ImportError as e:
        return False, f"transformers has no masking_utils ({e})"
    find = getattr(masking_utils, "find_packed_sequence_indices", None)
    if find is None:
        return False, "transformers' masking_utils has no find_packed_sequence_indices: SDPA would mix sequences"
    found = find(torch.tensor([[0, 1, 2, 0, 1]]))
    if found is None or int(found[0, -1]) != 1:
        return False, "transformers' find_packed_sequence_indices does not split [0, 1, 2, 0, 1] in two"
    return True, "transformers builds a 4-D block-diagonal causal mask from the position ids (masking_utils)"


def loss_checks(results, dtype):
    """The first step's loss of each implementation against SDPA's in the same layout, and each implementation's
    packed loss against its padded loss."""
    rtol = LOSS_RTOL[dtype]
    checks = []

    def check(what, a, b):
        diff = abs(a - b) / abs(b)
        checks.append(dict(check=what, loss=a, reference=b, rel_diff=diff, rtol=rtol, ok=diff <= rtol))

    for layout, records in results.items():
        ref = records.get("sdpa", {}).get("loss")
        for impl, record in records.items():
            if impl in IMPLS and impl != "sdpa" and ref is not None and "loss" in record:
                check(f"{layout}: {impl} vs sdpa", record["loss"], ref)
    for impl in IMPLS:
        packed = results.get("packed", {}).get(impl, {}).get("loss")
        padded = results.get("padded", {}).get(impl, {}).get("loss")
        if packed is not None and padded is not None:
            check(f"{impl}: packed vs padded", packed, padded)
    return checks


def targets(results):
    """Per layout: flashdoc's step time <= SDPA's, with the ratio, or why it is not measured."""
    rows = []
    for layout, records in results.items():
        ours, sdpa = records.get("flashdoc", {}).get("ms"), records.get("sdpa", {}).get("ms")
        if ours is None or sdpa is None:
            missing = "flashdoc" if ours is None else "sdpa"
            why = records.get(missing, {}).get("error", "not run")
            rows.append(dict(layout=layout, met=None, ratio=None, note=f"{missing} not measured: {why}"))
        else:
            rows.append(dict(layout=layout, met=ours <= sdpa, ratio=ours / sdpa, flashdoc_ms=ours, sdpa_ms=sdpa))
    return rows


def markdown(meta, results, target_rows, checks):
    m = meta["model"]
    lines = [
        f"Llama-style model from a config (random weights): hidden {m['hidden_size']}, "
        f"{m['num_hidden_layers']} layers, {m['num_attention_heads']} heads over {m['num_key_value_heads']} KV "
        f"heads, MLP {m['intermediate_size']}, vocabulary {m['vocab_size']}; {meta['dtype']}, forward + backward "
        f"(no optimizer), {meta['tokens']} real tokens per step, on {meta['env']['gpu']}. Median of "
        f"{meta['timed_steps']} steps per implementation.",
        "",
        "| layout | attention | step ms (p20-p80) | tokens/s | attention's share | peak GB | first step s | loss "
        "| vs sdpa |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for layout, records in results.items():
        sdpa_ms = records.get("sdpa", {}).get("ms")
        for impl, r in records.items():
            if "ms" not in r:
                lines.append(f"| {layout} | {impl} | — | — | — | — | — | — | {r.get('error', 'not run')} |")
                continue
            peak = f"{r['peak_gb']:.2f}" if r["peak_gb"] is not None else "—"
            ratio = f"{r['ms'] / sdpa_ms:.3f}x" if sdpa_ms else "—"
            share = f"{r['attention_share']:.0%}" if "attention_share" in r else "—"
            lines.append(
                f"| {layout} | {impl} | {r['ms']:.2f} ({r['ms_p20']:.2f}-{r['ms_p80']:.2f}) | "
                f"{r['tokens_per_s']:,.0f} | {share} | {peak} | {r['first_call_s']:.1f} | {r['loss']:.5f} | {ratio} |"
            )
    lines += ["", "Target: flashdoc's step time <= SDPA's in the same run.", ""]
    lines += ["| layout | flashdoc ms | sdpa ms | flashdoc / sdpa | target |", "|---|---|---|---|---|"]
    for t in target_rows:
        if t["met"] is None:
            lines.append(f"| {t['layout']} | — | — | — | not measured ({t['note']}) |")
        else:
            lines.append(
                f"| {t['layout']} | {t['flashdoc_ms']:.2f} | {t['sdpa_ms']:.2f} | {t['ratio']:.3f} | "
                f"{'met' if t['met'] else 'unmet'} |"
            )
    lines += ["", "Losses of the first step (relative difference, tolerance in brackets):", ""]
    for c in checks:
        verdict = "agree" if c["ok"] else "DISAGREE"
        lines.append(
            f"- {c['check']}: {c['loss']:.6f} vs {c['reference']:.6f}, {c['rel_diff']:.2e} ({c['rtol']:g}) {verdict}"
        )
    notes = meta.get("notes") or []
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def run(out_dir, quick=False, smoke=False):
    # the smoke run is a check of the script: float32 everywhere, on the GPU where there is one (flashdoc's CPU
    # path, Triton's interpreter, is only on where no GPU is)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and not smoke else torch.float32
    model_kwargs, shape = (SMOKE_MODEL, SMOKE_SHAPE) if smoke else (MODEL, SHAPE)
    steps = STEPS["smoke" if smoke else "quick" if quick else "full"]
    impls = (*IMPLS[:2], NO_ATTENTION) if quick else (*IMPLS, NO_ATTENTION)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    env = environment(device)
    import transformers

    env["transformers"] = transformers.__version__
    batches, lengths = make_batches(shape, model_kwargs["vocab_size"], device)
    packed_ok, packed_why = sdpa_packed_support()
    heads = model_kwargs["num_attention_heads"]
    rows = shape["dense_rows"]
    layouts_meta = dict(
        dense=dict(shape=[rows, shape["tokens"] // rows], seqlens=[shape["tokens"] // rows] * rows),
        padded=dict(shape=[len(lengths), max(lengths)], seqlens=lengths),
        packed=dict(shape=[1, shape["tokens"]], seqlens=lengths),
    )
    for lm in layouts_meta.values():
        lm["attention_flop_share"] = attention_flop_share(model_kwargs, lm["seqlens"], lm["shape"][0] * lm["shape"][1])
    meta = dict(
        env=env,
        model=model_kwargs,
        head_dim=model_kwargs["hidden_size"] // heads,
        dtype=str(dtype).removeprefix("torch."),
        device=device,
        tokens=shape["tokens"],
        shape=shape,
        seed=SEED,
        lengths=lengths,
        layouts=layouts_meta,
        steps=dict(zip(("warmup", "rounds", "per_round"), steps, strict=True)),
        timed_steps=steps[1] * steps[2],
        optimizer=None,
        sdpa_packed=dict(supported=packed_ok, why=packed_why),
        quick=quick,
        smoke=smoke,
        notes=[] if packed_ok else [f"SDPA's packed row is skipped: {packed_why}"],
    )
    print(
        f"HF training step on {env['gpu']}: torch {env['torch']}, transformers {env['transformers']}, "
        f"triton {env['triton']}; {meta['dtype']}, {shape['tokens']} tokens; {len(lengths)} sequences of "
        f"{min(lengths)}-{max(lengths)} tokens for the padded and packed layouts",
        flush=True,
    )
    print(f"SDPA on packed position ids: {packed_why}", flush=True)

    models = build_models(model_kwargs, impls, device, dtype)
    if device == "cuda" and hasattr(os, "sched_getaffinity"):
        cpu = min(os.sched_getaffinity(0))
        timing.pin_threads({cpu})
        meta["pinned_cpu"] = cpu

    results = {}
    for layout in LAYOUTS:
        layout_impls = [i for i in impls if i != "eager" or layout in EAGER_LAYOUTS]
        if layout == "packed" and not packed_ok:
            layout_impls = [i for i in layout_impls if i != "sdpa"]
        print(f"{layout}: {' x '.join(map(str, layouts_meta[layout]['shape']))} tokens", flush=True)
        records = time_layout(models, layout_impls, batches[layout], steps, device)
        if layout == "packed" and not packed_ok:
            records["sdpa"] = dict(error=packed_why)
        base_ms = records.get(NO_ATTENTION, {}).get("ms")
        for impl, r in records.items():
            if "ms" in r:
                r["tokens_per_s"] = shape["tokens"] / r["ms"] * 1e3
                if base_ms is not None and impl != NO_ATTENTION:
                    r["attention_share"] = 1 - base_ms / r["ms"]
                print(
                    f"    {impl:9s} {r['ms']:8.2f} ms  {r['tokens_per_s']:12,.0f} tok/s  loss {r['loss']:.5f}  "
                    f"first step {r['first_call_s']:.1f} s",
                    flush=True,
                )
        results[layout] = records
        if device == "cuda":
            torch.cuda.empty_cache()
        _write(out, meta, results, dtype, final=False)
    return _write(out, meta, results, dtype, final=True)


def _write(out, meta, results, dtype, final):
    target_rows, checks = targets(results), loss_checks(results, dtype)
    data = dict(meta=meta, records=results, targets=target_rows, loss_checks=checks)
    (out / "results.json").write_text(json.dumps(data, indent=1))
    table = markdown(meta, results, target_rows, checks)
    (out / "hf_step.md").write_text(table)
    if final:
        print()
        print(table)
        print(json.dumps(dict(targets=target_rows, loss_checks=checks), indent=1))
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results/hf", help="folder for results.json and hf_step.md")
    ap.add_argument("--quick", action="store_true", help="fewer timed steps, no eager attention")
    ap.add_argument("--smoke", action="store_true", help="a tiny float32 model: a check of the script")
    a = ap.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("benchmarks/hf_step.py needs transformers: pip install 'flashdoc[transformers]'")
    if not torch.cuda.is_available() and not a.smoke:
        sys.exit("benchmarks/hf_step.py measures a GPU; this machine has none (--smoke runs a tiny model on the CPU)")
    return run(a.out, quick=a.quick, smoke=a.smoke)


if __name__ == "__main__":
    main()
