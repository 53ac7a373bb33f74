"""End-to-end verification of a workspace: the model with the kept kernels plugged in,
compared with the unmodified model, and both timed.

Run inside the bench worker (``Worker::call_script(.., "verify", kwargs)``), which has already
chosen the device (and set ``TRITON_INTERPRET=1`` on the CPU). The model is loaded by the
profiler's loader (``profile_model.py``, written beside this file), so a model that profiles
also verifies.

How each kind is plugged in, for the duration of the check only:

- matmul: ``nn.Linear`` (``x @ Wᵀ + b``, ``Wᵀ`` the transposed view of the weight: the
  ``b_transposed`` layout its target was benchmarked in);
- layernorm and rmsnorm: the norm modules whose parameters, read and decided by the
  profiler's matcher (``profile_model.norm_params``: eps and bias from the module, rmsnorm's
  weight offset and cast order from its own forward), are the target's ``params``; before
  it is installed the kernel is checked against each such module's own forward on an input
  captured from the model (``_check_norm``), and a mismatch leaves it out with the error;
- softmax: ``torch.nn.functional.softmax`` / ``torch.softmax`` over the last dim;
- flash_attention: the attention calls whose parameters, read by the profiler's matcher
  (``profile_model.attention_params``: causal, scale, K/V heads, padding mask), are the
  target's ``params``: in a transformers model through an attention function registered for
  that model instance (its ``config._attn_implementation``, restored after), elsewhere through
  ``F.scaled_dot_product_attention``; the kernel is first checked against the model's own
  attention on a captured call (``_check_attention``), and a mismatch leaves it out;
- cross_entropy: ``F.cross_entropy`` with mean reduction and no weights, smoothing or ignored ids;
- fused_mlp: modules with bias-free ``gate_proj/up_proj/down_proj`` or ``w_gate/w_up/w_down`` linears;
- rotary_embedding and reduce have no standard call site and are reported as not pluggable.

Each kernel takes only the calls at its target's problem shapes (see `_Plug`).

A kernel that breaks the model is left out and named: each kernel is checked alone first.
Every kernel left out has an entry ``{"target", "reason"}``; the entry of a kernel that is
wrong (it cannot be loaded, raises inside the model, or changes the model's output beyond
the tolerance, alone or together with the others) also has ``"broken": True``, and any such
entry makes the verification fail (``passed`` false: `autokernel verify` exits 1). A kernel
left out only because it has no call site in the model or does not make it faster is not a
failure.
"""

import contextlib
import importlib.util
import statistics
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

# dtype -> largest relative L2 error ‖out − ref‖ / ‖ref‖ of the whole model's output. A
# model's output is judged as a whole, not element by element: rounding differences of one
# layer compound through the next, so a correct fp16 kernel in every nn.Linear of GPT-2
# moved single logits by 0.5 while the relative L2 error stayed below 1e-3 (H200,
# 2026-11-29). A wrong kernel lands near 1.
MODEL_TOLERANCE = {
    torch.float32: 1e-3,
    torch.float16: 2e-2,
    torch.bfloat16: 5e-2,
}

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _load_kernel(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "kernel_fn", None)):
        raise ValueError(f"{path} defines no kernel_fn")
    return module


def _rows(x):
    """x as a contiguous 2-D [rows, last dim] view."""
    return x.reshape(-1, x.shape[-1]).contiguous()


