"""How a kernel gets launched: on the inputs' device from any thread, with host tensor descriptors, through its
autotuner or a given config, and, from the second call with the same kind of arguments on, straight through
Triton's compiled launcher.

Why the last part: a forward + backward step launches four kernels, and Triton's Python launch path (binder,
autotuner, descriptor bookkeeping) costs 60-80 us of host time per launch, so on sequences up to ~2k tokens the
GPU waits for Python. ``launch`` remembers, per kernel and per *launch signature* (every property of the
arguments that Triton specialises a compiled kernel on, plus the autotuner's key), the compiled kernel and the
config the first launch used, and later calls hand the new arguments to that kernel's launcher directly.
``launch_gluon`` does the same for the Hopper kernels written in Gluon, which have no autotuner.

A training step makes the same calls, with the same shapes, every step, so the launching functions go one step
further: a ``Plan`` keeps each launch of a call layout (its grid, constexprs and every argument but the call's
tensors) from the first call, and a later call with the same layout only fills its tensors in and launches.
Working all of that out again, and the launch signature over some twenty arguments, was most of a call's
host time.
"""

import ctypes
import dataclasses
import functools
import math
import operator
from typing import Callable, NamedTuple

import torch
import triton
from triton import knobs
from triton.tools.tensor_descriptor import TensorDescriptor

from .._config import switch
from . import INTERPRET, LIBRARY_INTERPRETED

try:  # the Hopper kernels' host descriptors (Gluon, experimental: absent from some Triton builds)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
except ImportError:
    GluonDescriptor = None

# FLASHDOC_AUTOTUNE=0 skips the autotuner and takes the first config that fits the head dim (the one tuning
# found best most often): one compile per shape family instead of several, for wide test sweeps.
AUTOTUNE = switch("FLASHDOC_AUTOTUNE")

# FLASHDOC_LAUNCH_CACHE=0 sends every launch through Triton's own launch path and keeps no plans (for comparison
# and debugging).
LAUNCH_CACHE = switch("FLASHDOC_LAUNCH_CACHE")

# FLASHDOC_DIRECT_LAUNCH=0 keeps cached launches on Triton's Python wrapper rather than its C launcher underneath
# (``DirectLaunch``), for comparison and debugging.
DIRECT_LAUNCH = switch("FLASHDOC_DIRECT_LAUNCH")


# ---------------------------------------------------------------------------------------------------------------
# Configs and host descriptors
# ---------------------------------------------------------------------------------------------------------------


def _tile_shape(desc: TensorDescriptor, meta: dict) -> list:
    """A ``head_tiles`` descriptor's tile under a config's meta-parameters: (1, rows, 1, BLOCK_D)."""
    return [1, meta[desc.block_rows], 1, meta["BLOCK_D"]]


def set_block_shapes(nargs: dict):
    """Give each ``head_tiles`` descriptor among a launch's arguments its tile shape, once the config is known
    (the autotuner calls this before timing each config)."""
    for arg in nargs.values():
        if isinstance(arg, TensorDescriptor):
            arg.block_shape = _tile_shape(arg, nargs)


def tile_config(block_m, block_n, stages, warps, across_heads=False):
    """A tile config; across_heads: the causal launch order (see ``common.program_tile``)."""
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n, "ACROSS_HEADS": across_heads},
        num_stages=stages,
        num_warps=warps,
        pre_hook=set_block_shapes,
    )


# Under the interpreter every program instance runs one after another in numpy, so the cost is the number of
# block operations: large blocks mean fewer of them. Nothing is tuned there; every kernel uses these tiles.
CPU_CONFIG = tile_config(32, 32, 1, 4)


@functools.cache
def _field_defaults(cls) -> dict:
    """A dataclass's optional fields at their defaults (a descriptor's zero padding, ...)."""
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def unchecked_descriptor(cls, **fields):
    """A host tensor descriptor (Triton's ``TensorDescriptor`` or Gluon's, both dataclasses) built without its
    constructor, whose checks (16-byte aligned start and strides, unit last stride) the public functions have
    made true already (``interface._unit_last_stride``): they cost half the time of making one, and a training
    step makes a dozen."""
    desc = cls.__new__(cls)
    desc.__dict__.update(_field_defaults(cls), **fields)
    return desc


