"""flash_attn_with_kvcache: decode attention over contiguous and paged caches, the in-place append, rotary,
split-KV, and bad input.

The oracle rebuilds each sequence's keys from the cache in plain PyTorch (float64), appends the new keys and
values (rotated), and computes masked attention; flash-attn's criterion compares flashdoc's error with that of
the same math in the inputs' dtype. The unmarked tests are a small CPU subset (Triton's interpreter); the
``gpu`` tests sweep shapes, page sizes, split counts and capture a decode step in a CUDA graph.
"""

import pytest
import torch
import triton
from attention_oracle import DEVICE, assert_close_like_flash_attn

import flashdoc
from flashdoc import flash_attn_with_kvcache
from flashdoc.kernels import decode
from flashdoc.kernels.decode import last_wave_splits, num_splits_heuristic

# ---------------------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------------------


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (B, S, H, D) at integer positions (B, S), in x's dtype; dims past rotary_dim kept."""
    rd = 2 * cos.shape[1]
    c, s = cos[positions].to(x), sin[positions].to(x)  # (B, S, rd / 2), on x's device
    x1 = x[..., :rd]
    if interleaved:
        c, s = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
        partner = torch.stack((-x1[..., 1::2], x1[..., 0::2]), -1).flatten(-2)
    else:
        c, s = torch.cat((c, c), -1), torch.cat((s, s), -1)
        partner = torch.cat((-x1[..., rd // 2 :], x1[..., : rd // 2]), -1)
    return torch.cat((x1 * c[:, :, None] + partner * s[:, :, None], x[..., rd:]), -1)


def cache_rows(b, n, cache_batch_idx, block_table, page_size):
    """(page, row) of positions 0..n-1 of sequence b in the cache tensor."""
    pos = torch.arange(n)
    if block_table is None:
        page = int(cache_batch_idx[b]) if cache_batch_idx is not None else b
        return torch.full_like(pos, page), pos
    return block_table[b].cpu().long()[pos // page_size], pos % page_size


def reference(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    block_table=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    cache_leftpad=None,
    dtype=torch.float64,
):
    """(out, lse, k_cache after, v_cache after), attention computed in ``dtype`` (float64: the oracle).

    cache_leftpad: sequence b's keys are its cache positions from cache_leftpad[b] on, counted from there by the
    masks and ALiBi; the append and the rotary embedding keep their positions in the cache (flash-attn's test
    builds its reference the same way)."""
    batch, seqlen_q, n_heads, head_dim = q.shape
    n_kv = k_cache.shape[2]
    page_size = k_cache.shape[1]
    seqlen_new = 0 if k is None else k.shape[1]
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens)
    lens = cache_seqlens.cpu().long()
    kc, vc = k_cache.clone(), v_cache.clone()
    qd = q.double()
    if rotary_cos is not None:
        pos_k = lens[:, None] + torch.arange(seqlen_new)[None, :]
        k = rotate(k.double(), rotary_cos.cpu().double(), rotary_sin.cpu().double(), pos_k, rotary_interleaved)
        per_row = causal or window_size != (-1, -1)
        pos_q = lens[:, None] + (torch.arange(seqlen_q)[None, :] if per_row else torch.zeros(1, seqlen_q).long())
        qd = rotate(qd, rotary_cos.cpu().double(), rotary_sin.cpu().double(), pos_q, rotary_interleaved)
    for b in range(batch):
        if seqlen_new:
            page, row = cache_rows(b, int(lens[b]) + seqlen_new, cache_batch_idx, block_table, page_size)
            page, row = page[int(lens[b]) :], row[int(lens[b]) :]
            kc[page, row] = k[b].to(kc.dtype)
            vc[page, row] = v[b].to(vc.dtype)
    q_in = qd.to(dtype) if dtype == torch.float64 else qd.to(q.dtype)
    outs, lses = [], []
    scale = head_dim**-0.5
    pads = [0] * batch if cache_leftpad is None else cache_leftpad.cpu().tolist()
    for b in range(batch):
        page, row = cache_rows(b, int(lens[b]) + seqlen_new, cache_batch_idx, block_table, page_size)
        page, row = page[pads[b] :], row[pads[b] :]
        n = len(row)
        keys = kc[page, row].to(dtype).repeat_interleave(n_heads // n_kv, 1)  # (n, H, D)
        vals = vc[page, row].to(dtype).repeat_interleave(n_heads // n_kv, 1)
        s = torch.einsum("qhd,khd->hqk", q_in[b].to(dtype), keys) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(seqlen_q)[:, None] + n - seqlen_q
        j = torch.arange(n)[None, :]
        if alibi_slopes is not None:  # -slope * |position - key|, after the softcap (flash-attn's order)
            slopes = alibi_slopes.cpu().double().expand(batch, n_heads)[b]
            s = s - (slopes[:, None, None] * (pos - j).abs()[None]).to(s.device, s.dtype)
        keep = torch.ones(seqlen_q, n, dtype=torch.bool)
        left, right = window_size
        if causal:
            right = 0
        if left >= 0:
            keep &= j >= pos - left
        if right >= 0:
            keep &= j <= pos + right
        keep = keep.to(s.device)
        s = s.masked_fill(~keep, float("-inf"))
        has_key = keep.any(1)[None, :, None]
        lse = torch.logsumexp(s.float(), -1)
        p = torch.softmax(s.masked_fill(~has_key, 0.0), -1) * has_key
        outs.append(torch.einsum("hqk,khd->qhd", p, vals))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses), kc, vc


def check(
    dtype=torch.float16,
    batch=2,
    seqlen_q=1,
    n_heads=4,
    n_kv=2,
    head_dim=32,
    cache_len=96,
    lens=(37, 80),
    seqlen_new=0,
    page_size=None,
    rotary_dim=None,
    interleaved=True,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi=None,
    num_splits=0,
    batch_idx=False,
    seqlens_as_int=False,
    leftpad=None,
    poison=False,
    seed=0,
):
    """Build a cache (paged when page_size is given: pages shuffled), call flash_attn_with_kvcache, and compare
    out, lse and the caches after the call with the oracle. poison: NaN in every cache row past each sequence's
    keys after the append (as in a cache allocated with torch.empty), which must not reach the output."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(DEVICE, dtype)

    q = randn(batch, seqlen_q, n_heads, head_dim)
    block_table = cache_batch_idx = None
    if page_size is None:
        slots = batch + 1 if batch_idx else batch
        k_cache, v_cache = randn(slots, cache_len, n_kv, head_dim), randn(slots, cache_len, n_kv, head_dim)
        if batch_idx:
            cache_batch_idx = torch.randperm(slots, generator=g)[:batch].to(DEVICE, torch.int32)
    else:
        pages_per_seq = -(-cache_len // page_size)
        n_pages = batch * pages_per_seq + 1
        k_cache, v_cache = randn(n_pages, page_size, n_kv, head_dim), randn(n_pages, page_size, n_kv, head_dim)
        block_table = torch.randperm(n_pages, generator=g)[: batch * pages_per_seq].reshape(batch, pages_per_seq)
        block_table = block_table.to(DEVICE, torch.int32)
    k = v = cos = sin = None
    if seqlen_new:
        k, v = randn(batch, seqlen_new, n_kv, head_dim), randn(batch, seqlen_new, n_kv, head_dim)
    if rotary_dim:
        capacity = cache_len if page_size is None else block_table.shape[1] * page_size
        angle = torch.rand(capacity, rotary_dim // 2, generator=g, dtype=torch.float64) * 6.3
        cos, sin = angle.cos().to(DEVICE, dtype), angle.sin().to(DEVICE, dtype)
    if poison:
        for b in range(batch):
            n = (lens[0] if seqlens_as_int else lens[b]) + seqlen_new
            rows = cache_len if page_size is None else block_table.shape[1] * page_size
            page, row = cache_rows(b, rows, cache_batch_idx, block_table, page_size)
            k_cache[page[n:], row[n:]] = float("nan")
            v_cache[page[n:], row[n:]] = float("nan")
    if seqlens_as_int:
        cache_seqlens = lens[0]
    else:
        cache_seqlens = torch.tensor(lens[:batch], dtype=torch.int32, device=DEVICE)
    slopes = None
    if alibi == "heads":
        slopes = torch.rand(n_heads, generator=g).to(DEVICE) * 0.5
    elif alibi == "batch_heads":
        slopes = torch.rand(batch, n_heads, generator=g).to(DEVICE) * 0.5
    kw = dict(
        cache_seqlens=cache_seqlens,
        cache_leftpad=None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32, device=DEVICE),
        cache_batch_idx=cache_batch_idx,
        block_table=block_table,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        rotary_interleaved=interleaved,
        alibi_slopes=slopes,
    )
    ref = reference(q, k_cache, v_cache, k, v, cos, sin, dtype=torch.float64, **kw)
    pt = reference(q, k_cache, v_cache, k, v, cos, sin, dtype=dtype, **kw)
    out, lse = flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cos, sin, num_splits=num_splits, return_softmax_lse=True, **kw
    )
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (batch, n_heads, seqlen_q) and lse.dtype == torch.float32
    assert_close_like_flash_attn("out", out, ref[0], pt[0], dtype)
    assert_close_like_flash_attn("lse", lse, ref[1], pt[1], dtype)
    # the caches after the call: the new rows as the oracle wrote them (rotated in float64, rounded once:
    # the kernel rotates in float32, so a rotated value may differ by one rounding step), the rest untouched
    atol = 0 if rotary_dim is None else 2 * torch.finfo(dtype).eps * 4
    torch.testing.assert_close(k_cache, ref[2], atol=atol, rtol=torch.finfo(dtype).eps if atol else 0, equal_nan=True)
    torch.testing.assert_close(v_cache, ref[3], atol=0, rtol=0, equal_nan=True)
    return out, lse


# ---------------------------------------------------------------------------------------------------------------
# CPU subset (Triton's interpreter): tiny shapes, one case per feature
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_contiguous_cache_per_batch_lengths(dtype, heads):
    check(dtype, n_heads=heads[0], n_kv=heads[1], lens=(37, 80))


@pytest.mark.parametrize("page_size", [16, 48])
def test_paged_cache(page_size):
    """Pages shorter than a tile (16: each key row looks its page up) and longer (48: one lookup per tile)."""
    check(torch.float16, page_size=page_size, cache_len=96, lens=(5, 70), seqlen_new=2)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("page_size", [32, 128])
def test_tma_pages_ignore_rows_past_the_sequence(page_size, num_splits):
    """Pages that hold whole tiles are read as TMA boxes (``decode.tma_pages``), and a box reads its page's rows
    past the sequence too: NaN there, as in a cache allocated with torch.empty, must not reach the output, whichever
    split holds the last tile."""
    g = torch.Generator().manual_seed(0)
    batch, n_heads, n_kv, head_dim, pages_per_seq = 2, 4, 2, 32, 256 // page_size
    n_pages = batch * pages_per_seq + 1
    k_cache = torch.randn(n_pages, page_size, n_kv, head_dim, generator=g).to(DEVICE, torch.float16)
    v_cache = torch.randn(n_pages, page_size, n_kv, head_dim, generator=g).to(DEVICE, torch.float16)
    table = torch.randperm(n_pages, generator=g)[: batch * pages_per_seq].reshape(batch, pages_per_seq)
    table = table.to(DEVICE, torch.int32)
    lens = (37, 200)
    for b, n in enumerate(lens):
        for pos in range(n, pages_per_seq * page_size):
            k_cache[table[b, pos // page_size], pos % page_size] = float("nan")
            v_cache[table[b, pos // page_size], pos % page_size] = float("nan")
    q = torch.randn(batch, 1, n_heads, head_dim, generator=g).to(DEVICE, torch.float16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    tile = decode.decode_config(head_dim, torch.float16, page_size).block_n
    assert decode.tma_pages(k_cache, v_cache, page_size, tile, None) == (page_size % tile == 0)
    kw = dict(cache_seqlens=seqlens, block_table=table)
    ref = reference(q, k_cache, v_cache, None, None, None, None, dtype=torch.float64, **kw)
    pt = reference(q, k_cache, v_cache, None, None, None, None, dtype=torch.float16, **kw)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, num_splits=num_splits, **kw)
    assert_close_like_flash_attn("out", out, ref[0], pt[0], torch.float16)


def test_tma_pages_need_a_descriptor_layout():
    """Pages shorter than a tile, a left-padded cache and rows whose stride is not a multiple of 16 bytes keep the
    per-row path."""
    cache = torch.zeros(4, 64, 2, 32, dtype=torch.float16)
    assert decode.tma_pages(cache, cache, 64, 64, None)
    assert not decode.tma_pages(cache, cache, 64, 128, None)  # the tile spans two pages
    assert not decode.tma_pages(cache, cache, 64, 64, torch.zeros(2, dtype=torch.int32))
    odd = torch.zeros(4, 64, 2, 36, dtype=torch.float16)[..., :33]  # rows 72 bytes apart
    assert not decode.tma_pages(odd, odd, 64, 64, None)


def test_plain_paged_step_is_what_the_hopper_kernel_takes():
    """The Gluon kernel's calls (``decode.plain_paged_step``): one query over pages of ``HOPPER_PAGE_SIZES`` rows with
    no option beyond the causal flag and a window's right edge; any other option, shape or layout keeps
    ``_split_kv``."""
    q = torch.zeros(2, 1, 32, 128, dtype=torch.bfloat16)
    cache = torch.zeros(64, 16, 8, 128, dtype=torch.bfloat16)
    table = torch.zeros(2, 32, dtype=torch.int32)
    plain = dict(
        q=q,
        k_cache=cache,
        v_cache=cache,
        out=torch.empty_like(q),
        block_table=table,
        batch_idx=None,
        window_size=(-1, -1),
        softcap=0.0,
        slopes=None,
        pad=None,
    )
    assert decode.plain_paged_step(**plain)
    assert decode.plain_paged_step(**{**plain, "window_size": (-1, 0)})  # causal, or a right edge: every key
    half = torch.zeros(64, 16, 8, 64, dtype=torch.float16)
    assert decode.plain_paged_step(**{**plain, "q": q[..., :64].half(), "k_cache": half, "v_cache": half,
                                      "out": q[..., :64].half()})  # fmt: skip
    for page_size in (32, 64, 256):  # pages smaller than a tile, or holding whole tiles: as the table lists them
        pages = torch.zeros(8, page_size, 8, 128, dtype=torch.bfloat16)
        taken = decode.plain_paged_step(**{**plain, "k_cache": pages, "v_cache": pages})
        assert taken == (page_size in decode.HOPPER_PAGE_SIZES), page_size
    mqa = torch.zeros(64, 16, 1, 128, dtype=torch.bfloat16)
    q64 = torch.zeros(2, 1, 64, 128, dtype=torch.bfloat16)
    assert decode.plain_paged_step(**{**plain, "q": q64, "k_cache": mqa, "v_cache": mqa, "out": q64})
    q2 = torch.zeros(2, 2, 32, 128, dtype=torch.bfloat16)
    odd = torch.zeros(64, 16, 8, 136, dtype=torch.bfloat16)[..., :128]  # rows 272 bytes apart: 16 divides them
    skewed = torch.zeros(64 * 16 * 8 * 128 + 1, dtype=torch.bfloat16)[1:].view(64, 16, 8, 128)  # 2 bytes off
    q96 = torch.zeros(2, 1, 32, 96, dtype=torch.bfloat16)
    c96 = torch.zeros(64, 16, 8, 96, dtype=torch.bfloat16)
    q65 = torch.zeros(2, 1, 65, 128, dtype=torch.bfloat16)
    for change in (
        {"block_table": None},  # contiguous
        {"q": q2, "out": torch.empty_like(q2)},  # two queries
        {"window_size": (100, -1)},
        {"softcap": 30.0},
        {"slopes": torch.ones(32)},
        {"pad": torch.zeros(2, dtype=torch.int32)},
        {"batch_idx": torch.zeros(2, dtype=torch.int32)},
        {"q": q96, "out": q96, "k_cache": c96, "v_cache": c96},  # head dim 96
        {"q": q65, "out": q65, "k_cache": mqa, "v_cache": mqa},  # 65 query heads a KV head
        {"out": torch.empty(q.shape, dtype=torch.float32)},
        {"v_cache": skewed},
    ):
        assert not decode.plain_paged_step(**{**plain, **change}), list(change)
    assert decode.plain_paged_step(**{**plain, "k_cache": odd, "v_cache": odd})


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_append_writes_the_cache_in_place(paged):
    """New k and v land at cache_seqlens[b] of each sequence (checked in ``check``), straddling a page boundary."""
    check(torch.float16, seqlen_q=3, seqlen_new=3, lens=(14, 40), causal=True, page_size=16 if paged else None)


@pytest.mark.parametrize("seqlen_q", [1, 5])
def test_causal_bottom_right(seqlen_q):
    check(torch.float16, seqlen_q=seqlen_q, seqlen_new=seqlen_q, causal=True, lens=(0, 50))


@pytest.mark.parametrize("window_size", [(-1, -1), (11, 0)])
def test_causal_prompt_over_several_query_tiles(window_size):
    """A prompt in one call: 4 query heads per KV head x 40 positions are 160 packed rows, three tiles. Each tile
    takes the keys its own positions see; a tile given the first tile's causal bound would miss most of them."""
    check(
        torch.float32,
        seqlen_q=40,
        seqlen_new=40,
        n_heads=8,
        n_kv=2,
        lens=(0, 20),
        causal=True,
        window_size=window_size,
    )


def test_more_queries_than_keys_see_nothing():
    """Bottom-right alignment: with 6 queries and 4 keys the first two queries see no key (zeros, lse -inf)."""
    out, lse = check(torch.float16, batch=1, seqlen_q=6, lens=(4,), causal=True)
    assert (out[0, :2] == 0).all() and (lse[0, :, :2] == float("-inf")).all()


@pytest.mark.parametrize("interleaved", [True, False], ids=["gptj", "neox"])
@pytest.mark.parametrize("causal", [False, True])
def test_rotary(interleaved, causal):
    """Rotary on q and the new k, over part of head_dim (16 of 32): causal queries rotate at their own
    positions, the others all at cache_seqlens."""
    check(torch.float16, seqlen_q=2, seqlen_new=2, rotary_dim=16, interleaved=interleaved, causal=causal)


@pytest.mark.parametrize("interleaved", [True, False], ids=["gptj", "neox"])
def test_rotary_tables_are_not_read_past_their_end(interleaved):
    """A cache_seqlens value past the cache is not checked on a GPU (that would wait for the device), so the
    append kernel, called here below the checks, must not read the rotary tables past their rows. The tables are
    the first rows of NaN-filled buffers: positions inside them rotate as the oracle does, a position past the
    end is left unrotated (flash-attn's rule) without reading a NaN, and the cache is written only inside."""
    from flashdoc.kernels.decode import append_kv

    capacity, rotary_dim, seqlen = 8, 16, 3
    f16 = dict(device=DEVICE, dtype=torch.float16)
    q = torch.randn(2, seqlen, 4, 32, **f16)
    k, v = torch.randn(2, seqlen, 2, 32, **f16), torch.randn(2, seqlen, 2, 32, **f16)
    k_cache, v_cache = torch.zeros(2, capacity, 2, 32, **f16), torch.zeros(2, capacity, 2, 32, **f16)
    seqlens = torch.tensor([2, 6], dtype=torch.int32, device=DEVICE)  # sequence 1 reaches position 8: past both
    angles = torch.rand(capacity, rotary_dim // 2, device=DEVICE) * 6.28
    tables = []
    for rows in (angles.cos(), angles.sin()):
        buffer = torch.full((capacity + 4, rotary_dim // 2), float("nan"), device=DEVICE)
        buffer[:capacity] = rows
        tables.append(buffer[:capacity])
    cos, sin = tables
    q_rot = torch.empty_like(q)
    append_kv(q, k, v, q_rot, k_cache, v_cache, seqlens, 0, None, None, cos, sin, interleaved, True)

    positions = seqlens.long()[:, None] + torch.arange(seqlen, device=DEVICE)
    past_end = (torch.ones(1, rotary_dim // 2, device=DEVICE), torch.zeros(1, rotary_dim // 2, device=DEVICE))
    cos_ext, sin_ext = torch.cat((cos, past_end[0])), torch.cat((sin, past_end[1]))  # row 8: no turn
    torch.testing.assert_close(q_rot, rotate(q, cos_ext, sin_ext, positions, interleaved), atol=2e-3, rtol=2e-3)
    k_rot = rotate(k, cos_ext, sin_ext, positions, interleaved)
    torch.testing.assert_close(k_cache[0, 2:5], k_rot[0], atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(k_cache[1, 6:8], k_rot[1, :2], atol=2e-3, rtol=2e-3)
    assert torch.equal(v_cache[1, 6:8], v[1, :2]) and (k_cache[0, :2] == 0).all() and (k_cache[1, :6] == 0).all()


def test_num_splits_all_agree():
    """Every split count gives the oracle's result and the same result up to rounding (they merge the same
    numbers in different groupings); more splits than key tiles leave some empty."""
    outs = [check(torch.float32, lens=(37, 96), seqlen_q=2, causal=True, num_splits=s)[0] for s in (1, 2, 3, 7)]
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=1e-5, rtol=1e-5)


def test_cache_batch_idx_and_int_seqlens():
    check(torch.float16, batch_idx=True, seqlens_as_int=True, lens=(50,), seqlen_new=1)


def test_window_and_softcap():
    check(
        torch.float16,
        seqlen_q=3,
        seqlen_new=3,
        lens=(40, 70),
        causal=True,
        window_size=(20, -1),
        softcap=5.0,
        num_splits=2,
    )


def test_window_both_sides_and_alibi():
    """A window open on both sides (keys after the query too, not causal) with per-sequence ALiBi slopes."""
    check(torch.float16, seqlen_q=2, lens=(40, 70), window_size=(9, 4), alibi="batch_heads", num_splits=3)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(causal=True, seqlen_q=3),
        dict(seqlen_new=2, rotary_dim=16, causal=True, seqlen_q=2),
        dict(window_size=(9, 0), causal=True, alibi="heads", batch_idx=True),
        dict(num_splits=3, seqlens_as_int=True, lens=(60, 60)),
    ],
    ids=["plain", "causal", "append_rotary", "window_alibi_batch_idx", "splits"],
)
def test_cache_leftpad(options):
    """Left-padded sequences (flash-attn's cache_leftpad): each one's keys start past its padding, and the masks
    and ALiBi count them from there, while new keys land, and rotate, at their positions in the cache."""
    check(**{"lens": (37, 80), "leftpad": (5, 31), **options})


def test_num_splits_heuristic():
    """No split once the grid nearly fills the GPU; while two or more splits fit in one wave, the most that do,
    cut as finely with the fewest; otherwise flash-attn's rule, the fewest splits within 85% of the best
    last-wave efficiency."""
    assert num_splits_heuristic(512, 264, 512) == 1
    # 8 programs on 264 slots: 33 splits fill the wave (2048 tiles, 63 a split; 32 splits would take 64)
    assert num_splits_heuristic(8, 264, 2048) == 33
    # 64 tiles: 33 splits would be 2 a split, and 32 splits cut them the same way
    assert num_splits_heuristic(8, 264, 64) == 32
    assert num_splits_heuristic(8, 132, 256) == 16  # flash-attn's 85% would stop at 14 (112 of 132 busy)
    assert num_splits_heuristic(64, 264, 512) == 4
    assert num_splits_heuristic(8, 264, 3) == 3  # never more splits than key tiles
    # 80 programs on 132 slots: two splits overflow a wave; flash-attn's rule takes 3 (240 in two waves, 91%)
    assert num_splits_heuristic(80, 132, 256) == 3


def test_last_wave_splits_is_flash_attns_rule():
    """The fewest splits within 85% of the best last-wave efficiency. 8 programs on 264 slots: 32 splits would
    fill 256 of them (97%), 29 fill 232 (88%, within 85% of 97%) and win; with 64 key tiles, 29 and 30 and 31 cut
    them like 32 does (3 each) and are skipped."""
    assert last_wave_splits(512, 264, 512) == 1
    assert last_wave_splits(8, 264, 2048) == 29
    assert last_wave_splits(8, 264, 64) == 32
    assert last_wave_splits(8, 132, 256) == 14
    assert last_wave_splits(8, 264, 3) == 3


def test_op_traces_under_fake_tensors():
    """The custom op's fake implementation gives outputs of the right shapes without running a kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 3, 8, 64, dtype=torch.float16, device=DEVICE)
        kc = torch.empty(2, 128, 2, 64, dtype=torch.float16, device=DEVICE)
        lens = torch.zeros(2, dtype=torch.int32, device=DEVICE)
        out, lse = flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=lens, return_softmax_lse=True)
    assert out.shape == (2, 3, 8, 64) and lse.shape == (2, 8, 3)


@pytest.mark.parametrize("backend", ["aot_eager"] + (["inductor"] if torch.cuda.is_available() else []))
def test_compile_fullgraph_keeps_the_append(backend):
    """torch.compile(fullgraph=True) traces through the op (its fake implementation) and keeps its in-place writes
    to the caches: the compiled step gives the eager step's output and leaves the same caches behind."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, h, 32, generator=g).to(DEVICE, torch.float16) for h in (4, 2, 2))
    caches = [torch.randn(2, 64, 2, 32, generator=g).to(DEVICE, torch.float16) for _ in range(2)]
    lens = torch.tensor([3, 40], dtype=torch.int32, device=DEVICE)

    def step(q, k, v, k_cache, v_cache, lens):
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, causal=True)
        return out * 2.0

    eager_caches = [c.clone() for c in caches]
    expected = step(q, k, v, *eager_caches, lens)
    torch._dynamo.reset()
    got = torch.compile(step, backend=backend, fullgraph=True)(q, k, v, *caches, lens)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    for c, e in zip(caches, eager_caches):
        torch.testing.assert_close(c, e, atol=0, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------


def _args(**kw):
    f16 = dict(device=DEVICE, dtype=torch.float16)
    args = dict(
        q=torch.randn(2, 1, 4, 32, **f16),
        k_cache=torch.randn(2, 64, 2, 32, **f16),
        v_cache=torch.randn(2, 64, 2, 32, **f16),
        cache_seqlens=torch.zeros(2, dtype=torch.int32, device=DEVICE),
    )
    args.update(kw)
    return args


def _new(n=1):
    return torch.randn(2, n, 2, 32, device=DEVICE, dtype=torch.float16)


def _paged(page=16):
    return torch.randn(8, page, 2, 32, device=DEVICE, dtype=torch.float16)


_TABLE = torch.arange(8, dtype=torch.int32, device=DEVICE).reshape(2, 4)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(k=_new()), ValueError, "k was given without v"),
        (dict(v=_new()), ValueError, "v was given without k"),
        (dict(k=_new(65), v=_new(65)), ValueError, "k has 65 new tokens but the cache holds 64"),
        (
            dict(k=_new(2), v=_new(2), cache_seqlens=63),
            ValueError,
            r"cache_seqlens \(63\) \+ new tokens \(2\) = 65 "
            "exceeds the cache's 64",
        ),
        (dict(k=_new(), v=_new(), cache_seqlens=None), ValueError, "cache_seqlens is required"),
        (dict(cache_seqlens=torch.zeros(2, device=DEVICE)), TypeError, "cache_seqlens has dtype torch.float32"),
        (
            dict(cache_seqlens=torch.zeros(3, dtype=torch.int32, device=DEVICE)),
            ValueError,
            r"cache_seqlens must have shape \(batch=2,\)",
        ),
        (
            dict(k_cache=_paged(), v_cache=_paged(), block_table=_TABLE.long()),
            TypeError,
            "block_table has dtype torch.int64; allowed: torch.int32",
        ),
        (
            dict(k_cache=_paged(), v_cache=_paged(), block_table=_TABLE.reshape(4, 2)),
            ValueError,
            r"block_table must have shape \(batch=2, max_blocks_per_seq\)",
        ),
        (dict(k_cache=_paged(), v_cache=_paged(), block_table=_TABLE[0]), ValueError, "block_table must be a 2-D"),
        (
            dict(k_cache=_paged(24), v_cache=_paged(24), block_table=_TABLE),
            ValueError,
            "page_size .* is 24; allowed: a multiple of 16",
        ),
        (
            dict(
                k_cache=_paged(),
                v_cache=_paged(),
                block_table=_TABLE,
                cache_batch_idx=torch.zeros(2, dtype=torch.int32, device=DEVICE),
            ),
            ValueError,
            "cache_batch_idx cannot be combined with block_table",
        ),
        (
            dict(alibi_slopes=torch.ones(4, dtype=torch.float64, device=DEVICE)),
            TypeError,
            "alibi_slopes must be a float32 tensor",
        ),
        (
            dict(alibi_slopes=torch.ones(3, device=DEVICE)),
            ValueError,
            r"alibi_slopes has shape \(3,\); allowed: \(4,\) or",
        ),
        (
            dict(k_cache=_paged(), v_cache=_paged(), block_table=_TABLE, cache_leftpad=_TABLE[:, 0].clone()),
            ValueError,
            "cache_leftpad cannot be combined with block_table",
        ),
        (
            dict(cache_leftpad=torch.zeros(2, dtype=torch.int64, device=DEVICE)),
            TypeError,
            "cache_leftpad has dtype torch.int64; allowed: torch.int32",
        ),
        (
            dict(cache_leftpad=torch.zeros(3, dtype=torch.int32, device=DEVICE)),
            ValueError,
            r"cache_leftpad must have shape \(batch=2,\)",
        ),
        (
            dict(
                k_cache=torch.randn(2, 64, 3, 32, dtype=torch.float16, device=DEVICE),
                v_cache=torch.randn(2, 64, 3, 32, dtype=torch.float16, device=DEVICE),
            ),
            ValueError,
            r"q heads \(4\) must be a multiple of k_cache heads \(3\)",
        ),
        (
            dict(v_cache=torch.randn(2, 32, 2, 32, dtype=torch.float16, device=DEVICE)),
            ValueError,
            "k_cache and v_cache must have one shape",
        ),
        (
            dict(
                k_cache=torch.randn(1, 64, 2, 32, dtype=torch.float16, device=DEVICE),
                v_cache=torch.randn(1, 64, 2, 32, dtype=torch.float16, device=DEVICE),
            ),
            ValueError,
            "k_cache holds 1 sequences but q has batch 2",
        ),
        (
            dict(rotary_cos=torch.ones(64, 8, dtype=torch.float16, device=DEVICE)),
            ValueError,
            "rotary_cos and rotary_sin must be given together",
        ),
        (
            dict(
                rotary_cos=torch.ones(64, 8, dtype=torch.float16, device=DEVICE),
                rotary_sin=torch.ones(64, 8, dtype=torch.float16, device=DEVICE),
            ),
            ValueError,
            "they need k and v",
        ),
        (
            dict(
                k=_new(),
                v=_new(),
                rotary_cos=torch.ones(64, 4, dtype=torch.float16, device=DEVICE),
                rotary_sin=torch.ones(64, 4, dtype=torch.float16, device=DEVICE),
            ),
            ValueError,
            "rotary_dim .* is 8; allowed: a multiple of 16",
        ),
        (
            dict(
                k=_new(),
                v=_new(),
                rotary_cos=torch.ones(64, 8, dtype=torch.float16, device=DEVICE),
                rotary_sin=torch.ones(64, 16, dtype=torch.float16, device=DEVICE)[:, :8],
            ),
            ValueError,
            r"rotary_cos and rotary_sin must have one layout .* strides \(8, 1\) and \(16, 1\)",
        ),
        (dict(window_size=(4,)), TypeError, "window_size must be a pair of ints"),
        (dict(window_size=([1], 0)), TypeError, "window_size must be a pair of ints"),
        (dict(softmax_scale=[0.1]), TypeError, "softmax_scale must be a float or None, got list"),
        (dict(window_size=(-2, 0)), ValueError, "window_size must be two ints >= -1"),
        (dict(softcap=-1.0), ValueError, "softcap must be a finite float >= 0"),
        (dict(softcap=float("inf")), ValueError, "softcap must be a finite float >= 0"),
        (dict(num_splits=129), ValueError, "num_splits is 129; allowed: 0"),
        (dict(num_splits=-1), ValueError, "num_splits must be an int >= 0"),
        (dict(causal=1), TypeError, "causal must be a bool"),
        (dict(rotary_interleaved="x"), TypeError, "rotary_interleaved must be a bool, got str"),
    ],
)
def test_rejects(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        flash_attn_with_kvcache(**_args(**kwargs))


def test_a_backward_through_a_decode_step_raises():
    """No backward: with q requiring grad, the output says so when a backward reaches it (rather than leaving
    q.grad empty), and its values are those of the same call without gradients."""
    args = _args()
    q = args["q"].clone().requires_grad_()
    args["q"] = q
    out, lse = flash_attn_with_kvcache(**args, return_softmax_lse=True)
    with torch.no_grad():
        expected = flash_attn_with_kvcache(**args)
    assert torch.equal(out.detach(), expected) and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    with pytest.raises(RuntimeError, match="flash_attn_with_kvcache has no backward"):
        (out.sum() + lse.sum()).backward()
    assert q.grad is None


def test_debug_checks_catch_device_values(monkeypatch):
    """FLASHDOC_DEBUG_CHECKS=1 (read at import, patched here) checks lengths held on the device, at every call:
    also after the same call has passed with good lengths."""
    monkeypatch.setattr(flashdoc.kvcache, "DEBUG_CHECKS", True)
    good = torch.tensor([0, 63], dtype=torch.int32, device=DEVICE)
    flash_attn_with_kvcache(**_args(k=_new(), v=_new(), cache_seqlens=good))
    lens = torch.tensor([0, 64], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] \(64\) \+ new tokens \(1\) = 65 is outside"):
        flash_attn_with_kvcache(**_args(k=_new(), v=_new(), cache_seqlens=lens))
    pad = torch.tensor([0, 50], dtype=torch.int32, device=DEVICE)
    flash_attn_with_kvcache(**_args(cache_seqlens=good, cache_leftpad=pad))
    with pytest.raises(ValueError, match=r"cache_leftpad\[0\] is 1; allowed: 0 to .* cache_seqlens\[0\] = 0"):
        flash_attn_with_kvcache(**_args(cache_seqlens=good, cache_leftpad=pad + 1))


@pytest.mark.skipif(DEVICE != "cpu", reason="CPU tensors only: on a GPU the values wait for the switch")
def test_cpu_device_values_are_always_checked():
    """On the CPU the values in the tensors cost nothing to read, so they are checked without
    FLASHDOC_DEBUG_CHECKS: a negative length or a block-table entry past the pages would have the interpreted
    kernels read and write outside the CPU caches."""
    assert not flashdoc.kvcache.DEBUG_CHECKS
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\] \(-3\) \+ new tokens \(1\) = -2 is outside"):
        flash_attn_with_kvcache(**_args(k=_new(), v=_new(), cache_seqlens=torch.tensor([0, -3], dtype=torch.int32)))
    with pytest.raises(ValueError, match=r"cache_batch_idx has entries outside 0..1"):
        flash_attn_with_kvcache(**_args(cache_batch_idx=torch.tensor([0, 2], dtype=torch.int32)))


def test_a_repeated_call_is_checked_once_and_its_values_every_time(monkeypatch):
    """A decode loop makes the same call at every step. The checks that read only the arguments' layout and
    options run once for it (``kvcache._validated``); an int cache_seqlens, which changes from step to step, is
    checked at every call; and a call that differs only in an argument's type (1 for True, True for 1) is
    checked anew, and refused."""
    kvcache = flashdoc.kvcache
    monkeypatch.setattr(kvcache, "_validated", {})
    checked = []
    validate = kvcache._validate
    monkeypatch.setattr(kvcache, "_validate", lambda **a: checked.append(a) or validate(**a))
    args = _args(k=_new(), v=_new(), cache_seqlens=10, causal=True, num_splits=1)
    for step in range(3):
        flash_attn_with_kvcache(**{**args, "cache_seqlens": 10 + step, "q": torch.randn_like(args["q"])})
    assert len(checked) == 1 and len(kvcache._validated) == 1
    with pytest.raises(ValueError, match=r"cache_seqlens \(64\) \+ new tokens \(1\) = 65 exceeds the cache's 64"):
        flash_attn_with_kvcache(**{**args, "cache_seqlens": 64})
    with pytest.raises(TypeError, match="causal must be a bool"):
        flash_attn_with_kvcache(**{**args, "causal": 1})
    with pytest.raises(TypeError, match="num_splits must be an int, got bool"):
        flash_attn_with_kvcache(**{**args, "num_splits": True})
    with pytest.raises(TypeError, match="cache_seqlens must be an int, got bool"):
        flash_attn_with_kvcache(**{**args, "cache_seqlens": True})
    assert len(kvcache._validated) == 1  # a refused call leaves nothing behind


@pytest.mark.skipif(DEVICE != "cpu", reason="runs the GPU host path over CPU tensors, launches stubbed out")
def test_a_decode_loop_launches_through_its_first_steps_plans(monkeypatch):
    """The GPU's host path run over CPU tensors, every launch stubbed out: the first step of a decode loop makes one
    plan for the append and one for the attention and launches through Triton's path; the later steps launch
    straight through the plans' launchers, with the arguments Triton's path would have had (the step's own
    tensors, the plan's ints, the step's int cache length)."""
    from benchmarks.kernels.host_decode import stub_launches
    from flashdoc.kernels import decode as dk

    launches = []
    stub_launches(monkeypatch.setattr, lambda *launch: launches.append(launch))
    monkeypatch.setattr(dk, "_plans", {})
    monkeypatch.setattr(dk, "_append_plans", {})
    f16 = dict(dtype=torch.float16)
    k_cache, v_cache = (torch.zeros(2, 4096, 8, 128, **f16) for _ in range(2))
    cos, sin = (torch.randn(4096, 64, **f16) for _ in range(2))
    steps = []
    for step in range(3):
        q = torch.randn(2, 1, 32, 128, **f16)
        k, v = (torch.randn(2, 1, 8, 128, **f16) for _ in range(2))
        args = dict(rotary_cos=cos, rotary_sin=sin, causal=True, cache_seqlens=100 + step)
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, **args)
        steps.append((q, k, v))
    assert len(dk._plans) == len(dk._append_plans) == 1
    # a split launch at this shape: append, split-KV, merge at every step
    assert [(name, how) for name, how, _, _ in launches] == [
        ("_append_kv", "triton"),
        ("_split_kv", "triton"),
        ("_merge_splits", "triton"),
    ] + [("_append_kv", "plan"), ("_split_kv", "plan"), ("_merge_splits", "plan")] * 2
    first = {name: (grid, args) for name, _, grid, args in launches[:3]}
    for step, (q, k, v) in enumerate(steps[1:], start=1):
        for name, _, grid, args in launches[3 * step : 3 * step + 3]:
            assert grid == first[name][0], name
            ints = [a for a in args if type(a) is int]
            first_ints = [a for a in first[name][1] if type(a) is int]
            if name != "_merge_splits":  # the int cache length is the step's own
                assert ints.count(100 + step) == 1 and first_ints.count(100) == 1
                ints, first_ints = [a for a in ints if a != 100 + step], [a for a in first_ints if a != 100]
            assert ints == first_ints, name
        append_args = launches[3 * step][3]
        assert append_args[0] is q and append_args[1] is k and append_args[2] is v


@pytest.mark.skipif(DEVICE != "cpu", reason="runs the GPU host path over CPU tensors, launches stubbed out")
@pytest.mark.parametrize("page_size", [16, 32, 64, 256])
def test_a_plain_paged_step_launches_the_hopper_kernel_through_its_plan(monkeypatch, page_size):
    """The GPU's host path over CPU tensors, launches stubbed out and the call taken for a Hopper GPU's: a decode loop
    over pages of ``HOPPER_PAGE_SIZES`` rows launches ``decode_hopper._paged_decode`` (its grid one program a KV
    head and split, its meta-parameters the Hopper config's, descriptors of one page's rows, or of one tile's rows of
    a page that holds whole tiles, over the caches, built again each step) and then the merge; other pages keep
    ``_split_kv``."""
    from benchmarks.kernels.host_decode import stub_launches
    from flashdoc.kernels import decode as dk
    from flashdoc.kernels import decode_hopper

    launches = []
    stub_launches(monkeypatch.setattr, lambda *launch: launches.append(launch))

    def launch_gluon(kernel, grid, args, meta, num_warps):
        launches.append(("_paged_decode", "gluon", grid, args, meta))
        return lambda grid, args, device: launches.append(("_paged_decode", "plan", grid, args))

    monkeypatch.setattr(dk, "launch_gluon", launch_gluon)
    monkeypatch.setattr(decode_hopper, "_paged_decode", object(), raising=False)
    # a Hopper GPU with Gluon: everything hopper_takes asks but the device
    monkeypatch.setattr(dk, "hopper_takes", lambda *a: dk.plain_paged_step(*a[:-2]) and not dk.fills_gpu(a[-2], a[-1]))
    monkeypatch.setattr(dk, "_plans", {})
    monkeypatch.setattr(dk, "_append_plans", {})
    f16 = dict(dtype=torch.float16)
    pages = 2 * 1024 // page_size
    k_cache, v_cache = (torch.zeros(pages, page_size, 8, 128, **f16) for _ in range(2))
    table = torch.arange(pages, dtype=torch.int32).view(2, -1)
    steps = []
    for step in range(3):
        q = torch.randn(2, 1, 32, 128, **f16)
        k, v = (torch.randn(2, 1, 8, 128, **f16) for _ in range(2))
        seqlens = torch.tensor([100 + step, 900 + step], dtype=torch.int32)
        flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens, block_table=table, causal=True)
        steps.append((q, seqlens))
    assert len(dk._plans) == 1
    attention = [launch for launch in launches if launch[0] in ("_paged_decode", "_split_kv")]
    if page_size not in dk.HOPPER_PAGE_SIZES:
        assert [(name, how) for name, how, *_ in attention] == [("_split_kv", "triton")] + [("_split_kv", "plan")] * 2
        return
    assert [(name, how) for name, how, *_ in attention] == [("_paged_decode", "gluon")] + [
        ("_paged_decode", "plan")
    ] * 2
    # 2 x 8 programs a split over 1,024 keys of 128-key tiles: the heuristic's splits fill one wave of 132 SMs
    splits = dk.splits_for(16, 1024, dk.HOPPER_PAGED_CONFIG, 0)
    assert splits == 8
    _, _, grid, first_args, meta = attention[0]
    assert grid == (16, splits)
    assert meta == dict(GROUP=4, PAGE_SIZE=page_size, BLOCK_N=128, STAGES=2, SPLIT=True, SEQLENS_TENSOR=True)
    assert [name for name, *_ in launches].count("_merge_splits") == 3  # the Triton kernel's merge, every step
    for (q, seqlens), (_, _, grid_now, args, *_) in zip(steps, attention):
        assert grid_now == grid
        assert args[0] is q and args[3] is table and args[4] is seqlens
        for desc, cache in zip(args[1:3], (k_cache, v_cache)):
            assert desc.base is cache and list(desc.block_shape) == [1, min(page_size, 128), 1, 128]
        ints = args[9:]  # q's, out's and the table's strides, the table's pages, KV heads, rows, lengths, scale
        assert ints[:8] == first_args[9:17] and ints[8:10] == (0, 1)  # no int length; one appended token


# ---------------------------------------------------------------------------------------------------------------
# GPU sweep
# ---------------------------------------------------------------------------------------------------------------


PAGES = pytest.mark.parametrize("page_size", [None, 16, 64, 256], ids=["contiguous", "page16", "page64", "page256"])


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("heads", [(32, 8), (16, 1), (8, 8)], ids=["gqa4", "mqa16", "mha"])
@PAGES
@pytest.mark.parametrize("seqlen_q,causal", [(1, False), (4, True), (16, True)])
def test_gpu_sweep(head_dim, heads, page_size, seqlen_q, causal):
    check(
        torch.bfloat16,
        batch=3,
        seqlen_q=seqlen_q,
        n_heads=heads[0],
        n_kv=heads[1],
        head_dim=head_dim,
        cache_len=2048,
        lens=(0, 1000, 2048 - seqlen_q),
        seqlen_new=seqlen_q,
        page_size=page_size,
        causal=causal,
    )


@pytest.mark.gpu
@PAGES
@pytest.mark.parametrize("head_dim", [96, 128])
def test_gpu_fp16(page_size, head_dim):
    """fp16, and a head dim that is not a power of two (its tiles padded to 128 columns)."""
    check(
        torch.float16,
        batch=3,
        seqlen_q=2,
        n_heads=32,
        n_kv=8,
        head_dim=head_dim,
        cache_len=2048,
        lens=(5, 1000, 2046),
        seqlen_new=2,
        page_size=page_size,
        causal=True,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 16, 64, 256])
def test_gpu_batch_that_fills_the_gpu(page_size):
    """A batch whose grid has a program per SM without splits takes the full-grid entries of the config tables
    (``decode.TUNED_CONFIGS``); per-batch lengths, some shorter than a tile, some past a page boundary."""
    from flashdoc.kernels import decode as dk

    batch = triton.cdiv(dk.num_sms(torch.cuda.current_device()), 8)
    lens = tuple((37 * b * b + 5) % 700 for b in range(batch))
    check(
        torch.bfloat16,
        batch=batch,
        seqlen_q=1,
        n_heads=32,
        n_kv=8,
        head_dim=128,
        cache_len=768,
        lens=lens,
        seqlen_new=1,
        page_size=page_size,
        causal=True,
    )


def _record_hopper_takes(monkeypatch) -> list:
    """Every ``decode.hopper_takes`` answer from here on, with the plans forgotten so that the next call asks."""
    taken = []
    real = decode.hopper_takes
    monkeypatch.setattr(decode, "_plans", {})
    monkeypatch.setattr(decode, "hopper_takes", lambda *a: taken.append(real(*a)) or taken[-1])
    return taken


def _on_hopper() -> bool:
    from flashdoc.kernels import gluon_support

    return gluon_support.ALLOWED and torch.cuda.get_device_capability()[0] == 9


def _plain_paged_step(dtype, page_size, head_dim, heads, num_splits):
    """``check`` on a plain step over a paged cache: NaN past each sequence, a sequence of one key (the appended
    one), and one whose last tile runs past its block table (1,000 keys over the pages the table holds)."""
    check(
        dtype,
        batch=3,
        n_heads=heads[0],
        n_kv=heads[1],
        head_dim=head_dim,
        cache_len=1000,
        lens=(999, 0, 517),
        seqlen_new=1,
        page_size=page_size,
        causal=True,
        num_splits=num_splits,
        poison=True,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("heads", [(8, 8), (32, 8), (64, 1)], ids=["mha", "gqa4", "mqa64"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_plain_paged_step(monkeypatch, dtype, head_dim, heads, num_splits):
    """A plain decode step over pages of 16 (``decode.hopper_takes``), on Hopper the Gluon kernel: NaN past each
    sequence, a sequence of one key, one whose last tile runs past its block table (1,000 keys over 63 pages of
    16), one split (the output written directly), three, and the heuristic's."""
    taken = _record_hopper_takes(monkeypatch)
    _plain_paged_step(dtype, 16, head_dim, heads, num_splits)
    assert taken == [_on_hopper()]


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [0, 1, 3])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("page_size", [64, 256])
def test_gpu_plain_paged_step_over_pages_of_tiles(monkeypatch, page_size, head_dim, num_splits):
    """A plain step over pages of 64 rows (a 128-key tile over two pages) and of 256 (pages of two tiles each), on
    the kernel ``HOPPER_PAGE_SIZES`` routes it to: NaN past each sequence, a sequence of one key, and one whose
    last tile runs past its block table (1,000 keys over pages that end at 1,024)."""
    taken = _record_hopper_takes(monkeypatch)
    _plain_paged_step(torch.bfloat16, page_size, head_dim, (32, 8), num_splits)
    assert taken == [page_size in decode.HOPPER_PAGE_SIZES and _on_hopper()]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "options",
    [dict(seqlens_as_int=True, lens=(700, 700)), dict(seqlen_new=0, lens=(700, 30)), dict(rotary_dim=128)],
    ids=["int_seqlens", "no_append", "rotary"],
)
def test_gpu_plain_paged_step_options(monkeypatch, options):
    """The Gluon kernel's other inputs: one length for every sequence (an int), no new keys, rotated q and k."""
    taken = _record_hopper_takes(monkeypatch)
    check(
        torch.bfloat16,
        **{
            **dict(batch=2, n_heads=32, n_kv=8, head_dim=128, cache_len=2048, lens=(700, 1500), seqlen_new=1),
            **dict(page_size=16, poison=True),
            **options,
        },
    )
    assert taken == [_on_hopper()]


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [0, 1, 7])
@pytest.mark.parametrize(
    "options",
    [dict(), dict(seqlen_q=4, causal=True, seqlen_new=4, rotary_dim=64), dict(window_size=(255, 0), causal=True)],
    ids=["plain", "append_rotary_causal", "window"],
)
def test_gpu_cache_leftpad(num_splits, options):
    """Left-padded sequences on the GPU: pads from none to most of the cache, over the heuristic's splits and
    others, with the append, rotary and a window."""
    check(
        torch.bfloat16,
        batch=3,
        n_heads=32,
        n_kv=8,
        head_dim=128,
        cache_len=2048,
        lens=(1000, 2000, 1500),
        leftpad=(0, 1999, 700),
        num_splits=num_splits,
        **{"seqlen_q": 1, **options},
    )


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [0, 1, 2, 5, 16, 128])
@pytest.mark.parametrize("page_size", [None, 64])
def test_gpu_num_splits_agree(num_splits, page_size):
    check(
        torch.bfloat16,
        batch=2,
        seqlen_q=2,
        n_heads=32,
        n_kv=8,
        head_dim=128,
        cache_len=8192,
        lens=(8000, 333),
        seqlen_new=2,
        page_size=page_size,
        causal=True,
        num_splits=num_splits,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 64])