class _Plug:
    """Installs one kernel into a model (module forwards or functional patches) and counts
    how often the model called it.

    A target was planned, and tuned, at the model's own problem shapes (`shapes`, e.g.
    GPT-2's LM head 1024x50257x768): the kernel takes only the calls at those shapes and
    every other call goes on to what was there before (PyTorch, or another target's kernel
    of the same kind). Without shapes (a standalone target) it takes every call."""

    def __init__(self, target_id, kind, fn, shapes=(), params=None, dtype=None):
        self.target_id, self.kind, self.fn, self.calls = target_id, kind, fn, 0
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.params = dict(params or {})
        self.dtype = dtype
        # norm kinds: the module instances found to compute the target's params (`_check_norm`)
        self.modules = []
        # norm kinds: (class, dtype) of modules that compute the target's params at its
        # shapes in another dtype than the target's, which the plug leaves alone (`_check_norm`)
        self.other_dtypes = []

    def _mine(self, *problem):
        return not self.shapes or tuple(int(d) for d in problem) in self.shapes

    def _count(self, out):
        self.calls += 1
        return out

    @contextlib.contextmanager
    def installed(self, model):
        undo = []
        try:
            getattr(self, "_plug_" + self.kind, self._not_pluggable)(model, undo)
            yield self
        finally:
            for restore in reversed(undo):
                restore()

    def _not_pluggable(self, model, undo):
        raise NotImplementedError(f"{self.kind} has no standard call site to plug into")

    def _replace_forward(self, module, forward, undo):
        """Replaces module.forward with forward(self, x, previous): `previous` is the
        forward in place before (a bound method), for the calls this plug does not take."""
        had = "forward" in module.__dict__
        old = module.__dict__.get("forward")
        previous = module.forward
        module.forward = types.MethodType(
            lambda self, *a, **kw: forward(self, *a, previous=previous, **kw), module)
        undo.append(lambda: setattr(module, "forward", old) if had else module.__dict__.pop("forward", None))

    def _patch(self, owner, name, wrapper, undo):
        old = getattr(owner, name)
        setattr(owner, name, wrapper(old))
        undo.append(lambda: setattr(owner, name, old))

    def _plug_matmul(self, model, undo):
        plug = self
        for m in model.modules():
            if isinstance(m, nn.Linear):
                def forward(self, x, previous):
                    rows = x.numel() // x.shape[-1]
                    if not plug._mine(rows, self.out_features, self.in_features):
                        return previous(x)
                    # Wᵀ as a view (strides (1, K)): the `b_transposed` layout the target
                    # was judged and timed in, so what runs here is what was measured
                    out = plug._count(plug.fn(A=_rows(x), B=self.weight.detach().t()))
                    if self.bias is not None:
                        out = out + self.bias
                    return out.reshape(*x.shape[:-1], out.shape[-1])

                self._replace_forward(m, forward, undo)

    def _norm_kwargs(self):
        """The target's params as kernel_fn takes them: those in its signature (all with
        ``**kwargs``); ValueError for one it lacks at a value other than the kind's default."""
        import catalogue
        import inspect

        sig = inspect.signature(self.fn).parameters
        takes_all = any(p.kind == p.VAR_KEYWORD for p in sig.values())
        defaults = catalogue.param_defaults(self.kind)
        out = {}
        for name, value in self.params.items():
            if takes_all or name in sig:
                out[name] = value
            elif value != defaults.get(name):
                raise ValueError(f"kernel_fn takes no `{name}` keyword and the model needs {name}={value!r}")
        return out

    def _norm_call(self, module, x):
        """The kernel on x [..., cols] with the module's weight (and bias) and the params."""
        inputs = {"x": _rows(x), "weight": module.weight}
        if self.kind == "layernorm" and module.bias is not None:
            inputs["bias"] = module.bias
        return self.fn(**inputs, **self._norm_kwargs()).reshape(x.shape)

    def _takes(self, x):
        """Whether this plug takes a call on x: its target's dtype and shapes."""
        return (self.dtype is None or x.dtype == self.dtype) and x.dim() >= 1 \
            and self._mine(x.numel() // x.shape[-1], x.shape[-1])

    def _plug_norm(self, model, undo):
        plug = self
        for m in self.modules:
            def forward(self, x, previous):
                if not plug._takes(x):
                    return previous(x)
                return plug._count(plug._norm_call(self, x))

            self._replace_forward(m, forward, undo)

    _plug_layernorm = _plug_norm
    _plug_rmsnorm = _plug_norm

    def _plug_softmax(self, model, undo):
        plug = self

        def wrapper(original):
            def softmax(input, dim=None, *args, **kwargs):
                extra = kwargs.get("dtype") is not None or (args and args[0] is not None)
                if isinstance(input, torch.Tensor) and dim in (-1, input.dim() - 1) and not extra \
                        and input.dim() > 0 and plug._mine(input.numel() // input.shape[-1], input.shape[-1]):
                    return plug._count(plug.fn(x=_rows(input))).reshape(input.shape)
                return original(input, dim, *args, **kwargs)
            return softmax

        self._patch(F, "softmax", wrapper, undo)
        self._patch(torch, "softmax", wrapper, undo)

    def _attention_params(self):
        """The target's flash_attention params with the kind's defaults filled in, as the
        profiler's matcher (``profile_model.attention_params``) gives a call's."""
        import catalogue

        return dict(catalogue.param_defaults("flash_attention"), **self.params)

    def _attention_call(self, q, k, v, padding):
        """The kernel on one attention problem: Q, K, V [batch, heads|kv_heads, seq,
        head_dim], the additive [batch, seq] `padding` mask with ``has_mask``."""
        extra = {"mask": padding} if padding is not None else {}
        return self.fn(Q=q.contiguous(), K=k.contiguous(), V=v.contiguous(), **extra, **self._norm_kwargs())

    def _takes_attention(self, q, k, v, mask, dropout, causal, scale):
        """``(True, padding)`` when this plug takes an attention call: the matcher gives it
        the target's params, in the target's dtype and at one of its shapes."""
        import profile_model

        if self.dtype is not None and q.dtype != self.dtype or q.dim() != 4 or not self._mine(*q.shape):
            return False, None
        params, padding, _reason = profile_model.attention_params(q, k, v, mask, dropout, causal, scale)
        return params is not None and params == self._attention_params(), padding

    def _plug_flash_attention(self, model, undo):
        """A transformers model: an attention function of this plug's, registered for this
        model instance only (``profile_model.hf_attention_function``), taking the calls at
        the target's params and handing the others to the model's own. Another model: a patch
        of ``F.scaled_dot_product_attention`` taking the calls at the target's params."""
        import profile_model

        plug = self

        def make(original):
            def attention(module, query, key, value, attention_mask, *args, **kwargs):
                named = dict(zip(("dropout", "scaling"), args), **kwargs)
                mask, dropout, causal, scale, reason = profile_model._hf_call(
                    module, query, key, value, attention_mask, **named)
                if reason is None:
                    mine, padding = plug._takes_attention(query, key, value, mask, dropout, causal, scale)
                    if mine:
                        out = plug._count(plug._attention_call(query, key, value, padding))
                        return out.transpose(1, 2).contiguous(), None
                return original(module, query, key, value, attention_mask, *args, **kwargs)
            return attention

        stack = contextlib.ExitStack()
        if stack.enter_context(profile_model.hf_attention_function(model, make)):
            undo.append(stack.close)
            return
        stack.close()

        def wrapper(original):
            def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
                if set(kw) <= {"enable_gqa"} and (kw.get("enable_gqa", False) or k.shape[1] == q.shape[1]):
                    mine, padding = plug._takes_attention(q, k, v, attn_mask, dropout_p, is_causal, scale)
                    if mine:
                        return plug._count(plug._attention_call(q, k, v, padding))
                return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                **kw)
            return sdpa

        self._patch(F, "scaled_dot_product_attention", wrapper, undo)

    def _plug_cross_entropy(self, model, undo):
        plug = self

        def wrapper(original):
            def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                              reduction="mean", label_smoothing=0.0):
                simple = (weight is None and size_average is None and reduce is None and reduction == "mean"
                          and label_smoothing == 0.0 and input.dim() == 2 and target.dim() == 1
                          and not bool((target == ignore_index).any()) and plug._mine(*input.shape))
                if simple:
                    return plug._count(plug.fn(logits=input.contiguous(), targets=target))
                return original(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
            return cross_entropy

        self._patch(F, "cross_entropy", wrapper, undo)

    def _plug_fused_mlp(self, model, undo):
        plug = self
        names = [("gate_proj", "up_proj", "down_proj"), ("w_gate", "w_up", "w_down")]
        for m in model.modules():
            for g, u, d in names:
                parts = [getattr(m, n, None) for n in (g, u, d)]
                if all(isinstance(p, nn.Linear) and p.bias is None for p in parts):
                    def forward(self, x, previous, _names=(g, u, d)):
                        gate, up, down = (getattr(self, n).weight for n in _names)
                        if not plug._mine(x.numel() // x.shape[-1], gate.shape[1], gate.shape[0]):
                            return previous(x)
                        out = plug._count(plug.fn(x=_rows(x), w_gate=gate, w_up=up, w_down=down))
                        return out.reshape(*x.shape[:-1], out.shape[-1])

                    self._replace_forward(m, forward, undo)
                    break


def _check_norm(plug, captured):
    """Finds the modules a norm plug may replace and checks the kernel against them.

    `captured` is ``profile_model.capture_norm_inputs`` of the model. A module qualifies
    when it was called at the plug's dtype and one of its shapes and the matcher
    (``profile_model.norm_params``) gives it the target's params. The kernel is then run on
    each qualifying module's captured input and compared with the module's own forward at
    the kind's tolerance: the model's code is the plug's reference. Sets ``plug.modules``;
    returns None, or why the kernel must be left out (the measured error)."""
    import profile_model

    plug.modules, plug.other_dtypes = [], []
    for m, (x, shapes, dtype, _calls) in captured.items():
        if profile_model.norm_kind(m) != plug.kind:
            continue
        if not plug._takes(x):
            other = plug.dtype is not None and x.dtype != plug.dtype and x.dim() >= 1 \
                and plug._mine(x.numel() // x.shape[-1], x.shape[-1])
            if other and profile_model.norm_params(m, x)[1] == plug.params:
                plug.other_dtypes.append((type(m).__name__, dtype))
            continue
        kind, params, _reason = profile_model.norm_params(m, x)
        if params != plug.params:
            continue
        with torch.no_grad():
            out = plug._norm_call(m, x)
        want = profile_model._own_forward(m, x)
        excess, err = profile_model._excess(out, want, plug.kind)
        if excess > 0:
            return (f"differs from {type(m).__name__}'s own forward by {err:.3g} (beyond the {plug.kind} "
                    f"tolerance) at {tuple(x.shape)} with {plug.params}")
        plug.modules.append(m)
    return None


def _check_attention(plug, calls):
    """Checks an attention plug against the model's own attention before it is installed.

    `calls` is ``profile_model.capture_attention_calls`` of the model. On the first
    captured call of each site whose matcher params are the target's, in its dtype and at
    one of its shapes, the kernel is compared with what the model's own attention function
    returned, at flash_attention's tolerance. Returns None, or why the kernel must be left
    out (the measured error)."""
    import profile_model

    want = plug._attention_params()
    for _key, _fields, call in calls:
        if call.out is None or call.params != want or not plug._mine(*call.q.shape) \
                or (plug.dtype is not None and call.q.dtype != plug.dtype):
            continue
        with torch.no_grad():
            out = plug._attention_call(call.q, call.k, call.v, call.padding)
        excess, err = profile_model._excess(out, call.out, "flash_attention")
        if excess > 0:
            return (f"differs from {call.site[0]}'s own attention by {err:.3g} (beyond the flash_attention "
                    f"tolerance) at {tuple(call.q.shape)} with {plug.params}")
    return None


def _check_plugs(plugs, excluded, kinds, capture, check):
    """Checks each plug of `kinds` against the model's own code on what `capture()` took
    from one forward (``check(plug, captured)``: None, or why not); a plug that fails is
    removed from `plugs` and named in `excluded`, as broken."""
    mine = [p for p in plugs if p.kind in kinds]
    if not mine:
        return
    captured = capture()
    for p in mine:
        try:
            why = check(p, captured)
        except Exception as e:  # noqa: BLE001 - a kernel that raises on the model's input is wrong
            why = f"raised {type(e).__name__}: {e}"
        if why:
            excluded.append({"target": p.target_id, "reason": f"plug check failed: {why}", "broken": True})
            plugs.remove(p)


def _unused_attention_reason(plug):
    """Why an attention plug took no call: no attention call of the model has its params at
    its shapes in its dtype."""
    want = str(plug.dtype).replace("torch.", "")
    return (f"no attention call of the model computes {plug._attention_params()} at its shapes {plug.shapes} "
            f"in {want}")


def _unused_norm_reason(plug):
    """Why a norm plug took no call: the modules computing its params run in another dtype
    (named, with their dtype), or no module computes them at its shapes."""
    want = str(plug.dtype).replace("torch.", "")
    if plug.other_dtypes:
        found = ", ".join(sorted({f"{cls} in {dtype}" for cls, dtype in plug.other_dtypes}))
        return (f"the {plug.kind} modules computing {plug.params} at its shapes run in another dtype than the "
                f"target's {want}: {found}")
    return f"no {plug.kind} module of the model computes {plug.params} at its shapes {plug.shapes} in {want}"


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "values"):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for item in out:
            t = _first_tensor(item)
            if t is not None:
                return t
    return None


def _compare(out, ref, dtype):
    """None when out matches ref within the model tolerance of dtype, else the reason."""
    max_l2 = MODEL_TOLERANCE[dtype]
    if out is None or out.shape != ref.shape:
        return f"output shape {None if out is None else tuple(out.shape)} differs from {tuple(ref.shape)}"
    o, r = out.detach().float().cpu(), ref.detach().float().cpu()
    finite = torch.isfinite(r)
    if not bool(torch.equal(torch.isfinite(o), finite)):
        return "non-finite values where the unmodified model has finite ones (or the reverse)"
    o, r = o[finite], r[finite]
    diff = (o - r).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    rel_l2 = float(torch.linalg.vector_norm(o - r) / max(float(torch.linalg.vector_norm(r)), 1e-30))
    if rel_l2 > max_l2:
        return f"relative L2 error {rel_l2:.3g} (limit {max_l2}), max abs error {max_abs:.3g}"
    return None


def _max_abs(out, ref):
    return float((out.detach().float().cpu() - ref.detach().float().cpu()).abs().max())


def _time_ms(call, on_gpu):
    if on_gpu:
        import triton.testing
        return float(triton.testing.do_bench(call, warmup=5, rep=100))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# Rounds of the interleaved model timing. A host shared with other work (another run, a
# compile) drifts over seconds; timing every variant of the model once per round and taking
# each one's median over the rounds puts that drift on all of them alike, as the keep rule
# does for kernels. Measured on the H200 (docs/benchmarks.md, 2026-11-30): timed one after
# the other while a second GPU of the host ran torch.compile, a LLaMA example with one
# kernel plugged in that had made it faster alone read 0.70x of eager. On the CPU timings are
# not representative, so one round.
TIMING_ROUNDS = 5
# Least gain (a share of eager's time) a kernel alone must bring to the model to be plugged
# in, as the keep rule asks 1% of a kernel. Below it the medians of a host-bound model's
# forward swap places from run to run: on the H200 (2026-11-30) the LLaMA example's rmsnorm
# read 5% faster in one verification and 1% slower in the next.
MODEL_GAIN_MIN = 0.01


def _time_variants_ms(variants, timed, on_gpu):
    """Median forward time (ms) of each variant (a list of plugs; [] is eager), interleaved.

    ``timed(selected, on_gpu)`` runs one timing of the model with ``selected`` plugged in.
    Returns a list of medians in the order of ``variants``.
    """
    times = [[] for _ in variants]
    for _ in range(TIMING_ROUNDS if on_gpu else 1):
        for i, selected in enumerate(variants):
            times[i].append(timed(selected, on_gpu))
    return [statistics.median(t) for t in times]


def _gainers(plugs, alone_ms, eager_ms):
    """Splits plugs by the model time with each alone (ms, same order) against eager's.

    Returns (plugs that make the model at least MODEL_GAIN_MIN faster, exclusion entries
    ``{"target", "reason"}`` for the others).
    """
    kept, excluded = [], []
    for p, ms in zip(plugs, alone_ms):
        if ms < eager_ms * (1.0 - MODEL_GAIN_MIN):
            kept.append(p)
            continue
        change = "slower" if ms >= eager_ms else f"less than {MODEL_GAIN_MIN:.0%} faster"
        excluded.append({"target": p.target_id,
                         "reason": f"makes the model {change}: {ms:.3f} ms with it alone, {eager_ms:.3f} ms eager"})
    return kept, excluded


def verify(model, targets, dtype, device, model_kwargs=None, input_shape=None, loader_dir=None,
           inputs=None, inputs_fn=None, pretrained=None):
    """Checks the model with each target's kernel plugged in against the unmodified model.

    model: the model source as ``profile_model.load_model`` takes it; targets: a list of
    ``{"id", "kind", "path"}``; dtype: a dtype name; device: ``cuda`` or ``cpu``;
    loader_dir: the folder holding ``profile_model.py`` and ``examples/``; input_shape,
    inputs, inputs_fn, pretrained: as ``profile_model.load_for_call`` takes them (the
    profiler's loader, so the model verified is the model profiled, on the same inputs).
    Returns a JSON-able dict matching the Rust ``Verification`` struct.
    """
    if loader_dir and loader_dir not in sys.path:
        sys.path.insert(0, loader_dir)
    import os

    import profile_model

    torch_dtype = DTYPES[dtype]
    on_gpu = device == "cuda"
    examples_dir = os.path.join(loader_dir, "examples") if loader_dir else None
    net, call, _ = profile_model.load_for_call(model, model_kwargs or {}, examples_dir, pretrained, input_shape,
                                               inputs, inputs_fn, torch_dtype, device)

    def forward():
        with torch.no_grad():
            return call(net)

    ref = _first_tensor(forward())
    if ref is None:
        raise ValueError("the model returned no tensor to compare")
    plugs, excluded = [], []
    for i, t in enumerate(targets):
        try:
            module = _load_kernel(t["path"], f"_ak_verify_{i}_{t['id'].replace('-', '_')}")
        except Exception as e:  # noqa: BLE001 - any failure to load is a reason to leave it out
            excluded.append({"target": t["id"], "reason": f"cannot load {t['path']}: {e}", "broken": True})
            continue
        plugs.append(_Plug(t["id"], t["kind"], module.kernel_fn, t.get("shapes") or (), t.get("params"),
                           torch_dtype))

    # norm and attention plugs: matched by the target's params, checked against the
    # model's own code on inputs captured from it
    _check_plugs(plugs, excluded, ("rmsnorm", "layernorm"),
                 lambda: profile_model.capture_norm_inputs(net, forward), _check_norm)
    _check_plugs(plugs, excluded, ("flash_attention",),
                 lambda: profile_model.capture_attention_calls(net, forward), _check_attention)

    def run_with(selected):
        with contextlib.ExitStack() as stack:
            for p in selected:
                stack.enter_context(p.installed(net))
            return _first_tensor(forward())

    # each kernel alone first, so a kernel that breaks the model is named
    good = []
    for p in plugs:
        try:
            p.calls = 0
            out = run_with([p])
        except NotImplementedError as e:
            excluded.append({"target": p.target_id, "reason": f"not pluggable: {e}"})
            continue
        except Exception as e:  # noqa: BLE001 - a crashing kernel is left out and named
            excluded.append({"target": p.target_id, "reason": f"raised {type(e).__name__}: {e}", "broken": True})
            continue
        if p.calls == 0:
            if p.kind in ("rmsnorm", "layernorm"):
                reason = _unused_norm_reason(p)
            elif p.kind == "flash_attention":
                reason = _unused_attention_reason(p)
            else:
                reason = f"the model never called it through a standard call site at its shapes {p.shapes}"
            excluded.append({"target": p.target_id, "reason": reason})
            continue
        why = _compare(out, ref, torch_dtype)
        if why:
            excluded.append({"target": p.target_id, "reason": f"breaks the model: {why}", "broken": True})
            continue
        good.append(p)

    def timed(selected, on_gpu):
        with contextlib.ExitStack() as stack:
            for p in selected:
                stack.enter_context(p.installed(net))
            return _time_ms(forward, on_gpu)

    if on_gpu and good:
        # each correct kernel alone must also make the model faster: a kernel faster than
        # PyTorch's op on the benchmark's inputs can still lose inside the model (another
        # memory layout, e.g. nn.Linear's transposed weight, or a shape it was not tuned for)
        eager_ms, *alone = _time_variants_ms([[]] + [[p] for p in good], timed, on_gpu)
        good, slow = _gainers(good, alone, eager_ms)
        excluded.extend(slow)

    result = {
        # a wrong kernel fails the verification even though it was left out of the model
        "passed": not any(e.get("broken") for e in excluded),
        "included": [p.target_id for p in good],
        "excluded": excluded,
        "max_abs_error": 0.0,
        "eager_ms": None,
        "optimized_ms": None,
        "speedup": None,
        "device": f"cuda {torch.cuda.get_device_name()}" if on_gpu else "cpu",
        "timing_representative": on_gpu,
    }
    if good:
        out = run_with(good)
        why = _compare(out, ref, torch_dtype)
        result["passed"] = result["passed"] and why is None
        result["max_abs_error"] = _max_abs(out, ref)
        if why:
            result["excluded"].append({"target": "+".join(p.target_id for p in good), "reason": f"together: {why}",
                                       "broken": True})
    if not good:
        # nothing plugged in: timing the same model twice would report noise as a speedup
        result["eager_ms"] = timed([], on_gpu)
        return result
    # eager and the whole set timed again, interleaved, in the same rounds
    result["eager_ms"], result["optimized_ms"] = _time_variants_ms([[], good], timed, on_gpu)
    result["speedup"] = result["eager_ms"] / result["optimized_ms"]
    return result


def device_info(requested):
    """The device a request for ``requested`` (auto/cuda/cpu) resolves to, and the GPU's name."""
    if requested != "cpu" and torch.cuda.is_available():
        return {"device": "cuda", "gpu_name": torch.cuda.get_device_name()}
    if requested == "cuda":
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return {"device": "cpu", "gpu_name": None}