def head_tiles(t: torch.Tensor, block_rows: str) -> TensorDescriptor:
    """A tensor descriptor over a whole (batch, seqlen, heads, head_dim) tensor, made once per launch on the
    host, read and written in (1, rows, 1, BLOCK_D) tiles: ``rows`` positions of one (batch, head). Rows past
    seqlen and the columns that pad head_dim read as zeros and are never written. A kernel making its own
    descriptors (``common.head_desc``) pays for writing them to memory in every program, which shows on short
    sequences. block_rows: the meta-parameter ("BLOCK_M" or "BLOCK_N") that gives ``rows``."""
    return unchecked_descriptor(
        TensorDescriptor,
        base=t,
        shape=list(t.shape),
        strides=list(t.stride()),
        block_shape=[1, 16, 1, 16],
        block_rows=block_rows,
    )  # tile shape: set_block_shapes


# ---------------------------------------------------------------------------------------------------------------
# Device, context and scratch memory
# ---------------------------------------------------------------------------------------------------------------


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


@functools.cache
def _libcuda():
    return ctypes.CDLL("libcuda.so.1")


def _bind_primary_context(device_index: int) -> None:
    """Make the device's primary CUDA context current on this thread if no context is. Host tensor descriptors
    are encoded by the driver (cuTensorMapEncodeTiled), which needs one, and a thread that has only used
    PyTorch's caching allocator may have none: a new Python thread fails with "invalid device context".
    Triton's launcher does the same for the launch itself."""
    cuda, ctx = _libcuda(), ctypes.c_void_p()
    cuda.cuCtxGetCurrent(ctypes.byref(ctx))
    if not ctx.value:
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), device_index)
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        cuda.cuCtxSetCurrent(ctx)


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device``, the current device for a bare "cuda"."""
    return device.index if device.index is not None else torch.cuda.current_device()


class on_device:
    """``with on_device(t.device):`` around the launches for tensors on that device, from any thread. Triton
    launches on the *current* CUDA device and allocates in-kernel descriptors' scratch memory there, so the
    tensors' device is made current (as ``torch.cuda.device`` does), its context bound, and the scratch
    allocator set. Nothing to do under the interpreter."""

    def __init__(self, device: torch.device):
        self.index = None
        if not INTERPRET:
            self.index = device_index(device)
        # torch.cuda.device's guard costs more host time than the rest of this; most calls need none
        self.guard = None
        if self.index is not None and self.index != torch.cuda.current_device():
            self.guard = torch.cuda.device(self.index)

    def __enter__(self):
        if self.guard is not None:
            self.guard.__enter__()
        if self.index is not None:
            _bind_primary_context(self.index)
            # in-kernel descriptors (tl.make_tensor_descriptor) live in scratch memory from this allocator
            triton.set_allocator(_scratch)

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.__exit__(*exc)


@functools.cache
def _side_stream(device_index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(device_index)


class forked_stream:
    """A second CUDA stream that starts where the current one is now: launches made ``with`` it run concurrently
    with later launches on the current stream, until ``join()`` makes the current stream wait for them. Runs
    inside ``on_device``; under the interpreter everything stays in order on the CPU."""

    def __init__(self, enabled: bool = True):
        """enabled: False runs everything on the current stream (nothing to overlap, and no host time spent)."""
        self.stream = None if INTERPRET or not enabled else _side_stream(torch.cuda.current_device())
        if self.stream is not None:
            self.origin = torch.cuda.current_stream()
            self.stream.wait_stream(self.origin)
            self.guard = torch.cuda.stream(self.stream)

    def __enter__(self):
        if self.stream is not None:
            self.guard.__enter__()

    def __exit__(self, *exc):
        if self.stream is not None:
            self.guard.__exit__(*exc)

    def join(self):
        if self.stream is not None:
            self.origin.wait_stream(self.stream)


# ---------------------------------------------------------------------------------------------------------------
# Launching
# ---------------------------------------------------------------------------------------------------------------


# --8<-- [start:signature]
def launch_signature(arg):
    """What Triton specialises a compiled kernel on for one argument (triton/_C specialize.cc): a tensor's dtype
    and 16-byte alignment; an int's width, whether it is 1 and whether 16 divides it (for every int, even those
    the kernel does not specialise, so two signatures never share a kernel they should not); a descriptor's
    dtype and tile (its tile follows from the config, which the rest of the key fixes); a Gluon descriptor's
    dtype, tile, shared-memory layout and padding."""
    if type(arg) is int:  # most arguments (strides, lengths, counts): checked first, the cheapest test
        return arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if GluonDescriptor is not None and isinstance(arg, GluonDescriptor):
        return "gluon desc", arg.base.dtype, tuple(arg.block_shape), arg.layout, arg.padding, len(arg.shape)
    if isinstance(arg, TensorDescriptor):
        return "desc", arg.base.dtype, arg.block_rows, len(arg.shape)
    if isinstance(arg, bool) or arg is None:
        return arg
    if isinstance(arg, int):
        return arg == 1, arg % 16 == 0, -(2**31) <= arg < 2**31
    if isinstance(arg, float):
        return float
    raise TypeError(f"no launch signature for a {type(arg).__name__} argument")


# --8<-- [end:signature]


def config_key(config) -> tuple:
    """A ``triton.Config`` as a key: its meta-parameters, warps and stages (() for None, the autotuner's pick)."""
    return () if config is None else (tuple(config.kwargs.items()), config.num_warps, config.num_stages)


def constexpr_defaults(kernel) -> dict:
    """A jitted kernel's constexpr parameters that have defaults: the values a launch that leaves them out gets."""
    return {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}


class _Launcher:
    """A compiled kernel and the config it was compiled for, launched with new arguments of the same
    signature: what Triton's ``JITFunction.run`` does once it has found the kernel, minus the finding."""

    def __init__(self, kernel, compiled, config, args, meta):
        # a constexpr the call left out takes its default, as in Triton's own launch
        constexprs = {**constexpr_defaults(kernel), **meta, **config.kwargs}
        # Triton's launcher takes every parameter in order, constexprs included (it skips them)
        self.tail = tuple(constexprs[name] for name in kernel.arg_names[len(args) :])
        self.config = constexprs
        self.tiles = [(i, _tile_shape(a, constexprs)) for i, a in enumerate(args) if isinstance(a, TensorDescriptor)]
        self.run, self.function, self.packed = compiled.run, compiled.function, compiled.packed_metadata
        self.c_launcher = _c_launcher(compiled.run)

    def __call__(self, grid, args, device):
        """grid: the launch grid, or a function of the constexprs giving it (``launch``'s)."""
        for i, shape in self.tiles:
            args[i].block_shape = shape
        # (launch metadata, enter hook, exit hook): none, as there are no launch hooks (see launch)
        self.run(
            *grid_xyz(grid, self.config),
            _current_stream(device),
            self.function,
            self.packed,
            None,
            None,
            None,
            *args,
            *self.tail,
        )


_launchers: dict = {}


def grid_xyz(grid, config: dict) -> tuple:
    """A launch grid as the launcher takes it, three sizes: ``grid`` is the grid, or a function of the launch's
    constexprs giving it, with one to three sizes."""
    g = grid(config) if callable(grid) else grid
    return g[0], g[1] if len(g) > 1 else 1, g[2] if len(g) > 2 else 1


def _current_stream(device: int):
    return triton.runtime.driver.active.get_current_stream(device)  # the stream Triton's own path launches on


def _c_launcher(run):
    """(Triton's C launch function, {parameter position: its host descriptor's metadata}, whether the launch is
    cooperative, whether it uses programmatic dependent launch) under a compiled kernel's ``run``, or None where
    this Triton's launcher is not the one this was written against.

    Why: Triton's Python wrapper around the C launcher (``wrap_handle_tensordesc``) walks every parameter of every
    launch and encodes each host tensor descriptor again with the driver. A plan's descriptors differ from call
    to call only in the tensor they point at, so ``DirectLaunch`` encodes each one once per address and calls the
    C launcher itself: a training step launches four kernels with twenty descriptors between them, and the
    wrapper's share of the step's host time was about a third. It only reads what the wrapper holds; any
    difference (another Triton, scratch memory to allocate per launch) leaves launches on the wrapper."""
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return None
    if getattr(driver, "_BASE_ARGS_FORMAT_LEN", None) != 13 or not hasattr(driver, "make_tensordesc_arg"):
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None  # the wrapper allocates scratch memory for each launch
    if not hasattr(run, "launch_cooperative_grid") or not hasattr(run, "launch_pdl"):
        return None
    wrapper = getattr(run, "launch", None)
    code = getattr(wrapper, "__code__", None)
    if code is None:  # no descriptor among the parameters: ``launch`` is the C function itself
        return (wrapper, {}, run.launch_cooperative_grid, run.launch_pdl) if callable(wrapper) else None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in wrapper.__closure__ or ())))
    if code.co_name != "inner" or not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= cells.keys():
        return None
    positions = sorted(cells["tensordesc_indices"])
    metas = cells["tensordesc_meta"]
    if len(metas) != len(positions) or any(m is None for m in metas):
        return None  # descriptors passed as their parts carry the tensor itself: nothing to encode once
    return cells["launcher"], dict(zip(positions, metas)), run.launch_cooperative_grid, run.launch_pdl


