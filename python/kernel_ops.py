"""autokernel's kernels as PyTorch operators, and a launcher cached per shape.

A kept ``kernel.py`` (``KERNEL_KIND``, ``CONFIG``, ``TUNABLES``, ``kernel_fn(**inputs)``;
docs/kernels.md) becomes the custom operator ``torch.ops.autokernel.<name>`` through
:func:`register`, so that a model calling it runs in eager mode, under ``torch.compile``
(no graph break) and under CUDA graph capture. docs/deploy.md explains the design; in
short:

* **custom_op, not triton_op.** ``torch.library.triton_op`` needs every launch in the op's
  body to go through ``wrap_triton`` and the body to be traceable with fake tensors;
  ``kernel_fn`` is arbitrary Python that launches with ``kernel[grid](...)`` and may read
  ``data_ptr()`` (the matmul starter does, to choose its TMA path), launch Gluon kernels or
  build host-side TMA descriptors. So the operator is a ``torch.library.custom_op``: opaque
  to the compiler (no fusion across it; inductor calls it as an extern kernel), with a fake
  implementation, so a compiled graph holds it without a break.
* **By device.** On CUDA the operator runs the kernel through a :class:`Launcher`; on the
  CPU it runs the kind's float32 reference from the catalogue (``catalogue.py``'s registry,
  imported, not copied), cast to the output dtype, unless :func:`force_kernel` asks for the
  Triton kernel (Triton's interpreter, ``TRITON_INTERPRET=1``), so that tests prove the
  kernel itself.
* **Fake implementation** from the catalogue entry of the kind (``KindSpec`` as JSON): the
  output dims are dim names bound from the inputs' sizes (SymInts under dynamic shapes),
  its dtype the inputs' or a fixed one (cross-entropy's float32 loss).
* **Cached launcher.** :class:`Launcher` runs ``kernel_fn`` once per key (shapes,
  strides, dtypes, device and address mod 16 of every input) while recording what it did:
  the tensors it allocated and the Triton launches it made (the compiled kernel, its grid,
  its arguments with each tensor traced back to an input or an allocation). Later calls at
  that key replay the record: fresh allocations and the compiled kernels launched with the
  new pointers, without ``kernel_fn``'s Python, Triton's argument binding, specialisation
  or cache lookup. A record is kept only if ``kernel_fn`` did nothing else on tensors
  (any other torch op, ``.item()``, a copy) and a replay on copies of the inputs at other
  addresses reproduces its output bit for bit; otherwise that key calls ``kernel_fn``
  (:attr:`Launcher.reasons` says why).

What the launch path guarantees for CUDA graph capture, once a key is recorded (warm up at
each shape before capturing, as for any Triton kernel): no host synchronisation, no
allocation but ``torch.empty_strided`` through the caching allocator (the graph's pool
while capturing), no host control flow that reads tensor data, launches on the current
stream.

Files beside this one: ``catalogue.py`` (the references) and ``catalogue.json`` (the kinds'
specs, ``Catalogue::to_json``), both written with it by ``autokernel`` (the workspace's
``.autokernel/scripts``). Inside the bench worker the worker's own ``catalogue`` module is
used.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import inspect
import os
import re
import sys
import threading
from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

NAMESPACE = "autokernel"
"""The operators' namespace: ``torch.ops.autokernel.<name>``."""

MAX_KEYS = 256
"""Keys one :class:`Launcher` keeps at most (oldest dropped first): a workload whose shapes
never repeat would otherwise grow the cache without bound."""

MAX_RECORD_ATTEMPTS = 2
"""Calls at one key that may try to record before the key settles on calling ``kernel_fn``
(the first call may compile or autotune; the second records a steady state)."""

_HERE = os.path.dirname(os.path.abspath(__file__))
_force = threading.local()
_FORCE_ENV = "AUTOKERNEL_FORCE_KERNEL"


# ---------------------------------------------------------------------------------------
# The catalogue: references and kind specs, never copied here
# ---------------------------------------------------------------------------------------

