"""attn_implementation="flashdoc" in Hugging Face transformers, against the models' own eager attention.

Tiny randomly initialised models built from configs (nothing is downloaded): Llama, Mistral (sliding window),
Gemma 2 (softcap, and sliding windows on every other layer), Qwen2 (sliding window by layer type), gpt-oss
(attention sinks, and sliding windows on every other layer) and BERT (a non-causal encoder), with grouped-query
attention. Each runs on padded (left and right), packed and plain
batches, and its logits and parameter gradients must meet flash-attn's rule against the same model's eager
attention in float64 (the same math with its softmax in float64 too, see ``oracle_attention``): flashdoc's
error <= 2 x the error of eager attention in the test's dtype (float32 on the CPU, where the kernels run in
Triton's interpreter; bfloat16 on a GPU).
"""

import copy

import pytest
import torch
from attention_oracle import DEVICE, assert_close_like_flash_attn

transformers = pytest.importorskip(
    "transformers", reason="the transformers integration needs transformers (pip install 'transformers>=4.53')"
)
from transformers import masking_utils  # noqa: E402

import flashdoc.integrations.transformers as flashdoc_hf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

VOCAB = 96
GPU = torch.cuda.is_available()


def tiny_config(kind: str, scale: str = "cpu"):
    """A config for ``kind`` with 2 layers (CPU) and GQA; weights drawn wide enough (initializer_range 0.1) that
    the attention weights are far from uniform, so a masking mistake moves the logits."""
    big = scale == "gpu"
    common = dict(
        vocab_size=VOCAB,
        hidden_size=512 if big else 64,
        intermediate_size=1024 if big else 128,
        num_hidden_layers=4 if big else 2,
        num_attention_heads=8 if big else 4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.1,
        attention_dropout=0.0,
    )
    window = 64 if big else 6
    if kind == "llama":
        return transformers.LlamaConfig(**common)
    if kind == "mistral":
        return transformers.MistralConfig(**common, sliding_window=window)
    if kind == "gemma2":
        return transformers.Gemma2Config(
            **common,
            head_dim=64 if big else 16,
            query_pre_attn_scalar=64 if big else 16,
            sliding_window=window,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=None,
            layer_types=["sliding_attention", "full_attention"] * (2 if big else 1),
        )
    if kind == "qwen2":
        return transformers.Qwen2Config(
            **common,
            use_sliding_window=True,
            sliding_window=window,
            max_window_layers=0,
            layer_types=["sliding_attention", "full_attention"] * (2 if big else 1),
        )
    if kind == "gpt_oss":
        if not hasattr(transformers, "GptOssConfig"):
            pytest.skip(f"transformers {transformers.__version__} has no gpt-oss (it arrived in 4.55)")
        return transformers.GptOssConfig(
            **{**common, "intermediate_size": 256 if big else 64},
            head_dim=64 if big else 16,
            num_local_experts=4,
            # bf16 (the GPU's) rounds router logits enough to swap a top-2 pick against the float64 oracle, which
            # moves the router's gradient by a whole expert's share; routing to all four keeps it continuous
            num_experts_per_tok=4 if big else 2,
            experts_implementation="eager",  # the grouped matmul takes no float64, which the oracle runs in
            sliding_window=window,
            layer_types=["sliding_attention", "full_attention"] * (2 if big else 1),
        )
    if kind == "qwen2_moe":  # its sliding layers keep their window on the module and do not pass it
        return transformers.Qwen2MoeConfig(
            **{**common, "intermediate_size": 64},
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            use_sliding_window=True,
            sliding_window=window,
            layer_types=["sliding_attention", "full_attention"] * (2 if big else 1),
            experts_implementation="eager",  # the grouped matmul takes no float64, which the oracle runs in
        )
    raise ValueError(f"kind must be llama, mistral, gemma2, qwen2, gpt_oss or qwen2_moe, got {kind!r}")