def no_launch_hooks() -> bool:
    """True when no profiler (e.g. Triton's proton) has registered a launch hook: the cached path calls none."""
    hook = knobs.runtime.launch_enter_hook
    return hook is None or not getattr(hook, "calls", True)


@functools.cache
def _key_positions(kernel, tuned_kernel, n_args: int) -> tuple:
    """(name, position among the launch's n_args positional arguments, or None for a constexpr passed in meta)
    of each of the autotuner's keys."""
    positions = {k: kernel.arg_names.index(k) for k in tuned_kernel.keys}
    return tuple((k, i if i < n_args else None) for k, i in positions.items())


def launch(kernel, tuned_kernel, grid, args, meta, config, default_config):
    """Launch ``kernel`` with ``config`` when one is given, with the CPU tiles under the interpreter, with
    ``default_config`` when autotuning is off, and through its autotuned wrapper otherwise.

    grid: a function of the launch's constexprs (``meta`` and the config's BLOCK_M, BLOCK_N, ...) giving the
    launch grid.
    Runs inside ``on_device``. Returns the launcher that this launch's signature now maps to (None where launches
    are not cached): a caller that has checked a later call's signature is the same may call it directly.
    """
    if INTERPRET and not LIBRARY_INTERPRETED:
        raise RuntimeError(
            "flashdoc's kernels run in Triton's interpreter here (no CUDA GPU), but triton was imported before "
            "flashdoc with the interpreter off, and Triton's own library functions cannot be interpreted that "
            "way. Import flashdoc before triton (and before anything that imports it, such as torch.compile), "
            "or set TRITON_INTERPRET=1 in the environment before starting Python"
        )
    if config is None and INTERPRET:
        config = CPU_CONFIG
    if config is None and not AUTOTUNE:
        config = default_config
    key = None
    if LAUNCH_CACHE and not INTERPRET and no_launch_hooks():
        device = torch.cuda.current_device()
        # the autotuner's choice depends on its key (sequence bucket, head dim, causal; dtypes are in the rest)
        tuned_key = (
            ()
            if config is not None
            else tuple(meta[k] if i is None else args[i] for k, i in _key_positions(kernel, tuned_kernel, len(args)))
        )
        key = (kernel, config_key(config), device, *meta.values(), *tuned_key, *map(launch_signature, args))
        launcher = _launchers.get(key)
        if launcher is not None:
            launcher(grid, args, device)
            return launcher
    if config is None:
        compiled = tuned_kernel[grid](*args, **meta)  # each config's pre_hook sets the descriptors' tile shapes
        config = tuned_kernel.best_config
    else:
        constexprs = {**meta, **config.kwargs}
        set_block_shapes({**dict(enumerate(args)), **constexprs})
        compiled = kernel[grid(constexprs)](
            *args, **constexprs, num_warps=config.num_warps, num_stages=config.num_stages
        )
    if key is not None and compiled is not None:
        launcher = _launchers[key] = _Launcher(kernel, compiled, config, args, meta)
        return launcher
    return None