def catalogue_module():
    """The catalogue's Python side (``catalogue.py``), with the kinds' specs loaded.

    The worker's own ``catalogue`` module when one is imported (it holds the worker's
    catalogue, extension kinds included); otherwise ``catalogue.py`` beside this file,
    loaded once, with ``catalogue.json`` beside it (or the file named by
    ``$AUTOKERNEL_CATALOGUE_JSON``).

    Raises FileNotFoundError naming the path when neither is there.
    """
    mod = sys.modules.get("catalogue")
    if mod is None or not hasattr(mod, "REGISTRY"):
        mod = sys.modules.get("_autokernel_catalogue")
    if mod is None:
        path = os.path.join(_HERE, "catalogue.py")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no catalogue.py beside kernel_ops.py (tried {path})")
        spec = importlib.util.spec_from_file_location("_autokernel_catalogue", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_autokernel_catalogue"] = mod
        spec.loader.exec_module(mod)
    try:
        next(iter(mod.REGISTRY))
        mod.spec(next(iter(mod.REGISTRY)))
    except (ValueError, StopIteration):
        json_path = os.environ.get("AUTOKERNEL_CATALOGUE_JSON") or os.path.join(_HERE, "catalogue.json")
        if not os.path.exists(json_path):
            raise FileNotFoundError(f"no catalogue.json for the kinds' specs (tried {json_path})") from None
        with open(json_path, encoding="utf-8") as f:
            mod.load_catalogue(f.read())
    return mod


def load_kernel(path: str, module_name: Optional[str] = None):
    """Imports the ``kernel.py`` at `path` as a module of its own (Triton reads a kernel's
    source from its file, so it must be a real file). Raises ValueError when it defines no
    ``kernel_fn`` or no ``KERNEL_KIND``."""
    name = module_name or "_ak_op_" + re.sub(r"\W", "_", os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "kernel_fn", None)) or not isinstance(getattr(module, "KERNEL_KIND", None), str):
        raise ValueError(f"{path} defines no kernel_fn or no KERNEL_KIND")
    return module


def bind(kernel_fn: Callable, kind: str, params: Optional[dict] = None) -> Callable:
    """`kernel_fn` with the target's `params` bound as keywords: those in its signature, or
    all of them when it takes ``**kwargs``. A parameter it lacks is left out when it is at
    the kind's default (a kernel written before its kind took parameters computes the
    default) and is a ValueError otherwise, naming it: the kernel cannot compute it."""
    params = dict(params or {})
    if not params:
        return kernel_fn
    sig = inspect.signature(kernel_fn).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in sig.values())
    defaults = catalogue_module().param_defaults(kind)
    bound = {}
    for name, value in params.items():
        if takes_all or name in sig:
            bound[name] = value
        elif value != defaults.get(name):
            raise ValueError(f"kernel_fn takes no `{name}` keyword and the model needs {name}={value!r}")
    return functools.partial(kernel_fn, **bound) if bound else kernel_fn


# ---------------------------------------------------------------------------------------
# The switch: the Triton kernel on the CPU
# ---------------------------------------------------------------------------------------

def kernel_forced() -> bool:
    """Whether the operators run the Triton kernel on the CPU (Triton's interpreter) rather
    than the reference: inside :func:`force_kernel`, or with ``$AUTOKERNEL_FORCE_KERNEL=1``."""
    forced = getattr(_force, "depth", 0)
    return forced > 0 or os.environ.get(_FORCE_ENV) == "1"


@contextlib.contextmanager
def force_kernel():
    """Within this block (this thread), the operators run the Triton kernel on CPU tensors
    too, under Triton's interpreter (``TRITON_INTERPRET=1`` must be set before triton is
    imported; the operator raises RuntimeError otherwise). For tests: it proves the kernel,
    not the reference, gives the output."""
    _force.depth = getattr(_force, "depth", 0) + 1
    try:
        yield
    finally:
        _force.depth -= 1


# ---------------------------------------------------------------------------------------
# The cached launcher
# ---------------------------------------------------------------------------------------

_aten = torch.ops.aten
# Allocations whose contents are undefined: replayed as torch.empty_strided.
_EMPTY = {_aten.empty.memory_format, _aten.empty_strided.default, _aten.empty_like.default,
          _aten.new_empty.default, _aten.new_empty_strided.default}