def oracle_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, s_aux=None, **kwargs
):
    """Eager attention's math, with eager's 4-D mask, in the inputs' dtype throughout.

    transformers' eager attention takes its softmax in float32; in a float64 model that turns the mask's
    float64 minimum into -inf, and a padded query that sees no key (left padding) then outputs NaN, which the
    next layer spreads to every token. This is the same computation with the softmax in float64. Sinks
    (``s_aux``, gpt-oss) are one more logit per head in every row, dropped after the softmax, as in gpt-oss's
    eager attention."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = query @ key.transpose(2, 3) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    if s_aux is not None:
        sinks = s_aux.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        probs = torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return (probs @ value).transpose(1, 2).contiguous(), None


def register_all():
    flashdoc_hf.register()
    transformers.AttentionInterface.register("oracle", oracle_attention)
    transformers.AttentionMaskInterface.register("oracle", masking_utils.eager_mask)


def build(config, attn: str, dtype, seed=0):
    """The same weights (seeded) under a given attention implementation and dtype, in evaluation mode."""
    register_all()
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=attn)
    return model.to(device=DEVICE, dtype=dtype).eval()


def make_batch(layout: str, lengths, seed=1):
    """input_ids with an attention mask (left or right padding), packed position_ids, or neither."""
    g = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    if layout == "packed":  # one row holding every sequence, positions restarting at 0
        ids = torch.randint(0, VOCAB, (1, sum(lengths)), generator=g)
        pos = torch.cat([torch.arange(n) for n in lengths])[None]
        real = torch.ones_like(ids, dtype=torch.bool)
        return dict(input_ids=ids.to(DEVICE), position_ids=pos.to(DEVICE), use_cache=False), real.to(DEVICE)
    ids = torch.randint(0, VOCAB, (len(lengths), longest), generator=g)
    if layout == "plain":
        return dict(input_ids=ids.to(DEVICE)), torch.ones_like(ids, dtype=torch.bool).to(DEVICE)
    mask = torch.zeros(len(lengths), longest, dtype=torch.long)
    for row, n in enumerate(lengths):
        if layout == "left":
            mask[row, longest - n :] = 1
        else:
            mask[row, :n] = 1
    return dict(input_ids=ids.to(DEVICE), attention_mask=mask.to(DEVICE)), mask.bool().to(DEVICE)


def run(model, batch, real, weights):
    """Logits at real tokens, and every parameter's gradient of a fixed random projection of them."""
    model.zero_grad(set_to_none=True)
    logits = model(**batch).logits
    real_logits = logits[real]
    (real_logits.double() * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return real_logits.detach(), grads


def compare(config, layout, lengths, dtype, grad_mult=2.0):
    batch, real = make_batch(layout, lengths)
    ref = build(config, "oracle", torch.float64)
    pt = build(config, "eager", dtype)
    ours = build(config, "flashdoc", dtype)
    weights = torch.randn(int(real.sum()), VOCAB, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    weights = weights.to(DEVICE)
    out_ref, g_ref = run(ref, batch, real, weights)
    out_pt, g_pt = run(pt, batch, real, weights)
    out, g = run(ours, batch, real, weights)
    assert_close_like_flash_attn("logits", out, out_ref, out_pt, dtype)
    assert g.keys() == g_ref.keys()
    for name in g_ref:
        assert_close_like_flash_attn(name, g[name], g_ref[name], g_pt[name], dtype, mult=grad_mult)


# Lengths that leave padding in every padded layout, exceed the CPU configs' window (6) and are not multiples
# of the kernels' tiles.
CPU_LENGTHS = (13, 7, 10)


KINDS = ("llama", "mistral", "gemma2", "qwen2", "gpt_oss")
LAYOUTS = ("left", "right", "packed", "plain")
# gpt-oss builds its eager mask without position_ids, so its eager attention runs a packed row as one sequence
# (its flash-attention path, like flashdoc, splits the row where the positions restart): its packed batch is
# checked against the sequences run one at a time instead (test_gpt_oss_packed_rows_match_each_sequence_alone).
EAGER_CASES = [(kind, layout) for kind in KINDS for layout in LAYOUTS if (kind, layout) != ("gpt_oss", "packed")]


@pytest.mark.parametrize("kind, layout", EAGER_CASES)
def test_logits_and_grads_match_eager(kind, layout):
    compare(tiny_config(kind), layout, CPU_LENGTHS, torch.float32)


def alone_and_packed(config, lengths, dtype):
    """Logits of each sequence run alone under eager (float64 oracle and ``dtype``), and of all of them packed
    into one row under flashdoc, in the same token order."""
    batch, _ = make_batch("packed", lengths)
    ids = batch["input_ids"][0].split(list(lengths))
    alone = []
    for attn, run_dtype in EAGER64_EAGER_OURS(dtype)[:2]:
        model = build(config, attn, run_dtype)
        with torch.no_grad():
            alone.append(torch.cat([model(input_ids=row[None]).logits[0] for row in ids]))
    with torch.no_grad():
        packed = build(config, "flashdoc", dtype)(**batch).logits[0]
    return packed, *alone


def test_gpt_oss_packed_rows_match_each_sequence_alone():
    ours, ref, pt = alone_and_packed(tiny_config("gpt_oss"), CPU_LENGTHS, torch.float32)
    assert_close_like_flash_attn("logits", ours, ref, pt, torch.float32)


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gpt_oss"])
def test_window_softcap_and_sinks_change_the_logits(kind):
    """The comparisons above could pass with the window, softcap or sinks ignored if none changed anything:
    check that each one moves eager's logits far beyond the tolerance."""
    config = tiny_config(kind)
    batch, real = make_batch("right", CPU_LENGTHS)
    without = copy.deepcopy(config)
    without.sliding_window = 1000  # wider than every sequence: no window
    variants = [(without, None)]
    if kind == "gemma2":
        no_cap = copy.deepcopy(config)
        no_cap.attn_logit_softcapping = None
        variants.append((no_cap, None))
    if kind == "gpt_oss":  # the same model with its sinks at -inf, where they take no weight
        variants.append(
            (config, lambda model: [layer.self_attn.sinks.data.fill_(-torch.inf) for layer in model.model.layers])
        )
    with torch.no_grad():
        base = build(config, "oracle", torch.float64)(**batch).logits[real]
        for other, change in variants:
            model = build(other, "oracle", torch.float64)
            if change is not None:
                change(model)
            moved = (model(**batch).logits[real] - base).abs().max().item()
            assert moved > 1e-3, f"{kind}: the feature moved the logits by only {moved:.2e}"


def uses_attention_functions(module) -> bool:
    """Whether a transformers modeling module calls the registered attention functions (older releases' BERT and
    T5 have their own eager and SDPA classes only, and run neither flashdoc nor the oracle)."""
    import inspect

    return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(module)


def test_bidirectional_encoder_matches_eager():
    """BERT: is_causal False on every layer, right padding."""
    from transformers.models.bert import modeling_bert

    if not uses_attention_functions(modeling_bert):
        pytest.skip("this transformers' BERT computes its attention itself, whatever the attention implementation")
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        initializer_range=0.1,
        attention_probs_dropout_prob=0.0,
        hidden_dropout_prob=0.0,
    )
    register_all()
    batch, real = make_batch("right", CPU_LENGTHS)
    outs = {}
    for attn, dtype in EAGER64_EAGER_OURS(torch.float32):
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(copy.deepcopy(config), attn_implementation=attn)
        model = model.to(device=DEVICE, dtype=dtype).eval()
        with torch.no_grad():
            outs[attn, dtype] = model(**batch).last_hidden_state[real]
    ref, pt, ours = (outs[key] for key in EAGER64_EAGER_OURS(torch.float32))
    assert_close_like_flash_attn("hidden", ours, ref, pt, torch.float32)


def decode(model, batch, steps=4):
    """Prefill a padded batch into the cache, then feed ``steps`` fixed tokens one at a time: the logits of
    every step (queries shorter than keys: the bottom-right causal alignment, and the mask's tail)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    new = torch.randint(0, VOCAB, (ids.shape[0], steps), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        logits = [out.logits[:, -1]]
        for t in range(steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(input_ids=new[:, t : t + 1], attention_mask=mask, past_key_values=out.past_key_values)
            logits.append(out.logits[:, -1])
    return torch.stack(logits)


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gpt_oss"])
def test_decoding_with_a_cache_matches_eager(kind):
    """Left-padded prompts longer than the window, then decoding through the cache."""
    config = tiny_config(kind)
    batch, _ = make_batch("left", (11, 5))
    ref, pt, ours = (decode(build(config, a, d), batch) for a, d in EAGER64_EAGER_OURS(torch.float32))
    assert_close_like_flash_attn("decode logits", ours, ref, pt, torch.float32)


def test_left_padded_decode_steps_attend_over_the_cache_in_place(monkeypatch):
    """A left-padded batch's decode steps go to flash_attn_with_kvcache with each row's padding as cache_leftpad
    (no gather of the cache); its prompt, whose padded rows are queries too, keeps the varlen path. The logits
    meet the rule against eager. (A sliding-window model's cache drops the padding as it slides, and its steps
    then need no mask: test_decoding_with_a_cache_matches_eager covers those.)"""
    calls = []
    kvcache = flashdoc_hf.flashdoc.flash_attn_with_kvcache

    def counted(q, k_cache, v_cache, **kwargs):
        calls.append(kwargs["cache_leftpad"].tolist())
        return kvcache(q, k_cache, v_cache, **kwargs)

    monkeypatch.setattr(flashdoc_hf.flashdoc, "flash_attn_with_kvcache", counted)
    config = tiny_config("llama")
    batch, _ = make_batch("left", (11, 5))
    ref, pt, ours = (decode(build(config, a, d), batch) for a, d in EAGER64_EAGER_OURS(torch.float32))
    assert_close_like_flash_attn("decode logits", ours, ref, pt, torch.float32)
    assert calls == [[0, 6]] * 4 * config.num_hidden_layers  # the steps, not the prompt


def test_which_padded_calls_decode_in_place():
    """The rule that sends a padded call to the cache in place (``_decode_step_left_padding``): a few real queries
    over a mask that is left padding alone, with no dropout and no gradient; everything else keeps the varlen
    path. Shapes are flash-attn's (batch, seqlen, heads, head_dim): 8 query heads over 2 KV heads."""
    options = dict(dropout_p=0.0)

    def rule(mask, seqlen_q=1, seqlen_k=None, heads=8, head_dim=16, grad=False, **changed):
        mask = torch.tensor(mask, dtype=torch.bool)
        q = torch.zeros(mask.shape[0], seqlen_q, heads, head_dim, requires_grad=grad)
        k = torch.zeros(mask.shape[0], seqlen_k or mask.shape[1], 2, head_dim)
        pad = flashdoc_hf._decode_step_left_padding(q, k, mask, {**options, **changed})
        return None if pad is None else (pad.dtype, pad.tolist())

    left = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert rule(left) == (torch.int32, [2, 0])
    assert rule(left, seqlen_q=3) == (torch.int32, [2, 0])  # a few queries, all real
    assert rule(left, seqlen_k=8) == (torch.int32, [2, 0])  # a static cache longer than what was written
    assert rule(left, seqlen_q=4) is None  # a query on padding
    assert rule([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]) is None  # right padding
    assert rule([[1, 0, 1, 1, 1], [1, 1, 1, 1, 1]]) is None  # a hole
    assert rule(left, seqlen_k=4) is None  # a mask over more keys than there are: _unpad says so
    assert rule(left, dropout_p=0.1) is None
    assert rule(left, grad=True) is None
    assert rule(left, seqlen_q=17) is None  # 17 positions x 4 heads a group: more rows than a decode tile
    assert rule(left, head_dim=12) is None  # the decode kernel takes multiples of 8
    assert (
        flashdoc_hf._decode_step_left_padding(torch.zeros(2, 1, 8, 16), torch.zeros(2, 5, 2, 16), None, options) is None
    )


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_decode_steps_run_on_the_split_kv_kernel(kind, monkeypatch):
    """Unpadded prompts, then one token a step: the layers pass flash_attn_func a few queries against the whole
    cache, which it sends to the decode kernel (as flash-attn 2's forward splits the keys there), and the logits
    still meet the rule against eager."""
    import flashdoc.interface

    routed = []
    decode_attention = flashdoc.interface.decode_attention

    def counted(q, *args, **kwargs):
        routed.append(q.shape[1])
        return decode_attention(q, *args, **kwargs)

    monkeypatch.setattr(flashdoc.interface, "decode_attention", counted)
    config = tiny_config(kind)
    batch, _ = make_batch("left", (9, 9))  # a mask of ones: no padding, so no mask reaches the layers
    ref, pt, ours = (decode(build(config, a, d), batch) for a, d in EAGER64_EAGER_OURS(torch.float32))
    assert_close_like_flash_attn("decode logits", ours, ref, pt, torch.float32)
    layers = config.num_hidden_layers
    assert sorted(routed) == [1] * 4 * layers + [9] * layers  # the prompt's 2 x 9 query rows fit one tile too


def EAGER64_EAGER_OURS(dtype):
    return [("oracle", torch.float64), ("eager", dtype), ("flashdoc", dtype)]


def test_dropout_in_training_only():
    """The layer passes its attention dropout in training and 0 in evaluation; a seed reproduces a run."""
    config = tiny_config("llama")
    config.attention_dropout = 0.3
    batch, real = make_batch("left", CPU_LENGTHS)
    model = build(config, "flashdoc", torch.float32)
    eager = build(config, "eager", torch.float32)
    with torch.no_grad():
        evaluated = model(**batch).logits[real]
        torch.testing.assert_close(evaluated, eager(**batch).logits[real], rtol=1e-4, atol=1e-4)
        model.train()
        torch.manual_seed(5)
        first = model(**batch).logits[real]
        torch.manual_seed(5)
        again = model(**batch).logits[real]
        torch.manual_seed(6)
        other = model(**batch).logits[real]
    assert torch.equal(first, again)
    assert (first - evaluated).abs().max() > 1e-3
    assert (first - other).abs().max() > 1e-3


def test_training_loss_follows_sdpa():
    """Six AdamW steps on a padded batch. The tolerance is flash-attn's rule applied to the loss curve: flashdoc's
    distance from SDPA in float64 is at most twice SDPA-in-float32's own, plus float32 rounding of the loss."""
    config = tiny_config("llama")
    batch, real = make_batch("right", CPU_LENGTHS)
    labels = batch["input_ids"].masked_fill(~real, -100)

    def losses(attn, dtype):
        model = build(config, attn, dtype).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        curve = []
        for _ in range(6):
            loss = model(**batch, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        return torch.tensor(curve, dtype=torch.float64)

    ref, pt, ours = losses("sdpa", torch.float64), losses("sdpa", torch.float32), losses("flashdoc", torch.float32)
    print("sdpa fp64", ref.tolist(), "\nsdpa fp32", pt.tolist(), "\nflashdoc ", ours.tolist())
    assert ref[-1] < ref[0] - 0.05, "the loop should learn something, or the curves say little"
    assert_close_like_flash_attn("loss curve", ours, ref, pt, torch.float32)


def test_register_names_the_transformers_it_found_when_the_interfaces_are_missing(monkeypatch):
    """An old transformers (or one whose import fails) gets an ImportError that names its version and the cause,
    not only the version floor."""
    import sys
    import types

    old = types.ModuleType("transformers")
    old.__version__ = "4.52.4"
    monkeypatch.setitem(sys.modules, "transformers", old)
    with pytest.raises(ImportError, match=r"needs transformers >= 4.53 .*transformers \(4\.52\.4\) gave: cannot"):
        flashdoc_hf.register("flashdoc-old")


def test_register_and_from_pretrained(tmp_path):
    """A model saved to disk loads with attn_implementation="flashdoc"; a name without "flash" works too."""
    config = tiny_config("qwen2")
    build(config, "eager", torch.float32).save_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="flashdoc")
    assert model.config._attn_implementation == "flashdoc"
    assert flashdoc_hf.register("fdoc") == "fdoc"
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="fdoc")
    assert model.config._attn_implementation == "fdoc"
    for bad in ("", "paged|flashdoc", "org/kernel", 3):
        with pytest.raises(ValueError, match="name must be"):
            flashdoc_hf.register(bad)


