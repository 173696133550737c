"""The launch cache (flashdoc/kernels/launch.py): a compiled kernel is reused only for arguments Triton would
compile the same way, and reusing it changes no bit of any result."""

import types
from collections import namedtuple

import pytest
import torch
from attention_oracle import forward_backward, make_qkv

from flashdoc.kernels import launch

# a kernel parameter as Triton's JITFunction.params lists it (the stand-in kernels below have these)
Param = namedtuple("Param", "name is_constexpr has_default default")


def test_signature_separates_what_triton_specialises_on():
    """Triton compiles a kernel per argument signature: an int's width, whether it is 1, whether 16 divides
    it; a pointer's 16-byte alignment; a tensor's dtype. Each of those must give a different cache key."""
    sig = launch.launch_signature
    assert sig(32) == sig(48)  # both divisible by 16: one kernel
    assert sig(8) != sig(16)
    assert sig(1) != sig(17)
    assert sig(2**31 - 16) != sig(2**31)  # i32 vs i64
    t = torch.zeros(64, dtype=torch.float16)
    assert sig(t) != sig(t[1:])  # 16-byte aligned vs 2 bytes off
    assert sig(t) != sig(t.float())
    assert sig(0.5) == sig(2.0) and sig(None) is None and sig(True) != sig(False)
    with pytest.raises(TypeError, match="no launch signature"):
        sig("tf32")


@pytest.mark.gpu
def test_gpu_launch_cache(monkeypatch):
    """The same bits with and without the cache; a repeated call adds no entry; a call that Triton compiles
    differently (a row stride of 120 elements, which 16 does not divide, after one of 80) gets its own."""
    entries = []
    for heads in (2, 3):  # head_dim 40: Q's row stride is 80, then 120
        q, k, v = make_qkv(2, 300, 300, heads, heads, 40, torch.bfloat16, requires_grad=False)
        monkeypatch.setattr(launch, "LAUNCH_CACHE", False)
        expected = forward_backward(q, k, v)
        monkeypatch.setattr(launch, "LAUNCH_CACHE", True)
        for _ in range(2):  # the first call fills the cache, the second launches from it
            for a, b in zip(forward_backward(q, k, v), expected):
                assert torch.equal(a, b)
            entries.append(len(launch._launchers))
    assert entries[0] == entries[1] < entries[2] == entries[3]