# Allocations filled with a constant: op -> index of the fill value in args (None: 0 or 1).
_FILLED = {_aten.zeros.default: 0.0, _aten.zeros_like.default: 0.0, _aten.new_zeros.default: 0.0,
           _aten.ones.default: 1.0, _aten.ones_like.default: 1.0, _aten.new_ones.default: 1.0}
_FULL = {_aten.full.default: 1, _aten.full_like.default: 1, _aten.new_full.default: 2}
_FILL_INPLACE = {_aten.zero_.default: None, _aten.fill_.Scalar: 1}


class _Pointer:
    """A device address for Triton's launcher, which takes any object with ``data_ptr()``
    (a TMA descriptor's base at an offset from a tensor's start)."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def _view_at(source: torch.Tensor, byte_offset: int, size, stride, dtype) -> torch.Tensor:
    """A tensor of `size`, `stride`, `dtype` starting `byte_offset` bytes after `source`'s
    first element, in `source`'s storage (what Triton's interpreter needs: a tensor)."""
    storage = source.untyped_storage()
    start = source.data_ptr() + byte_offset - storage.data_ptr()
    itemsize = torch.empty((), dtype=dtype).element_size()
    return torch.empty((), dtype=dtype, device=source.device).set_(storage, start // itemsize, size, stride)


class _Recorder(TorchDispatchMode):
    """What one ``kernel_fn`` call does: allocations, fills and Triton launches, in order,
    each tensor traced back to an input or an allocation (a *slot*). Any other torch op
    makes the call not replayable (`bad` says which)."""

    def __init__(self, inputs):
        super().__init__()
        self.thread = threading.get_ident()
        self.inputs = list(inputs)
        self.slots = list(inputs)  # slot index -> the tensor at recording
        self.source = {id(t): i for i, t in enumerate(inputs)}  # id(tensor) -> slot
        self.events = []  # ("alloc", slot, size, stride, dtype, device, fill) | ("fill", slot, v) | ("launch", _Launch)
        self.keep = []  # every tensor seen, alive until the end (ids stay unique)
        self.bad = None
        self.benchmarked = False
        self.suspended = 0

    def _mark_bad(self, why):
        if self.bad is None:
            self.bad = why

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.suspended or threading.get_ident() != self.thread:
            return out
        if func in _EMPTY or func in _FILLED or func in _FULL:
            fill = _FILLED.get(func)
            if func in _FULL:
                fill = args[_FULL[func]]
            self._new_slot(out, fill)
        elif func in _FILL_INPLACE:
            slot = self.source.get(id(args[0]))
            if slot is None or slot < len(self.inputs) or not self._same(args[0], self.slots[slot]):
                self._mark_bad(f"kernel_fn ran {func} on a tensor that is not one of its own whole allocations")
            else:
                self.events.append(("fill", slot, 0.0 if func is _aten.zero_.default else args[1]))
        elif getattr(func, "is_view", False):
            slot = self.source.get(id(args[0])) if args and isinstance(args[0], torch.Tensor) else None
            for t in (out if isinstance(out, (list, tuple)) else [out]):
                if isinstance(t, torch.Tensor) and slot is not None:
                    self.keep.append(t)
                    self.source[id(t)] = slot
        else:
            self._mark_bad(f"kernel_fn ran {func} on the host (only allocations, views and Triton launches replay)")
        return out

    def _new_slot(self, t, fill):
        self.keep.append(t)
        slot = len(self.slots)
        self.slots.append(t)
        self.source[id(t)] = slot
        self.events.append(("alloc", slot, tuple(t.shape), tuple(t.stride()), t.dtype, t.device, fill))

    @staticmethod
    def _same(t, s):
        return t.data_ptr() == s.data_ptr() and t.shape == s.shape and t.stride() == s.stride() and t.dtype == s.dtype

    def template(self, value, interpreted):
        """(value, getter): getter(env) rebuilds `value` for the tensors of a new call
        (env: slot -> tensor), or is None when `value` does not depend on them."""
        if isinstance(value, torch.Tensor):
            slot = self.source.get(id(value))
            if slot is None:
                # not derived from an input or an allocation: a tensor kernel.py holds itself
                # (a table); the validation replay on copied inputs catches any other case
                return value, None
            src = self.slots[slot]
            if self._same(value, src):
                return value, lambda env, s=slot: env[s]
            off = value.data_ptr() - src.data_ptr()
            if interpreted:
                size, stride, dtype = tuple(value.shape), tuple(value.stride()), value.dtype
                return value, lambda env, s=slot: _view_at(env[s], off, size, stride, dtype)
            return value, lambda env, s=slot: env[s].data_ptr() + off
        if isinstance(value, (tuple, list)):
            parts = [self.template(v, interpreted) for v in value]
            if all(g is None for _, g in parts):
                return value, None
            kind = type(value)
            return value, lambda env: kind(v if g is None else g(env) for v, g in parts)
        base = getattr(value, "base", None)
        if isinstance(base, torch.Tensor) and hasattr(value, "block_shape"):  # a host TMA descriptor
            _, get_base = self.template(base, interpreted)
            if get_base is None:
                return value, None

            # a copy without the recorded call's tensor, which it must not keep alive
            proto = copy.copy(value)
            proto.base = None
            state = getattr(proto, "__dict__", None)
            cls, new_object = type(proto), object.__new__

            def rebuilt(env, desc=proto, get=get_base):
                b = get(env)
                if state is None:  # a descriptor class with __slots__
                    new = copy.copy(desc)
                else:
                    # its fields copied straight: copy.copy goes through pickle's protocol,
                    # host time per descriptor per call (docs/benchmarks.md, host time)
                    new = new_object(cls)
                    new.__dict__.update(state)
                new.base = _Pointer(b) if isinstance(b, int) else b
                return new
            return value, rebuilt
        return value, None


class _Launch:
    """One recorded Triton launch, replayed with a new call's tensors."""

    def __init__(self, rec, fn, args, kwargs, grid, compiled):
        interpreted = compiled is None
        self.fn, self.grid, self.compiled = fn, grid, compiled
        self.args, self.dyn = [], []
        # a value rebuilt per call is not kept: holding the recorded call's tensors would
        # keep them alive (inside a CUDA graph pool, torch refuses untracked live tensors)
        for i, a in enumerate(args):
            v, get = rec.template(a, interpreted)
            self.args.append(v if get is None else None)
            if get is not None:
                self.dyn.append((i, get))
        self.kwargs, self.kwdyn = {}, []
        for k, a in kwargs.items():
            v, get = rec.template(a, interpreted)
            self.kwargs[k] = v if get is None else None
            if get is not None:
                self.kwdyn.append((k, get))
        if compiled is not None:
            from triton.runtime import driver
            from triton import knobs

            self.knobs = knobs.runtime
            self.device = driver.active.get_current_device()
            self.get_stream = driver.active.get_current_stream
            self.run = compiled.run
            self.function = compiled.function
            self.packed = compiled.packed_metadata
            g = tuple(grid) + (1, 1)
            self.g0, self.g1, self.g2 = g[0], g[1], g[2]

    def __call__(self, env):
        args = list(self.args)
        for i, get in self.dyn:
            args[i] = get(env)
        if self.compiled is None:  # Triton's interpreter: it takes the launch as given
            kwargs = dict(self.kwargs)
            for k, get in self.kwdyn:
                kwargs[k] = get(env)
            self.fn.run(*args, grid=self.grid, warmup=False, **kwargs)
            return
        stream = self.get_stream(self.device)
        hooks = self.knobs
        enter, leave = _active_hook(hooks.launch_enter_hook), _active_hook(hooks.launch_exit_hook)
        meta = None if enter is None and leave is None else \
            self.compiled.launch_metadata((self.g0, self.g1, self.g2), stream, *args)
        self.run(self.g0, self.g1, self.g2, stream, self.function, self.packed, meta, enter, leave, *args)