def launch_gluon(kernel, grid: tuple, args: tuple, constexprs: dict, num_warps: int):
    """Launch a Gluon kernel (the Hopper ones, which take no autotuner and no config) the way ``launch`` launches
    the portable ones: through Triton's own path the first time for a launch signature, then straight to the
    compiled kernel's launcher (a ``_Launcher``, in the same cache). grid: the launch grid itself. Runs inside
    ``on_device``. Returns the launcher, as ``launch`` does."""
    key = None
    if LAUNCH_CACHE and no_launch_hooks():
        device = torch.cuda.current_device()
        key = (kernel, device, num_warps, *constexprs.items(), *map(launch_signature, args))
        launcher = _launchers.get(key)
        if launcher is not None:
            launcher(grid, args, device)
            return launcher
    compiled = kernel[grid](*args, **constexprs, num_warps=num_warps)
    if key is not None:
        launcher = _launchers[key] = _Launcher(
            kernel, compiled, triton.Config({}, num_warps=num_warps), args, constexprs
        )
        return launcher
    return None


# ---------------------------------------------------------------------------------------------------------------
# Plans: a call layout's launches, worked out once
# ---------------------------------------------------------------------------------------------------------------


_plan_caches: list = []


def plan_cache() -> dict:
    """A new dict for a launching function's plans, keyed as ``Plan`` says; ``forget_plans`` empties it."""
    plans = {}
    _plan_caches.append(plans)
    return plans