def test_second_launch_goes_straight_to_the_compiled_launcher(monkeypatch):
    """The cached path's contract with Triton, on stand-ins (test_gpu_launch_cache checks it for real): the
    first launch goes through the kernel (Triton's path); the second calls the compiled kernel's launcher
    with the grid of the first launch's config, no launch hooks, and every parameter in order, constexprs
    included, after setting each host descriptor's tile shape."""
    launched = []

    class Compiled:
        function, packed_metadata = "function", "packed"

        def run(self, *args):
            launched.append(("cached", args))

    class Kernel:  # a @triton.jit function's interface: kernel[grid](*args, **meta) compiles and launches
        arg_names = ["X", "DESC", "n", "BLOCK_D", "BLOCK_M", "BLOCK_N", "ACROSS_HEADS"]
        params = [Param(name, name.isupper(), False, None) for name in arg_names]

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(("triton", grid)) or Compiled()

    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(launch, "LAUNCH_CACHE", True)
    monkeypatch.setattr(launch, "_launchers", {})
    monkeypatch.setattr(launch, "_current_stream", lambda device: "stream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel, config = Kernel(), launch.tile_config(32, 64, 2, 4)
    grid = lambda meta: (1000 // meta["BLOCK_M"], 3)  # noqa: E731
    x = torch.zeros(2, 8, 3, 16)
    launchers = []
    for _ in range(2):
        desc = launch.head_tiles(x, "BLOCK_N")
        args = (x, desc, 1000)
        launchers.append(launch.launch(kernel, None, grid, args, {"BLOCK_D": 16}, config, config))
    # both launches hand back the one cached launcher, which a caller (decode's plans) may then call directly
    assert launchers[0] is launchers[1] is next(iter(launch._launchers.values()))
    assert launched[0] == ("triton", (31, 3))
    assert launched[1] == (
        "cached",
        (31, 3, 1, "stream", "function", "packed", None, None, None, x, desc, 1000, 16, 32, 64, False),
    )
    assert desc.block_shape == [1, 64, 1, 16]


def test_second_gluon_launch_goes_straight_to_the_compiled_launcher(monkeypatch):
    """``launch_gluon``'s contract with Triton, on stand-ins (test_gpu_launch_cache_gluon checks it for real): the
    first launch of a signature goes through the kernel; later ones call the compiled kernel's launcher with the
    grid given, no launch hooks and every parameter in order, constexprs included (one the call leaves out at its
    default); a new constexpr value or an int that Triton specialises differently goes through the kernel again."""
    launched = []

    class Compiled:
        function, packed_metadata = "function", "packed"

        def run(self, *args):
            launched.append(("cached", args))

    class Kernel:  # a @gluon.jit function's interface: kernel[grid](*args, **constexprs, num_warps=...)
        arg_names = ["X", "n", "IS_CAUSAL", "STAGES", "SECTION"]
        params = [
            Param("X", False, False, None),
            Param("n", False, False, None),
            Param("IS_CAUSAL", True, False, None),
            Param("STAGES", True, False, None),
            Param("SECTION", True, True, 0),
        ]

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(("triton", grid, kwargs["num_warps"])) or Compiled()

    monkeypatch.setattr(launch, "LAUNCH_CACHE", True)
    monkeypatch.setattr(launch, "_launchers", {})
    monkeypatch.setattr(launch, "_current_stream", lambda device: "stream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    kernel, x = Kernel(), torch.zeros(16)
    for n, causal in [(1024, True), (2048, True), (2048, False), (1000, False)]:
        launch.launch_gluon(kernel, (7, 3), (x, n), dict(IS_CAUSAL=causal, STAGES=2), num_warps=4)
    assert launched == [
        ("triton", (7, 3), 4),
        ("cached", (7, 3, 1, "stream", "function", "packed", None, None, None, x, 2048, True, 2, 0)),
        ("triton", (7, 3), 4),  # IS_CAUSAL changed
        ("triton", (7, 3), 4),
    ]  # 16 does not divide 1000
    assert len(launch._launchers) == 3


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
    reason="the Gluon kernels run on Hopper GPUs only",
)
def test_gpu_launch_cache_gluon(monkeypatch):
    """The Hopper (Gluon) kernels: the same bits with and without the cache at every head dim they take (d = 256
    runs the wide dK/dV kernel), and a repeated call adds no entry. The fused backward (d = 64; causal from 4k tokens)
    is compared with its dq to rounding only: its additions into dq come in a different order on each run."""
    import flashdoc
    from flashdoc.kernels import backward_hopper as bh
    from flashdoc.kernels import forward_hopper as fh
    from flashdoc.kernels.backward import fused_dq_runs

    gluon_kernels = {
        fh._attn_fwd_hopper,
        bh._attn_bwd_dkdv_hopper,
        bh._attn_bwd_dkdv_hopper_wide,
        bh._attn_bwd_dq_hopper,
    }

    def step(q, k, v, dout, causal):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = flashdoc.flash_attn_func(q, k, v, causal=causal)
        out.backward(dout)
        return out, q.grad, k.grad, v.grad

    for head_dim in (64, 128, 256):
        for causal in (False, True):
            q, k, v = make_qkv(2, 2048, 2048, 4, 2, head_dim, torch.bfloat16, requires_grad=False)
            assert fh.supports(q, causal)
            dout = torch.randn_like(q)
            monkeypatch.setattr(launch, "LAUNCH_CACHE", False)
            expected = step(q, k, v, dout, causal)
            monkeypatch.setattr(launch, "LAUNCH_CACHE", True)
            entries = []
            fused = fused_dq_runs(q, k, causal, deterministic=False)
            for _ in range(2):  # the first call fills the cache, the second launches from it
                for name, a, b in zip(("out", "dq", "dk", "dv"), step(q, k, v, dout, causal), expected):
                    if fused and name == "dq":
                        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-4, msg=(head_dim, causal))
                    else:
                        assert torch.equal(a, b), (head_dim, causal, name)
                entries.append(sum(key[0] in gluon_kernels for key in launch._launchers))
            assert entries[0] == entries[1] > 0


def test_unchecked_descriptor_equals_the_checked_one():
    """The descriptors flashdoc builds without the constructor's checks (``launch.unchecked_descriptor``, for
    Triton's host descriptor and for Gluon's) hold the same fields as the constructor would give them."""
    import dataclasses

    from triton.tools.tensor_descriptor import TensorDescriptor

    classes = [(TensorDescriptor, {})]
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

        layout = gl.NVMMASharedLayout.get_default_for([1, 64, 1, 64], gl.bfloat16)
        classes.append((GluonDescriptor, {"layout": layout}))
    except ImportError:  # a Triton without Gluon
        pass
    t = torch.zeros(2, 100, 3, 64, dtype=torch.bfloat16)
    for cls, extra in classes:
        fields = dict(base=t, shape=list(t.shape), strides=list(t.stride()), block_shape=[1, 64, 1, 64], **extra)
        checked, unchecked = cls(**fields), launch.unchecked_descriptor(cls, **fields)
        for f in dataclasses.fields(cls):
            assert getattr(unchecked, f.name) is getattr(checked, f.name) or getattr(unchecked, f.name) == getattr(
                checked, f.name
            ), (cls, f.name)


def test_a_plan_fills_in_each_calls_tensors(monkeypatch):
    """A ``Plan`` launches later calls with their own tensors in the places the first call's stood, descriptors
    rebuilt over them, and constants kept; a tensor passed twice by the first call (``distinct``) does not make a
    later call that passes two read one of them twice; and a launch argument made from none of the call's objects
    is refused when the plan is made, since every later call would read the first call's tensor."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    launches = []
    monkeypatch.setattr(launch, "INTERPRET", True)  # launch() keeps no launcher: every call goes through `first`

    def make_plan(objects):
        k, v, lse = objects
        args = (launch.head_tiles(k, "BLOCK_N"), launch.head_tiles(v, "BLOCK_N"), lse, 7, 0.5)
        return launch.Plan(lambda a: launches.append(a), None, args, objects)

    k = torch.zeros(2, 8, 3, 16)
    lse = torch.zeros(2, 3, 8)
    plan = make_plan(launch.distinct((k, k, lse)))  # the first call passes one tensor as k and v
    plan((k, k, lse))
    k2, v2, lse2 = torch.ones(2, 8, 3, 16), torch.full((2, 8, 3, 16), 2.0), torch.ones(2, 3, 8)
    plan((k2, v2, lse2))
    first, second = launches
    assert first[0].base is first[1].base is k and first[2] is lse and first[3:] == [7, 0.5]
    assert second[0].base is k2 and second[1].base is v2 and second[2] is lse2 and second[3:] == [7, 0.5]
    assert all(isinstance(d, TensorDescriptor) for d in second[:2])
    assert second[0] is not first[0] and second[0].shape == first[0].shape and second[0].block_rows == "BLOCK_N"
    with pytest.raises(ValueError, match="cannot remake a launch argument"):
        launch.Plan(lambda a: None, None, (k.view(-1),), (k,))


@pytest.mark.parametrize("kernel", ["forward", "dK/dV", "dK/dV wide", "dQ"])
@pytest.mark.parametrize("n_consumers", [1, 4])
def test_hopper_plans_refuse_a_consumer_count_the_kernels_do_not_build(monkeypatch, kernel, n_consumers):
    """The Gluon kernels build two consumer warpgroups or else three (one for the wide dK/dV kernel's pair): a
    config asking for another count is refused on the host, naming the config, before anything launches."""
    from flashdoc.kernels import backward_hopper, forward_hopper

    monkeypatch.setattr(forward_hopper, "_plans", {})
    monkeypatch.setattr(backward_hopper, "_plans", {})
    monkeypatch.setattr(backward_hopper, "_dq_plans", {})
    head_dim = 256 if kernel == "dK/dV wide" else 128
    q, k, v, dout = (torch.zeros(1, 128, 2, head_dim, dtype=torch.bfloat16) for _ in range(4))
    lse2, delta = torch.zeros(2, 1, 2, 128)
    config = (64, 64, 2, n_consumers)
    if kernel == "dK/dV wide" and n_consumers == 4:
        config = (64, 64, 2, 3)  # the wide kernel builds exactly two
    with pytest.raises(ValueError, match=rf"config=\(64, 64, 2, {config[3]}.*consumer warpgroups"):
        if kernel == "forward":
            forward_hopper.attn_fwd_hopper(
                q, k, v, torch.empty_like(q), torch.empty(1, 2, 128), 0.1, True, True, (*config, True)
            )
        elif kernel == "dQ":
            backward_hopper.bwd_dq_hopper(q, k, v, dout, torch.empty_like(q), lse2, delta, 0.1, True, True, config)
        else:
            dk, dv = torch.empty_like(k), torch.empty_like(v)
            backward_hopper.bwd_dkdv_hopper(q, k, v, dout, dk, dv, lse2, delta, 0.1, True, True, config)


def _triton_launch_wrapper(launcher, tensordesc_indices, tensordesc_meta):
    """A stand-in for the wrapper Triton 3.6 puts around its C launcher (``wrap_handle_tensordesc``'s ``inner``),
    holding what ``launch._c_launcher`` reads from it."""

    def inner(*args):
        return launcher, tensordesc_indices, tensordesc_meta

    return inner


def test_a_plan_launches_straight_through_the_c_launcher(monkeypatch):
    """Once a plan's launcher is known, its calls skip Triton's Python wrapper: the C launcher gets the grid, the
    stream, the wrapper's leading arguments and every parameter in order with each host descriptor expanded as
    Triton expands it; each descriptor is encoded once per address (a later call at an address seen before
    encodes nothing), over the call's own tensors, and at most ``ENCODINGS_KEPT`` encodings are kept per
    argument."""
    from triton.backends.nvidia import driver

    encoded, launched = [], []

    def encode(desc, meta):  # Triton's make_tensordesc_arg: the encoded map, then shape and strides
        encoded.append(desc.base.data_ptr())
        return [("map", desc.base.data_ptr(), meta), *desc.shape, *desc.strides]

    monkeypatch.setattr(driver, "_BASE_ARGS_FORMAT_LEN", 13, raising=False)
    monkeypatch.setattr(driver, "make_tensordesc_arg", encode)
    monkeypatch.setattr(launch, "LAUNCH_CACHE", True)
    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(launch, "_current_stream", lambda device: "stream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class Run:  # a compiled kernel's launcher (CudaLauncher): descriptors at parameter positions 0 and 1
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid, launch_pdl = False, False
        launch = _triton_launch_wrapper(lambda *a: launched.append(a), {0, 1}, ["meta k", "meta v"])

    c_launcher = launch._c_launcher(Run())
    assert c_launcher[1] == {0: "meta k", 1: "meta v"}
    first_launcher = types.SimpleNamespace(
        c_launcher=c_launcher, config={"BLOCK_N": 64}, tiles=[], tail=(64,), function="function", packed="packed"
    )
    through_triton = []

    def first(args):
        through_triton.append(args)
        return first_launcher

    def grid(meta):
        return (1000 // meta["BLOCK_N"], 3)

    def objects_of(k, v, lse):
        return launch.distinct((k, v, lse))

    k, v, lse = torch.zeros(2, 8, 3, 16), torch.ones(2, 8, 3, 16), torch.zeros(2, 3, 8)
    objects = objects_of(k, v, lse)
    args = (launch.head_tiles(objects[0], "BLOCK_N"), launch.head_tiles(objects[1], "BLOCK_N"), objects[2], 7, 0.5)
    plan = launch.Plan(first, grid, args, objects)
    plan((k, v, lse))  # through Triton's own path: the plan learns its launcher
    assert len(through_triton) == 1 and not launched
    shape, strides = list(k.shape), list(k.stride())
    k_new = torch.full_like(k, 2.0)
    for k_call in (k, k_new, k):  # a new address for k, then k's first address again
        plan((k_call, v, lse))
        head = (15, 3, 1, "stream", "function", False, False, None, None, "packed", None, None, None)
        expected_k = [("map", k_call.data_ptr(), "meta k"), *shape, *strides]
        expected_v = [("map", v.data_ptr(), "meta v"), *shape, *strides]
        assert launched[-1] == (*head, *expected_k, *expected_v, lse, 7, 0.5, 64)
    assert len(through_triton) == 1
    # the direct launch encodes k and v when it is built, then only k's new address
    assert encoded == [k.data_ptr(), v.data_ptr(), k_new.data_ptr()]
    # and keeps no call's tensor: lse's place in its parameter list is empty between calls
    assert not any(isinstance(p, torch.Tensor) for p in plan.direct.params)
    keys = [torch.zeros_like(k) for _ in range(launch.ENCODINGS_KEPT + 5)]  # all alive: distinct addresses
    for k_call in keys:
        plan((k_call, v, lse))
        assert launched[-1][13][1] == k_call.data_ptr()
    assert all(len(slot[-1]) <= launch.ENCODINGS_KEPT for slot in plan.direct.slots if slot[-1] is not None)


def test_launches_stay_on_tritons_wrapper_where_it_is_not_the_expected_one(monkeypatch):
    """``_c_launcher`` reads Triton 3.6's wrapper; a launcher that allocates scratch memory per launch, one whose
    wrapper holds something else, or another driver layout, keeps every launch on Triton's own path."""
    from triton.backends.nvidia import driver

    monkeypatch.setattr(driver, "_BASE_ARGS_FORMAT_LEN", 13, raising=False)
    monkeypatch.setattr(driver, "make_tensordesc_arg", lambda desc, meta: [], raising=False)

    def run(scratch=0, wrapper=None):
        return types.SimpleNamespace(
            global_scratch_size=scratch,
            profile_scratch_size=0,
            launch_cooperative_grid=False,
            launch_pdl=False,
            launch=wrapper or _triton_launch_wrapper(print, {0}, ["meta"]),
        )

    assert launch._c_launcher(run()) is not None
    assert launch._c_launcher(run(scratch=256)) is None
    assert launch._c_launcher(run(wrapper=lambda *a: a)) is None
    assert launch._c_launcher(run(wrapper=_triton_launch_wrapper(print, {0}, [None]))) is None
    assert launch._c_launcher(run(wrapper=print)) == (print, {}, False, False)  # no descriptors: the C function
    monkeypatch.setattr(driver, "_BASE_ARGS_FORMAT_LEN", 16)
    assert launch._c_launcher(run()) is None