def test_gpu_prefill_then_decode(page_size):
    """A prompt of 512 positions appended and attended in one call (32 query tiles of 16 positions x 4 heads),
    rotated, as a generation loop's prefill does; then a one-query step against caches that long (each check
    builds its own cache)."""
    for seqlen_q, lens in ((512, (0, 300)), (1, (512, 812))):
        check(
            torch.bfloat16,
            batch=2,
            seqlen_q=seqlen_q,
            n_heads=32,
            n_kv=8,
            head_dim=64,
            cache_len=1024,
            lens=lens,
            seqlen_new=seqlen_q,
            rotary_dim=64,
            interleaved=False,
            causal=True,
            page_size=page_size,
        )


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("rotary_dim", [64, 128])
def test_gpu_rotary(interleaved, rotary_dim):
    check(
        torch.bfloat16,
        batch=2,
        seqlen_q=4,
        n_heads=16,
        n_kv=4,
        head_dim=128,
        cache_len=1024,
        lens=(100, 900),
        seqlen_new=4,
        rotary_dim=rotary_dim,
        interleaved=interleaved,
        causal=True,
        page_size=64,
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "window_size,softcap", [((256, -1), 0.0), ((100, 30), 0.0), ((-1, -1), 20.0), ((500, 0), 30.0)]
)
@pytest.mark.parametrize("page_size", [None, 16])
def test_gpu_window_softcap(window_size, softcap, page_size):
    check(
        torch.bfloat16,
        batch=2,
        seqlen_q=8,
        n_heads=32,
        n_kv=8,
        head_dim=128,
        cache_len=4096,
        lens=(4000, 1500),
        seqlen_new=8,
        page_size=page_size,
        window_size=window_size,
        softcap=softcap,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("alibi", ["heads", "batch_heads"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_alibi(alibi, causal):
    check(
        torch.float16,
        batch=2,
        seqlen_q=4,
        n_heads=16,
        n_kv=4,
        head_dim=64,
        cache_len=3000,
        lens=(2990, 100),
        seqlen_new=4,
        page_size=16,
        causal=causal,
        alibi=alibi,
    )


@pytest.mark.gpu
def test_gpu_group_not_a_power_of_two():
    """6 query heads per KV head: a tile holds whole groups (two query positions in 16 rows, 4 rows unused)."""
    check(
        torch.bfloat16,
        batch=2,
        seqlen_q=5,
        n_heads=12,
        n_kv=2,
        head_dim=128,
        cache_len=1000,
        lens=(900, 10),
        seqlen_new=5,
        causal=True,
        num_splits=3,
    )


@pytest.mark.gpu
def test_gpu_fp32_and_batch_idx():
    check(
        torch.float32,
        batch=3,
        n_heads=8,
        n_kv=2,
        head_dim=64,
        cache_len=700,
        lens=(699, 3, 300),
        seqlen_new=1,
        batch_idx=True,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("page", [64, 16])
def test_gpu_decode_step_in_a_cuda_graph(page):
    """One decode step (append one token, attend over a paged cache with the heuristic's splits) captured in a
    CUDA graph and replayed with new inputs copied into its static tensors: same results as eager calls, and the
    cache grows by one token per replay. Capture fails if anything synchronises with the host. (Pages of 16: the
    Gluon kernel on Hopper.)"""
    torch.manual_seed(0)
    batch, n_heads, n_kv, head_dim = 4, 32, 8, 128
    pages = 2048 // page
    kw = dict(device="cuda", dtype=torch.bfloat16)
    k_cache = torch.randn(batch * pages, page, n_kv, head_dim, **kw)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(batch * pages, device="cuda").to(torch.int32).reshape(batch, pages)
    lens = torch.tensor([100, 2000, 37, 1500], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(batch, 1, h, head_dim, **kw) for h in (n_heads, n_kv, n_kv))

    def step():
        return flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens, block_table=table, causal=True)

    k_eager, v_eager = k_cache.clone(), v_cache.clone()
    step()  # compile outside the capture (and warm the launch cache); undo its append
    k_cache.copy_(k_eager), v_cache.copy_(v_eager)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_static = step()
    k_cache.copy_(k_eager), v_cache.copy_(v_eager)  # capture records, but does not run, the append
    outs_graph, outs_eager = [], []
    inputs = [[torch.randn_like(t) for t in (q, k, v)] for _ in range(3)]
    for i, new in enumerate(inputs):
        for dst, src in zip((q, k, v), new):
            dst.copy_(src)
        lens.fill_(0).add_(torch.tensor([100, 2000, 37, 1500], dtype=torch.int32, device="cuda") + i)
        graph.replay()
        outs_graph.append(out_static.clone())
    k_graph = k_cache.clone()
    k_cache.copy_(k_eager), v_cache.copy_(v_eager)
    for i, new in enumerate(inputs):
        for dst, src in zip((q, k, v), new):
            dst.copy_(src)
        lens.fill_(0).add_(torch.tensor([100, 2000, 37, 1500], dtype=torch.int32, device="cuda") + i)
        outs_eager.append(step())
    for a, b in zip(outs_graph, outs_eager):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(k_graph, k_cache, atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 16])
def test_gpu_decode_plan_reuse(monkeypatch, page_size):
    """A decode loop's later steps go through the plans the first step made (``decode._Plan``: its split count,
    meta-parameters and compiled launchers; ``decode._AppendPlan`` for the append): one of each for the loop, and
    every step's output and cache bit for bit those of Triton's own launch path."""
    from flashdoc.kernels import decode as dk
    from flashdoc.kernels import launch

    torch.manual_seed(0)
    batch, n_heads, n_kv, head_dim, capacity = 2, 32, 8, 128, 4096
    kw = dict(device="cuda", dtype=torch.bfloat16)
    slots = batch * capacity // page_size if page_size else batch
    rows = page_size or capacity
    k_cache, v_cache = (torch.randn(slots, rows, n_kv, head_dim, **kw) for _ in range(2))
    table = None
    if page_size:
        table = torch.randperm(slots, device="cuda").to(torch.int32).reshape(batch, -1)
    monkeypatch.setattr(dk, "_plans", {})
    monkeypatch.setattr(dk, "_append_plans", {})
    results = {}
    for cached in (False, True):
        monkeypatch.setattr(launch, "LAUNCH_CACHE", cached)
        kc, vc = k_cache.clone(), v_cache.clone()
        torch.manual_seed(1)
        for step in range(3):
            lens = torch.tensor([1000 + step, 3000 + step], dtype=torch.int32, device="cuda")
            q, k, v = (torch.randn(batch, 1, h, head_dim, **kw) for h in (n_heads, n_kv, n_kv))
            out = flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, block_table=table, causal=True)
            results.setdefault(cached, []).append(out)
        results[cached] += [kc, vc]
        assert len(dk._plans) == len(dk._append_plans) == (1 if cached else 0)
    for a, b in zip(results[False], results[True]):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.gpu
def test_gpu_long_cache_many_splits():
    """A 128k-token contiguous cache for one sequence (the heuristic splits it across the GPU)."""
    check(torch.bfloat16, batch=1, n_heads=32, n_kv=8, head_dim=128, cache_len=131072, lens=(131071,), seqlen_new=1)


def test_decode_config_takes_the_entry_for_the_layout_and_grid(monkeypatch):
    """A cache takes its layout's entry for the grid it launches (split or full) where the table has one, else
    the head dim's default; fp32 caches halve the tile's keys (the same bytes per tile)."""
    from flashdoc.kernels import decode as dk

    monkeypatch.setattr(dk, "INTERPRET", False)
    for (d, page, full), config in dk.TUNED_CONFIGS.items():
        assert dk.decode_config(d, torch.bfloat16, page, full) == config
    for full in (False, True):
        assert dk.decode_config(128, torch.bfloat16, 0, full) == dk.DECODE_CONFIGS[128, full]
        # padded to 128, an untuned page size: the regime's default
        assert dk.decode_config(100, torch.float16, 256, full) == dk.DECODE_CONFIGS[128, full]
    assert dk.DECODE_CONFIGS[128, False].warps == 4 and dk.DECODE_CONFIGS[128, True].warps == 8
    half = dk.decode_config(128, torch.float32)
    assert half.block_n == dk.DECODE_CONFIGS[128, False].block_n // 2