def forget_plans() -> None:
    """Drop every plan, so that the next calls work their launches out again: for code that changes what plans
    are made from (the config tables, the SM count; tests do)."""
    for plans in _plan_caches:
        plans.clear()


def planned(plans: dict, key, make: Callable) -> "Plan":
    """The plan in ``plans`` under ``key``, made by ``make()`` and kept there if there is none. With
    FLASHDOC_LAUNCH_CACHE=0 nothing is kept: every call works its launches out again."""
    plan = plans.get(key) if LAUNCH_CACHE else None
    if plan is None:
        plan = make()
        if LAUNCH_CACHE:
            plans[key] = plan
    return plan


def layout(t: torch.Tensor) -> tuple:
    """What a plan's arguments depend on in a tensor besides its data: shape, strides and dtype."""
    return t.shape, t.stride(), t.dtype


def aligned(t: torch.Tensor) -> bool:
    """Whether t starts on a 16-byte boundary, which Triton specialises a pointer argument on."""
    return t.data_ptr() % 16 == 0


def descriptor_ready(t: torch.Tensor) -> bool:
    """Whether a tensor descriptor (TMA on Hopper) can read t as it lies: unit last stride, a 16-byte aligned
    start and 16-byte multiples for the other strides."""
    strides = t.stride()
    # (16 divides every stride's bytes when it divides their gcd's: element sizes are powers of two up to 8)
    return strides[-1] == 1 and aligned(t) and math.gcd(*strides[:-1]) * t.element_size() % 16 == 0