def _active_hook(hook):
    """`hook`, or None when it would do nothing: Triton 3.6's launch hooks are chains
    (``knobs.HookChain``) that are never None, even empty, and a launch that has hooks also
    builds their metadata; skipping both for an empty chain saves host time per launch
    (docs/benchmarks.md, host time), while a profiler's added hook still runs."""
    if hook is not None and not getattr(hook, "calls", True):
        return None
    return hook


class _Plan:
    """A recorded call: allocations, fills and launches in their order, and where the
    output lies."""

    __slots__ = ("n_inputs", "events", "out")

    def __init__(self, n_inputs, events, out):
        self.n_inputs, self.events, self.out = n_inputs, events, out

    def replay(self, inputs, poison=False):
        """Runs the record on `inputs` (in the kind's order); returns the output. `poison`
        fills each uninitialised allocation with NaN (-1 for integers) first, so that a
        check sees any element no recorded launch wrote."""
        env = list(inputs)
        for ev in self.events:
            tag = ev[0]
            if tag == "launch":
                ev[1](env)
            elif tag == "alloc":
                _, _, size, stride, dtype, device, fill = ev
                t = torch.empty_strided(size, stride, dtype=dtype, device=device)
                if fill is None and poison:
                    fill = float("nan") if dtype.is_floating_point else -1
                if fill is not None:
                    t.fill_(fill)
                env.append(t)
            else:  # fill
                env[ev[1]].fill_(ev[2])
        return self.out(env)