def test_other_flash_names_are_left_to_transformers():
    """The answer to transformers' flash-attn import covers the registered names only."""
    fa_utils = pytest.importorskip("transformers.modeling_flash_attention_utils")
    flashdoc_hf.register()
    if not hasattr(fa_utils, "_lazy_imports"):
        pytest.skip("this transformers imports no flash-attn by name at model build")
    assert fa_utils._lazy_imports("flashdoc")[0] is flashdoc_hf.flashdoc.flash_attn_func
    with pytest.raises(Exception) as info:
        fa_utils._lazy_imports("flash_attention_9")
    assert "flashdoc" not in str(info.value)


def test_what_flashdoc_cannot_compute_fails_clearly():
    config = tiny_config("llama")
    model = build(config, "flashdoc", torch.float32)
    batch, _ = make_batch("right", (6, 4))
    with pytest.raises(ValueError, match="output_attentions"):
        model(**batch, output_attentions=True)
    mask4d = torch.zeros(2, 1, 6, 6, device=DEVICE)
    with pytest.raises(ValueError, match="4-D mask|shape"):
        model(input_ids=batch["input_ids"], attention_mask=mask4d)

    # A mask function on top of causal (Gemma 3 does this for image tokens) is refused when the mask is built,
    # whether it widens what a query sees (or_masks) or narrows it (and_masks); the parts flashdoc applies
    # itself (windows, packing) pass.
    def first_key(b, h, q, kv):
        return kv == 0

    causal = masking_utils.causal_mask_function
    for extra, match in (
        (masking_utils.or_masks(causal, first_key), r"a union with another mask function \(or_masks\)"),
        (masking_utils.and_masks(causal, first_key), "the mask function .*first_key"),
    ):
        with pytest.raises(ValueError, match=match):
            flashdoc_hf.mask_function(1, 4, 4, mask_function=extra, attention_mask=None)
    applied = masking_utils.and_masks(
        masking_utils.sliding_window_causal_mask_function(3),
        masking_utils.packed_sequence_mask_function(torch.zeros(1, 4, dtype=torch.long)),
    )
    assert flashdoc_hf.mask_function(1, 4, 4, mask_function=applied, attention_mask=None) is None
    # A sliding window over a padding mask with a hole would move the window's edge after unpadding.
    q = torch.randn(1, 4, 6, 16, device=DEVICE)
    holes = torch.tensor([[1, 1, 0, 1, 1, 1]], device=DEVICE, dtype=torch.bool)
    layer = model.model.layers[0].self_attn
    with pytest.raises(ValueError, match="holes"):
        flashdoc_hf.attention_forward(layer, q, q[:, :2], q[:, :2], holes, sliding_window=3)
    with pytest.raises(ValueError, match="float attention mask"):
        flashdoc_hf.attention_forward(layer, q, q[:, :2], q[:, :2], holes.float())
    # Keyword arguments that ask for attention the kernels do not compute, and sinks of the wrong shape.
    kv = q[:, :2]
    for name in ("position_bias", "indices", "block_indices", "sinks"):
        with pytest.raises(ValueError, match=f"cannot compute .*\\({name}"):
            flashdoc_hf.attention_forward(layer, q, kv, kv, None, **{name: torch.zeros(1, device=DEVICE)})
    for name, match in (("head_mask", "cannot compute a head_mask"), ("block_table", r"paged attention \(block_table")):
        with pytest.raises(ValueError, match=match):
            flashdoc_hf.attention_forward(layer, q, kv, kv, None, **{name: torch.zeros(1, device=DEVICE)})
    for sinks, error, match in (
        (torch.zeros(2, device=DEVICE), ValueError, r"s_aux .* shape \(4,\), got \(2,\)"),
        (torch.zeros(1, 4, 6, 1, device=DEVICE), ValueError, "per-token sinks are not supported"),
        (torch.zeros(4, dtype=torch.int64, device=DEVICE), TypeError, "s_aux .* floating-point"),
        ([0.0] * 4, TypeError, "s_aux .* got list"),
    ):
        with pytest.raises(error, match=match):
            flashdoc_hf.attention_forward(layer, q, kv, kv, None, s_aux=sinks)