def distinct(objects: tuple) -> tuple:
    """``objects`` with each repeat of a tensor replaced by a view of it. A plan tells its arguments' sources apart
    by identity, and a call that passes one tensor twice (as k and v) must not make later calls, which may not,
    read it twice; and torch.compile cannot trace an autograd.Function given one tensor twice (self-attention's
    ``flash_attn_func(x, x, x)`` or ``cu_seqlens`` for queries and keys alike), where a view is a tensor of its
    own whose gradient autograd adds to its base's."""
    unique = []
    for obj in objects:
        # `is` in a plain loop, not id(): torch.compile (torch 2.11) cannot take the id of a tensor made inside
        # the traced code
        if isinstance(obj, torch.Tensor):
            for earlier in unique:
                if obj is earlier:
                    obj = obj.view(obj.shape)
                    break
        unique.append(obj)
    return tuple(unique)


class PerCall(NamedTuple):
    """A plan's argument that each call makes anew from its own tensors: ``make(objects)``, from the call's
    object at ``source``: that object itself, or (``over``) a descriptor over it."""

    make: Callable
    source: int
    over: bool = False


def _descriptor_over(i: int, desc) -> PerCall:
    """``desc``'s descriptor (Triton's or Gluon's: shape, strides, tile, layout) over the call's i-th object."""
    cls, fields = type(desc), {name: value for name, value in desc.__dict__.items() if name != "base"}

    def make(objects):
        d = cls.__new__(cls)
        d.__dict__.update(fields)
        d.base = objects[i]
        return d

    return PerCall(make, i, over=True)


def _hole(arg, objects: tuple):
    """``arg`` of a launch as a plan keeps it: the call's i-th object (a tensor, or a descriptor the caller builds
    per call) becomes a hole for the next call's i-th object, a descriptor over one of them a descriptor over the
    next call's; anything else is the same for every call with the layout."""
    for i, obj in enumerate(objects):
        if arg is obj:
            return PerCall(operator.itemgetter(i), i)
    if isinstance(arg, TensorDescriptor) or (GluonDescriptor is not None and isinstance(arg, GluonDescriptor)):
        for i, obj in enumerate(objects):
            if arg.base is obj:
                return _descriptor_over(i, arg)
    if isinstance(arg, torch.Tensor) or hasattr(arg, "base"):
        # a tensor that is none of the call's objects would be read again by every later call
        raise ValueError(f"a plan cannot remake a launch argument from the call's objects: {type(arg).__name__}")
    return arg


class Plan:
    """One launch of a call layout, worked out by the call that first had it. ``plan(objects)`` launches it again
    on a call's objects (its tensors, and any descriptor it builds per call), given in the order of the first
    call's: through Triton's own path until that hands back a compiled launcher, then straight through the
    launcher. Whoever keeps a plan keys it on everything its arguments and the launcher's signature depend on:
    the objects' ``layout``s, the device, the options, and the alignment (``aligned``) of the tensors passed as
    they are.

    first: args -> the launcher that ``launch`` or ``launch_gluon`` cached (None where they cache none).
    grid: the grid, or ``launch``'s function of the constexprs. args: the first call's arguments, whose parts
    made from its objects (``_hole``) become ``PerCall``s."""

    def __init__(self, first: Callable, grid, args: tuple, objects: tuple):
        self.first, self.grid = first, grid
        held = [_hole(a, objects) for a in args]
        self.per_call = tuple((i, a) for i, a in enumerate(held) if type(a) is PerCall)
        self.args = held  # the constants in place; each call copies it and fills in the rest
        self.device = None if INTERPRET else torch.cuda.current_device()
        self.launcher = None
        self.direct = None  # a DirectLaunch, once the launcher is known (False where there can be none)

    def arguments(self, objects: tuple) -> list:
        """The launch's arguments for a call with these objects."""
        args = self.args.copy()
        for i, held in self.per_call:
            args[i] = held.make(objects)
        return args

    def __call__(self, objects: tuple) -> None:
        if self.launcher is not None and LAUNCH_CACHE and no_launch_hooks():
            if self.direct is None:
                self.direct = (DIRECT_LAUNCH and DirectLaunch.of(self, objects)) or False
            if self.direct:
                self.direct(objects)
            else:
                self.launcher(self.grid, self.arguments(objects), self.device)
        else:
            self.launcher = self.first(self.arguments(objects))