_DIRECT = object()
_patch_lock = threading.RLock()


@contextlib.contextmanager
def _intercept_launches(rec: _Recorder):
    """Routes Triton launches of the recording thread into `rec` (JITFunction.run, and the
    interpreter's InterpretedFunction.run), and marks autotuner benchmarking, whose launches
    are not the call's. Restored on exit."""
    import triton.runtime.jit as jit

    patched = []

    def wrap(cls, interpreted):
        original = cls.run

        def run(fn, *args, grid, warmup, **kwargs):
            if warmup or rec.suspended or threading.get_ident() != rec.thread:
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            rec.suspended += 1
            try:
                kernel = original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                rec.suspended -= 1
            if interpreted:
                rec.events.append(("launch", _Launch(rec, fn, args, kwargs, grid, None)))
            else:
                rec.events.append(("launch", _record_compiled(rec, fn, args, kwargs, grid, kernel)))
            return kernel

        cls.run = run
        patched.append((cls, "run", original))

    def wrap_bench(cls):
        original = cls._bench

        def _bench(self, *args, **kwargs):
            rec.benchmarked = True
            rec.suspended += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                rec.suspended -= 1

        cls._bench = _bench
        patched.append((cls, "_bench", original))

    with _patch_lock:
        wrap(jit.JITFunction, False)
        try:
            from triton.runtime.interpreter import InterpretedFunction
            wrap(InterpretedFunction, True)
        except ImportError:
            pass
        try:
            from triton.runtime.autotuner import Autotuner
            wrap_bench(Autotuner)
        except (ImportError, AttributeError):
            pass
        try:
            yield
        finally:
            for cls, attr, original in reversed(patched):
                setattr(cls, attr, original)


def _record_compiled(rec, fn, args, kwargs, grid, kernel):
    """A compiled launch: the same binding JITFunction.run made (all parameters, constexprs
    included, in order: what the compiled launcher takes) and the grid it resolved."""
    from triton import knobs
    from triton.runtime import driver

    kw = dict(kwargs)
    kw["debug"] = kw.get("debug", fn.debug) or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    binder = fn.device_caches[driver.active.get_current_device()][4]
    bound_args, _, _ = binder(*args, **kw)
    if callable(grid):
        grid = grid(bound_args)
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    return _Launch(rec, fn, list(bound_args.values()), {}, tuple(grid), kernel)