def test_chunked_attention_is_refused_past_its_first_chunk():
    """Llama 4's chunked layers attend within chunks of keys. transformers refuses flash-named implementations
    once the keys outgrow a chunk; under another name the mask function itself refuses then, and before then
    (every key in the first chunk, where chunked attention is causal attention) the logits match eager."""
    if not hasattr(transformers, "Llama4TextConfig"):
        pytest.skip("this transformers has no Llama 4")
    register_all()
    flashdoc_hf.register("fdoc")
    config = transformers.Llama4TextConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=64,
        intermediate_size_mlp=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        attention_chunk_size=8,
        num_local_experts=2,
        num_experts_per_tok=1,
        initializer_range=0.1,
    )
    ids = torch.randint(0, VOCAB, (1, 13), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="fdoc")
    model = model.to(DEVICE).eval()
    assert model.config.layer_types[0] == "chunked_attention"
    with pytest.raises(ValueError, match="chunked attention \\(chunks of 8 keys\\) over 13 keys"):
        model(input_ids=ids)
    torch.manual_seed(0)
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager")
    eager = eager.to(DEVICE).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids[:, :8]).logits, eager(input_ids=ids[:, :8]).logits)


def test_value_heads_wider_than_query_heads_and_head_dim_limits():
    """Values wider than queries and keys (the other way round from MLA) run with zero columns added to q and k,
    which leave every score as it was, at the scale of q's own width; a head dimension past the kernels' 256 is
    refused by name."""
    layer = build(tiny_config("llama"), "flashdoc", torch.float32).model.layers[0].self_attn
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randn(2, 4, 7, 16, generator=gen).to(DEVICE) for _ in range(2))
    v = torch.randn(2, 4, 7, 24, generator=gen).to(DEVICE)
    out, _ = flashdoc_hf.attention_forward(layer, q, k, v, None, is_causal=True)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    assert out.shape == (2, 7, 4, 24)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    wide = torch.zeros(1, 2, 3, 320, device=DEVICE)
    with pytest.raises(ValueError, match="cannot compute a head dimension of 320"):
        flashdoc_hf.attention_forward(layer, wide, wide, wide, None)


