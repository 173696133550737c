"""torch.compile(fullgraph=True) traces through flashdoc's custom ops (forward and backward) with no graph break.

On the CPU the test uses the ``aot_eager`` backend (it runs the fake implementations and AOTAutograd's joint
graph, which is where a graph break or a bad fake would show, without needing inductor's C++ toolchain); on the
GPU it also uses ``inductor``.
"""

import pytest
import torch
from attention_oracle import DEVICE, make_qkv

import flashdoc
from flashdoc.flash_attn_interface import flash_attn_kvpacked_func


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.d)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x, api):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, self.heads + 2 * self.kv_heads, self.d)
        q, k, v = qkv.split([self.heads, self.kv_heads, self.kv_heads], dim=2)  # non-contiguous views
        if api == "flash":
            o = flashdoc.flash_attn_func(q, k, v, causal=True)
        elif api == "shared":  # one tensor as queries, keys and values: the autograd Function must take it once
            o = flashdoc.flash_attn_func(q, q, q, causal=True)
        elif api == "variants":  # every option at once: window, softcap, ALiBi, dropout (seeded: see _run)
            slopes = torch.linspace(0.05, 0.3, self.heads, device=x.device)
            o = flashdoc.flash_attn_func(q, k, v, 0.1, None, True, (7, 0), 20.0, slopes)
        elif api == "kvpacked":  # flash-attn's packed form: keys and values as one view of the projection
            kv = qkv[:, :, self.heads :].view(b, s, 2, self.kv_heads, self.d)
            o = flash_attn_kvpacked_func(q, kv, causal=True)
        else:
            o = flashdoc.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            ).transpose(1, 2)
        return self.proj(o.reshape(b, s, -1))


def _run(backend, api, device, dtype, seqlen):
    torch.manual_seed(0)
    model = Block(64, 4, 2).to(device=device, dtype=dtype)
    x = torch.randn(2, seqlen, 64, device=device, dtype=dtype, requires_grad=True)
    torch.manual_seed(1)  # dropout's draw: the compiled run repeats it below
    eager = model(x, api)
    eager.sum().backward()
    grads_eager = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, fullgraph=True)  # fullgraph: any graph break raises
    torch.manual_seed(1)
    # inductor draws random numbers its own way (dropout's seed among them) unless told to call torch's
    with torch._inductor.config.patch(fallback_random=True):
        out = compiled(x, api)
    out.sum().backward()
    grads = [p.grad for p in model.parameters()] + [x.grad]
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    _assert_close(out, eager, tol, "output")
    names = [name for name, _ in model.named_parameters()] + ["x"]
    for name, a, b in zip(names, grads, grads_eager):
        _assert_close(a, b, tol, f"{name}.grad")


def _assert_close(compiled, eager, tol, what):
    """Norm-wise relative error. In bf16 an element-wise bound fails on rounding alone: inductor fuses the sums
    into a gradient (the three that a shared q/k/v tensor receives, the tokens a weight's gradient adds up) and
    rounds once, where eager rounds every term, so large entries differ by a few of bf16's steps. A wrong gradient
    is off by order 1 in this norm, rounding by order 1e-3."""
    err = ((compiled.float() - eager.float()).norm() / eager.float().norm().clamp_min(1e-30)).item()
    assert err <= tol, f"{what}: relative error {err:.2e} against eager, over {tol:.0e}"


@pytest.mark.parametrize("api", ["flash", "shared", "sdpa", "variants", "kvpacked"])
def test_compile_fullgraph_aot_eager(api):
    _run("aot_eager", api, DEVICE, torch.float32, 24)


def test_compiled_call_takes_new_float_options():
    """From a float argument's second value on, torch.compile passes it as a symbolic float and recompiles once;
    the checks of softmax_scale and softcap must trace then too, under fullgraph=True, and each value must reach
    the kernels (the result matches eager's for that value)."""
    q, k, v = (t.detach() for t in make_qkv(1, 16, 16, 2, 2, 16, torch.float32))
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda q, k, v, scale, cap: flashdoc.flash_attn_func(q, k, v, softmax_scale=scale, softcap=cap),
        backend="aot_eager",
        fullgraph=True,
    )
    for scale, cap in ((0.3, 5.0), (0.5, 6.0), (0.7, 7.0)):
        expected = flashdoc.flash_attn_func(q, k, v, softmax_scale=scale, softcap=cap)
        torch.testing.assert_close(compiled(q, k, v, scale, cap), expected)


def test_opcheck_custom_ops():
    """torch.library.opcheck: the schemas and fake implementations agree with the kernels, in eager and under
    AOT dispatch. Autograd is not the ops' business (a torch.autograd.Function wraps them; the gradient tests
    check it), so the raw ops are checked on inputs that do not require grad."""
    q, k, v = (t.detach() for t in make_qkv(1, 12, 20, 2, 1, 16, torch.float32))
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.flashdoc.fwd.default, (q, k, v, 0.25, True, True), test_utils=checks)
    out, lse = torch.ops.flashdoc.fwd(q, k, v, 0.25, True, True)
    dout = torch.randn_like(out)
    for dlse, deterministic in ((None, True), (torch.randn_like(lse), False)):
        torch.library.opcheck(
            torch.ops.flashdoc.bwd.default,
            (dout, q, k, v, out, lse, dlse, 0.25, True, True, deterministic),
            test_utils=checks,
        )
    # the variants' flat arguments: window (left, right), softcap, ALiBi slopes, dropout_p and its (seed, offset)
    slopes, rng = torch.full((2,), 0.1, device=DEVICE), torch.tensor([123, 4], device=DEVICE, dtype=torch.int64)
    variant = (5, 0, 10.0, slopes, 0.2, rng)
    torch.library.opcheck(torch.ops.flashdoc.fwd.default, (q, k, v, 0.25, True, True, *variant), test_utils=checks)
    out, lse = torch.ops.flashdoc.fwd(q, k, v, 0.25, True, True, *variant)
    torch.library.opcheck(
        torch.ops.flashdoc.bwd.default,
        (dout, q, k, v, out, lse, None, 0.25, True, True, True, *variant),
        test_utils=checks,
    )
    # a decode step (two query positions of a group of two: the forward runs on the split-KV kernel)
    q_step = q[:, :2].contiguous()
    for args in ((), variant[:4]):
        torch.library.opcheck(
            torch.ops.flashdoc.fwd.default, (q_step, k, v, 0.25, True, True, *args), test_utils=checks
        )


@pytest.mark.gpu
@pytest.mark.parametrize("api", ["flash", "shared", "sdpa", "variants", "kvpacked"])
@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_gpu_compile_fullgraph_inductor(api, dtype):
    _run("inductor", api, "cuda", dtype, 512)