# A descriptor's encodings kept per address, at most this many per launch argument: a model's layers each pass
# their own tensors, which the caching allocator hands out at the same addresses step after step.
ENCODINGS_KEPT = 64


class DirectLaunch:
    """A plan's launch straight through Triton's C launcher (``_c_launcher``): the parameter list, host
    descriptors expanded as Triton's wrapper expands them, is built once; a call writes its own tensors into it,
    and each descriptor's encoding for the address the call's tensor has, made by Triton's own function the first
    time that address comes (the rest of a plan's descriptor, shape, strides and tile, is the same every call)."""

    def __init__(self, plan, c_launcher, objects: tuple):
        from triton.backends.nvidia.driver import make_tensordesc_arg

        self.encode = make_tensordesc_arg
        self.c_launch, metas, cooperative, pdl = c_launcher
        launcher = plan.launcher
        self.grid, self.config, self.device = plan.grid, launcher.config, plan.device
        self.head = (launcher.function, cooperative, pdl, None, None, launcher.packed, None, None, None)
        args = plan.arguments(objects)
        for i, shape in launcher.tiles:
            args[i].block_shape = shape
        held = dict(plan.per_call)
        self.params, self.slots = [], []
        for i, arg in enumerate((*args, *launcher.tail)):
            start = len(self.params)
            if i in metas:
                self.params.extend(self.encode(arg, metas[i]))
            else:
                self.params.append(arg)
            if i in held:  # (where it goes, the object it comes from, how to make its descriptor, its encodings)
                h = held[i]
                describe = h.make if h.over else None
                encodings = None
                if i in metas:
                    encodings = {self.address(objects[h.source], describe): self.params[start:]}
                else:  # each call puts its own tensor here: the template must not keep this call's alive
                    self.params[start] = None
                self.slots.append((start, len(self.params), h.source, describe, metas.get(i), encodings))

    @staticmethod
    def address(obj, describe):
        """What a descriptor's encoding depends on, given the rest of the plan: the address of the tensor it is
        over (``describe``: a plan's descriptor over the call's tensor), or, for a descriptor the call made
        itself, its tensor's address, shape, strides and padding."""
        if describe is not None:
            return obj.data_ptr()
        return (obj.base.data_ptr(), *obj.shape, *obj.strides, obj.padding)

    @classmethod
    def of(cls, plan, objects: tuple):
        c_launcher = plan.launcher.c_launcher
        return None if c_launcher is None else cls(plan, c_launcher, objects)

    def __call__(self, objects: tuple) -> None:
        params = self.params.copy()
        for start, end, source, describe, meta, encodings in self.slots:
            obj = objects[source]
            if encodings is None:  # a tensor
                params[start] = obj
                continue
            key = self.address(obj, describe)
            encoded = encodings.get(key)
            if encoded is None:
                if len(encodings) >= ENCODINGS_KEPT:
                    encodings.clear()
                encoded = encodings[key] = self.encode(describe(objects) if describe else obj, meta)
            params[start:end] = encoded
        self.c_launch(*grid_xyz(self.grid, self.config), _current_stream(self.device), *self.head, *params)


def gluon_plan(kernel, grid: tuple, args: tuple, constexprs: dict, num_warps: int, objects: tuple) -> Plan:
    """The ``Plan`` of a ``launch_gluon`` launch with these arguments, whose per-call parts are ``objects``."""
    return Plan(lambda a: launch_gluon(kernel, grid, a, constexprs, num_warps), grid, args, objects)


def triton_plan(kernel, tuned_kernel, grid, args, meta, config, default_config, objects: tuple) -> Plan:
    """The ``Plan`` of a ``launch`` launch with these arguments, whose per-call parts are ``objects``."""
    return Plan(lambda a: launch(kernel, tuned_kernel, grid, a, meta, config, default_config), grid, args, objects)