def test_a_window_kept_on_the_layer_is_applied():
    """Qwen2-MoE's sliding layers keep their window on the module (``self.sliding_window``) and call the attention
    function without it; eager applies it through the mask, so flashdoc takes it from the module."""
    from transformers.models.qwen2_moe import modeling_qwen2_moe

    if not uses_attention_functions(modeling_qwen2_moe):
        pytest.skip("this transformers' Qwen2-MoE picks its attention classes itself")
    compare(tiny_config("qwen2_moe"), "right", CPU_LENGTHS, torch.float32)


def test_models_outside_the_attention_interface_are_refused_when_built():
    """BLOOM computes attention in its own code and adds the mask it is given as a 4-D bias: with flashdoc's mask
    (None, or 2-D padding) it would drop the causal mask. Models that declare neither flash-attn nor
    attention-function support are refused when they are built, as transformers refuses flash_attention_2 (where
    transformers has the hook for it)."""
    register_all()
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=2)
    if flashdoc_hf._declares_flash_attn(transformers.BloomForCausalLM) or getattr(
        transformers.BloomForCausalLM, "_supports_attention_backend", True
    ):
        pytest.skip("this transformers' BLOOM runs registered attention functions")
    if hasattr(transformers.PreTrainedModel, "_check_and_adjust_attn_implementation"):
        with pytest.raises(ValueError, match="BloomForCausalLM supports neither flash-attn nor registered attention"):
            transformers.AutoModelForCausalLM.from_config(config, attn_implementation="flashdoc")
        return
    # older releases (4.53) have no hook to refuse it in, and build BLOOM on its own attention whatever the name:
    # then it must compute exactly what eager attention does
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="flashdoc").eval()
    eager = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=mask).logits, eager(ids, attention_mask=mask).logits)