def _copy_at_same_alignment(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its sizes, strides, dtype and address mod 16, at another address."""
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    lead = (t.data_ptr() % 16) // t.element_size()
    buf = torch.empty(extent + lead + 16, dtype=t.dtype, device=t.device)
    skip = (-buf.data_ptr() % 16) // t.element_size()
    view = buf.as_strided(t.shape, t.stride(), skip + lead)
    if 0 in t.stride():  # an expanded tensor: write the distinct elements once
        dense = [slice(None) if st else slice(0, 1) for st in t.stride()]
        view[tuple(dense)].copy_(t[tuple(dense)])
    else:
        view.copy_(t)
    return view


def _bitwise_equal(a, b) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.contiguous().view(bits), b.contiguous().view(bits)
    return bool(torch.equal(a, b))


class Launcher:
    """``kernel_fn`` cached per key: called as ``launcher(*tensors)`` with the kind's
    inputs in catalogue order, it returns what ``kernel_fn(**inputs)`` returns.

    The key of a call is each input's shape, strides, dtype, device and address mod 16
    (Triton specialises pointers on 16-byte alignment; kernel.py may choose a path by it).
    The first call at a key runs ``kernel_fn`` while recording it (module docstring); the
    record is checked by a replay on copies of the inputs at other addresses, which must
    give the same output bit for bit. Later calls at the key replay it. A key whose
    recording fails (another torch op ran, the replay differed) is retried once, then calls
    ``kernel_fn`` for good; :attr:`reasons` holds why.

    What a replay assumes of ``kernel_fn``, beyond the checks: that it is a function of the
    key and of ``CONFIG`` (frozen once the kernel is kept), not of the inputs' values on the
    host or of state that changes between calls (a counter, a seed passed as an argument).

    Counters (for tests and benchmarks): :attr:`records` (``kernel_fn`` calls that recorded),
    :attr:`replays`, :attr:`direct` (calls at keys that call ``kernel_fn``).
    """

    def __init__(self, kernel_fn: Callable, input_names):
        self.kernel_fn = kernel_fn
        self.input_names = tuple(input_names)
        self.records = 0
        self.replays = 0
        self.direct = 0
        self.reasons: dict = {}
        self._plans: dict = {}
        self._attempts: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(tensors) -> tuple:
        """The cache key of a call's input tensors."""
        return tuple((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15) for t in tensors)

    def __call__(self, *tensors):
        key = tuple((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15) for t in tensors)
        plan = self._plans.get(key)
        if plan is not None:
            if plan is _DIRECT:
                self.direct += 1
                return self.kernel_fn(**dict(zip(self.input_names, tensors)))
            self.replays += 1
            return plan.replay(tensors)
        if tensors and tensors[0].is_cuda and torch.cuda.is_current_stream_capturing():
            # recording checks its replay on the host (a synchronisation): not while a CUDA
            # graph is being captured; warm up each shape before capturing
            return self.kernel_fn(**dict(zip(self.input_names, tensors)))
        return self._record(key, tensors)

    def _record(self, key, tensors):
        rec = _Recorder(tensors)
        with _intercept_launches(rec), rec:
            out = self.kernel_fn(**dict(zip(self.input_names, tensors)))
        self.records += 1
        plan, why = self._plan_of(rec, out, tensors)
        with self._lock:
            if plan is not None:
                self._plans[key] = plan
                self.reasons.pop(key, None)
            elif why is not None:
                n = self._attempts[key] = self._attempts.get(key, 0) + 1
                self.reasons[key] = why
                if n >= MAX_RECORD_ATTEMPTS:
                    self._plans[key] = _DIRECT
            while len(self._plans) > MAX_KEYS:
                del self._plans[next(iter(self._plans))]
        return out

    def _plan_of(self, rec, out, tensors):
        """(plan, None), or (None, why not); (None, None) to record again at the next call
        without counting an attempt (an autotuner benchmarked: the next call is steady)."""
        if rec.benchmarked:
            return None, None
        if rec.bad:
            return None, rec.bad
        if not isinstance(out, torch.Tensor):
            return None, f"kernel_fn returned {type(out).__name__}, not a tensor"
        if not any(ev[0] == "launch" for ev in rec.events):
            return None, "kernel_fn launched no Triton kernel"
        _, get_out = rec.template(out, True)
        if get_out is None:
            return None, "kernel_fn returned a tensor that is neither an input nor one of its allocations"
        plan = _Plan(len(tensors), rec.events, get_out)
        try:
            copies = [_copy_at_same_alignment(t) for t in tensors]
            again = plan.replay(copies, poison=True)
        except Exception as e:  # noqa: BLE001 - a replay that cannot run is not kept
            return None, f"the replay raised {type(e).__name__}: {e}"
        if not _bitwise_equal(again, out):
            return None, "the replay on copies of the inputs gave another output than kernel_fn"
        return plan, None


# ---------------------------------------------------------------------------------------
# The operator
# ---------------------------------------------------------------------------------------

def _parse_dim(expr: str):
    """(dim name, divisor) of a catalogue dim expression (``cols``, ``head_dim/2``), or
    (None, n) for a constant ``n`` (the fused norms' stacked output ``[2, rows, cols]``)."""
    if expr.strip().isdigit():
        return None, int(expr)
    name, _, div = expr.partition("/")
    return name.strip(), int(div) if div else 1


class KernelOp:
    """One ``kernel.py`` registered as ``torch.ops.autokernel.<name>`` (:func:`register`).

    Attributes: ``name``, ``kind``, ``input_names`` (the catalogue's order), ``op`` (the
    ``torch.library.custom_op`` definition; ``op(*tensors)`` calls the operator),
    ``overload`` (``torch.ops.autokernel.<name>.default``), ``launcher`` (the
    :class:`Launcher` its CUDA path, and the forced CPU path, run), ``module`` (the kernel).
    Calling a ``KernelOp`` with the kind's inputs, by keyword or in order, calls the
    operator; in plain eager calls (:func:`_eager_plain`: no torch.compile tracing, no
    torch function or dispatch mode active, plain tensors on one device, no gradient
    needed) it runs the implementation the dispatcher would pick for the device without
    going through the dispatcher, and counts them in ``direct_calls``. ``overload(...)``
    always goes through the dispatcher.
    """

    def __init__(self, name: str, module, spec: dict, catalogue, params: Optional[dict] = None):
        self.name, self.module, self.kind = name, module, spec["name"]
        # the target's parameters over the kind's defaults; they pick the inputs present (an
        # operator has one schema: flash_attention's `mask` exists only with has_mask=true)
        self.params = catalogue.resolve_params(self.kind, params) or {}
        self.inputs = [i for i in spec["inputs"] if not i.get("only_if") or self.params.get(i["only_if"]) is True]
        self.input_names = tuple(i["name"] for i in self.inputs)
        self._output = spec["output"]
        self._catalogue = catalogue
        self.launcher = Launcher(bind(module.kernel_fn, self.kind, params), self.input_names)
        schema = "(" + ", ".join(f"Tensor {n}" for n in self.input_names) + ") -> Tensor"
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", self._run_kernel, mutates_args=(), schema=schema)
        op.register_kernel("cpu")(self._run_cpu)
        op.register_fake(self._fake)
        self.op = op
        self.overload = getattr(getattr(torch.ops, NAMESPACE), name).default
        self.direct_calls = 0

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = args + tuple(kwargs[n] for n in self.input_names[len(args):])
        if _eager_plain(args):
            # what the dispatcher would run, without the dispatcher's host time, which is
            # of the launcher's own order (docs/benchmarks.md)
            self.direct_calls += 1
            return self._run_kernel(*args) if args[0].is_cuda else self._run_cpu(*args)
        return self.overload(*args)

    def _out_dtype(self, args):
        kind = self._output["dtype"]
        if kind == "float32":
            return torch.float32
        if kind == "int64":
            return torch.int64
        for t, spec in zip(args, self.inputs):
            if spec["dtype"] == "judged":
                return t.dtype
        return args[0].dtype

    def _run_kernel(self, *args):
        return self.launcher(*args)

    def _run_cpu(self, *args):
        if kernel_forced():
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise RuntimeError(f"{NAMESPACE}::{self.name}: the Triton kernel runs on the CPU only under "
                                   "Triton's interpreter; set TRITON_INTERPRET=1 before triton is imported")
            self._catalogue.patch_triton_interpreter()
            return self.launcher(*args)
        out = self._catalogue.reference(self.kind, dict(zip(self.input_names, args)), params=self.params or None)
        out = out.to(self._out_dtype(args))
        # an operator's output may not alias an input (the reference of a float32 identity would)
        storages = {t.untyped_storage().data_ptr() for t in args}
        return out.clone() if out.untyped_storage().data_ptr() in storages else out

    def _fake(self, *args):
        """The output's shape and dtype from the catalogue, for fake (meta) tensors: dims
        bound from the inputs' sizes (SymInts under dynamic shapes), checked where an input
        repeats a dim."""
        dims = {}
        for t, spec in zip(args, self.inputs):
            torch._check(t.dim() == len(spec["dims"]),
                         lambda spec=spec, t=t: f"{self.name}: {spec['name']} has {t.dim()} dims, "
                                                f"expected {len(spec['dims'])} ({', '.join(spec['dims'])})")
            for size, expr in zip(t.shape, spec["dims"]):
                dim, div = _parse_dim(expr)
                if div == 1 and dim not in dims:
                    dims[dim] = size
        for t, spec in zip(args, self.inputs):
            for size, expr in zip(t.shape, spec["dims"]):
                dim, div = _parse_dim(expr)
                if dim == "heads" and self.params.get("kv_heads") is not None and spec["name"] in ("K", "V"):
                    continue  # grouped-query: K and V have kv_heads heads, dims name Q's
                torch._check(size == dims[dim] // div,
                             lambda spec=spec, expr=expr: f"{self.name}: {spec['name']} disagrees on {expr}")
        shape = []
        for expr in self._output["dims"]:
            dim, div = _parse_dim(expr)
            shape.append(div if dim is None else dims[dim] // div)
        return args[0].new_empty(shape, dtype=self._out_dtype(args))


def _eager_plain(args) -> bool:
    """Whether a call on `args` may skip the dispatcher and run the operator's
    implementation for their device straight away: nothing but the dispatcher would see the
    difference. Not while torch.compile traces (the graph must hold the operator), under a
    torch function or dispatch mode (such a mode, FakeTensorMode among them, must see the
    operator), under torch.profiler (a profile shows the operator by name), on tensor
    subclasses, on inputs spread over device types, or when gradients are needed (the
    dispatcher raises there: the kernels have no backward)."""
    if not args or torch.compiler.is_compiling() or torch._C._len_torch_function_stack() \
            or torch._C._len_torch_dispatch_stack() or torch._C._autograd._profiler_enabled():
        return False
    device = args[0].device.type if type(args[0]) is torch.Tensor else None
    if device not in ("cuda", "cpu"):
        return False
    grad = torch.is_grad_enabled()
    for a in args:
        if type(a) is not torch.Tensor or a.device.type != device or (grad and a.requires_grad):
            return False
    return True


_REGISTERED: dict = {}


def register(kernel, name: Optional[str] = None, params: Optional[dict] = None) -> KernelOp:
    """Registers `kernel` (a path to a ``kernel.py``, or its module) as the operator
    ``torch.ops.autokernel.<name>`` and returns its :class:`KernelOp`.

    `name` defaults to the kernel's ``KERNEL_KIND``; characters other than letters, digits
    and ``_`` become ``_`` (``01-rmsnorm`` → ``_01_rmsnorm``: an operator name starts with a
    letter or ``_``). `params` are the target's parameters (``eps``, ``causal``, …), bound
    into the operator: its inputs are those present at them, the kernel gets them as
    keywords (:func:`bind`), the CPU reference computes them. Registering a name again
    replaces the operator (a worker that verifies a workspace twice registers its newest
    kernels).

    Raises ValueError when the kernel's kind is not in the catalogue, when a parameter is
    not the kind's, or when the kernel cannot take one the target needs (:func:`bind`);
    FileNotFoundError when the catalogue cannot be found (:func:`catalogue_module`).
    """
    module = load_kernel(kernel) if isinstance(kernel, (str, os.PathLike)) else kernel
    catalogue = catalogue_module()
    spec = catalogue.spec(module.KERNEL_KIND)
    name = op_name(name or module.KERNEL_KIND)
    op = KernelOp(name, module, spec, catalogue, params)
    _REGISTERED[name] = op
    return op


def op_name(name: str) -> str:
    """`name` as an operator name: characters other than letters, digits and ``_`` become
    ``_``, and a leading digit gets a ``_`` before it (``01-rmsnorm`` → ``_01_rmsnorm``)."""
    name = re.sub(r"\W", "_", name)
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def registered() -> dict:
    """Name → :class:`KernelOp` of every operator registered in this process."""
    return dict(_REGISTERED)