def test_t5_is_refused():
    """T5 adds a relative position bias to its scores, which it passes to the attention function as a keyword
    argument. Its class declares no support for registered attention functions, so it is refused when built; were
    it built, its first call would be refused by the bias's name (older releases compute T5's attention in their
    own classes, and run neither flashdoc nor anything else registered)."""
    from transformers.models.t5 import modeling_t5

    if not uses_attention_functions(modeling_t5):
        pytest.skip("this transformers' T5 computes its attention itself, whatever the attention implementation")
    register_all()
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4
    )
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    refused = "T5ForConditionalGeneration supports neither flash-attn|position_bias, T5's relative attention bias"
    with pytest.raises(ValueError, match=refused):
        model = transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="flashdoc")
        model.to(DEVICE).eval()(input_ids=ids, decoder_input_ids=ids[:, :5])


def test_models_that_list_their_flash_kernels_keep_flashdoc():
    """gpt-oss lists the flash kernels that compute its sinks; transformers would build it with the first of
    them (a Hub kernel) for any other flash-named implementation. Registered names stay, on this model instance
    only: the class's list is unchanged."""
    config = tiny_config("gpt_oss")
    model = build(config, "flashdoc", torch.float32)
    assert model.config._attn_implementation == "flashdoc"
    listed = getattr(type(model), "_compatible_flash_implementations", None)  # a list from transformers 5
    if listed is not None:
        assert "flashdoc" not in listed and "_compatible_flash_implementations" not in vars(model)
    model.set_attn_implementation("eager")
    model.set_attn_implementation("flashdoc")
    assert model.config._attn_implementation == "flashdoc"


def test_packed_sequences_are_found_once_per_position_ids(monkeypatch):
    """Finding packed sequences reads the GPU, so it runs once for the position_ids that every layer of a forward
    shares; a new tensor, or the same one changed in place, is scanned again."""
    scans = []
    find = flashdoc_hf._find_packed
    monkeypatch.setattr(flashdoc_hf, "_find_packed", lambda pos, batch: scans.append(1) or find(pos, batch))
    monkeypatch.setattr(flashdoc_hf, "_answers", {})
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2]], device=DEVICE)
    answers = [flashdoc_hf._packed(dict(position_ids=positions), 1, 8, 8) for _ in range(4)]
    assert len(scans) == 1 and all(a is answers[0] for a in answers)
    assert answers[0][0].tolist() == [0, 3, 5, 8] and answers[0][2] == 3
    positions[0, 5:] = torch.arange(2, 5)  # one sequence of 3 and one of 5 now
    assert flashdoc_hf._packed(dict(position_ids=positions), 1, 8, 8)[0].tolist() == [0, 3, 8]
    assert flashdoc_hf._packed(dict(position_ids=torch.arange(8, device=DEVICE)[None]), 1, 8, 8) is None
    assert len(scans) == 3
    with torch.inference_mode():  # inference tensors have no version counter: scanned every time, never kept
        positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2]], device=DEVICE)
        for _ in range(2):
            assert flashdoc_hf._packed(dict(position_ids=positions), 1, 8, 8)[0].tolist() == [0, 3, 5, 8]
    assert len(scans) == 5


def test_padding_is_found_once_per_attention_mask(monkeypatch):
    """Unpadding reads the GPU (token counts, the longest sequence), so it runs once for the mask that every layer
    of a forward shares, and the rows it gathers are the mask's real tokens; a changed mask is read again."""
    scans = []
    find = flashdoc_hf._find_unpadding
    monkeypatch.setattr(flashdoc_hf, "_find_unpadding", lambda m, n: scans.append(1) or find(m, n))
    monkeypatch.setattr(flashdoc_hf, "_answers", {})
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]], device=DEVICE)
    q = torch.arange(2 * 4, dtype=torch.float32, device=DEVICE).reshape(2, 4, 1, 1)
    for _ in range(3):
        q_packed, _, _, index_q, cu_q, cu_k, max_q, max_k = flashdoc_hf._unpad(q, q, q, mask)
    assert len(scans) == 1
    assert q_packed.flatten().tolist() == [0, 1, 2, 5, 6, 7] and index_q.tolist() == [0, 1, 2, 5, 6, 7]
    assert cu_q.tolist() == cu_k.tolist() == [0, 3, 6] and max_q == max_k == 3
    mask[0, 3] = 1
    assert flashdoc_hf._unpad(q, q, q, mask)[4].tolist() == [0, 4, 7]
    assert len(scans) == 2


# --- GPU: bfloat16, four layers, 8 query heads over 2 key/value heads, sequences up to 500 tokens ------------

GPU_LENGTHS = (500, 123, 317, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("kind, layout", EAGER_CASES)
def test_gpu_logits_and_grads_match_eager(kind, layout):
    compare(tiny_config(kind, "gpu"), layout, GPU_LENGTHS, torch.bfloat16, grad_mult=3.0)


@pytest.mark.gpu
def test_gpu_gpt_oss_packed_rows_match_each_sequence_alone():
    ours, ref, pt = alone_and_packed(tiny_config("gpt_oss", "gpu"), GPU_LENGTHS, torch.bfloat16)
    assert_close_like_flash_attn("logits", ours, ref, pt, torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["gemma2", "gpt_oss"])
def test_gpu_decoding_with_a_cache_matches_eager(kind):
    config = tiny_config(kind, "gpu")
    batch, _ = make_batch("left", (200, 77, 150))
    ref, pt, ours = (decode(build(config, a, d), batch, steps=8) for a, d in EAGER64_EAGER_OURS(torch.bfloat16))
    assert_close_like_flash_attn("decode logits", ours, ref, pt, torch.bfloat16)
