"""Call sites: which module or functional call of a model a kernel kind can replace, at which
parameters, decided by the model's own code.

Used three ways: the profiler records the call sites of a model (``norm_call_sites``,
``matmul_call_sites``, ``mlp_call_sites``, ``attention_call_sites``: what ``autokernel_profiler::rank`` plans
targets from); verification (``plugs.py``) matches its plugs by the same functions, so what
was planned is what gets plugged in; an exported package (``autokernel export``) ships this
file and matches the user's model with it.

The catalogue (``catalogue.py``: references, tolerances, the model code of each variant) is
the worker's ``catalogue`` module, or inside an exported package the one its ``kernel_ops``
loaded (``_catalogue``).
"""

import contextlib
import json
import math
import warnings


def _catalogue():
    """The catalogue's Python side: in an exported package the one beside this file, loaded
    by its ``kernel_ops``; beside the worker's scripts the worker's own ``catalogue``."""
    try:
        from . import kernel_ops  # inside a package (an exported one)
    except ImportError:
        import catalogue  # a top-level module, beside the worker's scripts

        return catalogue
    return kernel_ops.catalogue_module()


# --- norm call sites: parameters read from each module, decided by its own forward ------

# The variants a norm module may compute, in the order a tie is decided (defaults first):
# rmsnorm's weight offset (Gemma: 1 + w) and cast order (catalogue.rmsnorm_model_code).
_RMS_VARIANTS = [(o, c) for o in (0, 1) for c in ("float32", "llama", "t5")]


def norm_kind(m):
    """`layernorm` for an nn.LayerNorm, `rmsnorm` for an RMS norm module (an nn.RMSNorm, a
    class whose name says RMSNorm, or one with a 1-D weight and a `variance_epsilon`, as
    T5LayerNorm), else None."""
    import torch

    if isinstance(m, torch.nn.LayerNorm):
        return "layernorm"
    w = getattr(m, "weight", None)
    rms = isinstance(m, getattr(torch.nn, "RMSNorm", ())) or "rmsnorm" in type(m).__name__.lower() \
        or hasattr(m, "variance_epsilon")
    if rms and isinstance(w, torch.Tensor) and w.dim() == 1:
        return "rmsnorm"
    return None


def _tolerance(kind, dtype):
    """(atol, rtol) of the catalogue for `kind` in `dtype` (the judge's elementwise bound)."""
    catalogue = _catalogue()

    t = catalogue.spec(kind)["tolerances"][str(dtype).replace("torch.", "")]
    return t["atol"], t["rtol"]


def _excess(out, ref, kind):
    """How far `out` is from `ref` beyond the kind's tolerance in ref's dtype: the largest
    |out − ref| − (atol + rtol·|ref|) (≤ 0 within tolerance), and the largest |out − ref|."""
    import torch

    atol, rtol = _tolerance(kind, ref.dtype if ref.dtype != torch.float32 else out.dtype)
    o, r = out.detach().float(), ref.detach().float()
    if o.shape != r.shape:
        return float("inf"), float("inf")
    diff = (o - r).abs().nan_to_num(float("inf"))
    return float((diff - (atol + rtol * r.abs())).max()), float(diff.max())


def _own_forward(m, x):
    """The module's class forward on x: what the model computes, whatever replaced the
    instance's forward (a profiler range, a plug)."""
    import torch

    with torch.no_grad():
        return type(m).forward(m, x)


def norm_params(m, x):
    """The catalogue parameters of norm module `m` called on `x` [..., cols]:
    ``(kind, params, None)`` when the module's own forward matches the kind's model code
    (``catalogue.rmsnorm_model_code``, ``F.layer_norm``) at those parameters within the
    kind's tolerance, else ``(kind, None, reason)`` with the measured error.

    eps and the bias come from the module's attributes (`eps`, `variance_epsilon`,
    `bias`); rmsnorm's weight offset and cast order cannot be read from an attribute and are
    decided by running the module: the variant with the smallest error on `x`, and among
    cast orders that tie (x and the weight in one dtype, where LlamaRMSNorm and T5LayerNorm
    agree) the one that matches a float32-weight copy of the module called on x in float16,
    where the three orders differ.
    """
    import copy

    import torch
    import torch.nn.functional as F

    catalogue = _catalogue()

    kind = norm_kind(m)
    out = _own_forward(m, x)
    if not isinstance(out, torch.Tensor):
        return kind, None, f"{type(m).__name__} returns {type(out).__name__}, not a tensor"
    if kind == "layernorm":
        if m.weight is None or len(m.normalized_shape) != 1:
            return kind, None, f"{type(m).__name__} without an affine weight or over several dims"
        params = {"eps": float(m.eps), "has_bias": m.bias is not None}
        ref = F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)
        excess, err = _excess(out, ref, kind)
        if excess > 0:
            return kind, None, f"{type(m).__name__}'s forward differs from F.layer_norm by {err:.3g}"
        return kind, params, None
    eps = getattr(m, "eps", getattr(m, "variance_epsilon", None))
    if eps is None:  # nn.RMSNorm(eps=None) uses the dtype's machine epsilon
        eps = torch.finfo(x.dtype).eps
    eps = float(eps)
    scored = []
    for offset, order in _RMS_VARIANTS:
        ref = catalogue.rmsnorm_model_code(x, m.weight, eps, offset, order)
        excess, err = _excess(out, ref, kind)
        if excess <= 0:
            scored.append((err, offset, order))
    if not scored:
        best = min(_excess(out, catalogue.rmsnorm_model_code(x, m.weight, eps, o, c), kind)[1]
                   for o, c in _RMS_VARIANTS)
        return kind, None, (f"{type(m).__name__} (eps {eps:g}) matches no rmsnorm variant "
                            f"(weight offset 0/1, cast order float32/llama/t5): error {best:.3g} at best")
    least = min(s[0] for s in scored)
    tied = [s for s in scored if s[0] == least]
    offset, order = tied[0][1], tied[0][2]
    if len({s[2] for s in tied}) > 1:
        # a copy with a float32 weight that is not all ones (an initialised Llama's is),
        # called in float16: the orders then differ in rounding and in the output dtype
        probe = copy.deepcopy(m).float()
        g = torch.Generator(device=x.device).manual_seed(0)
        with torch.no_grad():
            probe.weight.copy_(1.0 + 0.5 * torch.randn(probe.weight.shape, generator=g, device=x.device))
        xh = x.detach().to(torch.float16)

        def probe_error(o, c):
            ref = catalogue.rmsnorm_model_code(xh, probe.weight, eps, o, c)
            if ref.dtype != pout.dtype:
                return float("inf")
            return (pout.float() - ref.float()).abs().max().item()

        try:
            # the probe's dtypes differ on purpose: torch.rms_norm's warning about it is not
            # the user's to read
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                pout = _own_forward(probe, xh)
                errs = [(probe_error(o, c), i) for i, (_, o, c) in enumerate(tied)]
            offset, order = tied[min(errs)[1]][1:]
        except Exception:  # noqa: BLE001 - a module that rejects the probe keeps the tie's first
            pass
    return kind, {"eps": eps, "weight_offset": offset, "cast_order": order}, None


def capture_module_inputs(model, forward, select, problem_of):
    """Runs `forward()` once with a pre-hook on every module of `model` that `select(m)`
    accepts; returns ``{module: (first input, problem shapes, dtype name, calls)}`` for each
    that was called, its problem shapes (``problem_of(m, x)``, in first-seen order) and its
    calls in that one forward pass."""
    seen = {}
    hooks = []

    def hook(m, args):
        if not args or not hasattr(args[0], "shape") or args[0].dim() < 1:
            return
        x = args[0]
        problem = problem_of(m, x)
        entry = seen.setdefault(m, [x.detach().clone(), [], str(x.dtype).replace("torch.", ""), 0])
        if problem not in entry[1]:
            entry[1].append(problem)
        entry[3] += 1

    for m in model.modules():
        if select(m):
            hooks.append(m.register_forward_pre_hook(hook))
    try:
        forward()
    finally:
        for h in hooks:
            h.remove()
    return {m: tuple(v) for m, v in seen.items()}


def capture_norm_inputs(model, forward):
    """:func:`capture_module_inputs` of the norm modules, problem shapes (rows, cols)."""
    return capture_module_inputs(
        model, forward, norm_kind, lambda m, x: (x.numel() // x.shape[-1], int(x.shape[-1])))


def norm_call_sites(model, forward):
    """The norm call sites of `model` in one `forward()`: one entry per (class, kind,
    parameters, shape, dtype) with the module instances and calls behind it, each either
    pluggable (`params`) or not (`reason`, with the measured error). What the planner
    plans norm targets from (``autokernel_profiler::rank``)."""
    sites = {}
    for m, (x, shapes, dtype, calls) in capture_norm_inputs(model, forward).items():
        try:
            kind, params, reason = norm_params(m, x)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            kind, params, reason = norm_kind(m), None, f"its forward raised {type(e).__name__}: {e}"
        for shape in shapes:
            key = (type(m).__name__, kind, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": kind, "params": params,
                                          "shape": list(shape), "dtype": dtype, "reason": reason,
                                          "instances": 0, "calls": 0})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values())


# --- residual add → norm chains (the fused add_rmsnorm and add_layernorm kinds) --------

ADD_NORM = {"rmsnorm": "add_rmsnorm", "layernorm": "add_layernorm"}
"""The fused kind of each norm kind when the norm's input is a residual add's sum."""


def _add_operands(func, args, kwargs):
    """(a, b) when a torch function call is a plain sum of two tensors of one shape, dtype
    and device (``a + b``, ``torch.add(a, b)``, ``a.add(b)``; no ``alpha``, no ``out``, no
    broadcast, no gradient to build): the add a fused norm can take; None otherwise."""
    import torch

    if func not in (torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__) \
            or kwargs or len(args) != 2:
        return None
    a, b = args
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or type(a) is not torch.Tensor \
            or type(b) is not torch.Tensor:
        return None
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or a.dim() < 1 \
            or not a.dtype.is_floating_point:
        return None
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return None
    return a, b


def whole_view(x, h):
    """Whether tensor `x` is `h` or a contiguous view of all of it with the same rows (the
    norm's input may be the sum reshaped, as OPT's decoder does)."""
    if x is h:
        return True
    return x.data_ptr() == h.data_ptr() and x.numel() == h.numel() and x.dim() >= 1 \
        and x.shape[-1] == h.shape[-1] and x.dtype == h.dtype and x.is_contiguous() and h.is_contiguous()


def capture_add_norm_inputs(model, forward):
    """Runs `forward()` once and finds the norm modules whose input is the sum a residual
    add made: the norm called on the tensor the model's last plain add (two tensors of one
    shape and dtype) returned, or on a contiguous view of all of it (OPT reshapes it), left
    unchanged since (its version counter), as in ``h = x + residual; y = norm(h)``:
    ``{module: (x, residual, problem shapes, dtype name, calls fed by an add)}``, the
    operands of the module's first such call (copies). The rule is the plugs' own
    (``plugs._FusedAdd``). The adds are seen through a torch function mode (the model's own
    calls, however its code is split over modules: an add at the end of one decoder layer
    and the norm at the start of the next are one chain)."""
    import torch
    from torch.overrides import TorchFunctionMode

    last = {}

    class Adds(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            operands = _add_operands(func, args, kwargs)
            if operands is not None and isinstance(out, torch.Tensor):
                last.clear()
                last.update(out=out, version=out._version, operands=operands)
            return out

    seen = {}
    hooks = []

    def hook(m, args):
        if not args or not isinstance(args[0], torch.Tensor) or not last or not whole_view(args[0], last["out"]) \
                or args[0]._version != last["version"]:
            return
        x = args[0]
        a, b = last["operands"]
        problem = (x.numel() // x.shape[-1], int(x.shape[-1]))
        entry = seen.setdefault(m, [a.detach().clone(), b.detach().clone(), [], str(x.dtype).replace("torch.", ""), 0])
        if problem not in entry[2]:
            entry[2].append(problem)
        entry[4] += 1

    for m in model.modules():
        if norm_kind(m):
            hooks.append(m.register_forward_pre_hook(hook))
    try:
        with Adds():
            forward()
    finally:
        for h in hooks:
            h.remove()
        last.clear()
    return {m: tuple(v) for m, v in seen.items()}


def add_time_us(a, b, repeats=20):
    """Microseconds per call of ``a + b`` (the add a fused norm takes over), timed on the
    tensors' device: CUDA events on a GPU, the wall clock elsewhere; the median of
    `repeats` after a warm-up call."""
    import statistics
    import time

    import torch

    on_gpu = a.is_cuda
    a + b
    times = []
    for _ in range(repeats):
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a + b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            a + b
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def add_norm_call_sites(model, forward):
    """The residual add → norm chains of `model` in one `forward()`, as call sites of the
    fused kinds (``add_rmsnorm``, ``add_layernorm``): one entry per (norm class, kind,
    parameters, shape, dtype) like :func:`norm_call_sites`, its ``calls`` those fed by an
    add, its parameters the norm's (decided by the norm's own forward on the sum), and
    ``added_us`` the add's device time per call (the planner adds it to the norm's share:
    the fused kernel takes both)."""
    import torch

    sites = {}
    for m, (a, b, shapes, dtype, calls) in capture_add_norm_inputs(model, forward).items():
        with torch.no_grad():
            h = a + b
        try:
            kind, params, reason = norm_params(m, h)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            kind, params, reason = norm_kind(m), None, f"its forward raised {type(e).__name__}: {e}"
        added_us = add_time_us(a, b)
        for shape in shapes:
            key = (type(m).__name__, kind, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": ADD_NORM[kind], "params": params,
                                          "shape": list(shape), "dtype": dtype, "reason": reason,
                                          "instances": 0, "calls": 0, "added_us": added_us})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values())


# --- kernel launches ------------------------------------------------------------------


def kernel_launches(prof):
    """The GPU kernels a finished ``torch.profiler.profile`` recorded (CUPTI's records: a
    CUDA graph's replay counts each kernel it holds), memory copies and sets left out. Shared
    by the profile (launches per forward of the model) and verification (per deploy mode,
    without and with the kernels)."""
    import torch

    cuda = torch.autograd.DeviceType.CUDA
    return sum(1 for e in prof.events()
               if e.device_type == cuda and not e.name.startswith(("Memcpy", "Memset", "[memory]")))


# --- matmul call sites ---------------------------------------------------------------


def matmul_layout(m):
    """How matmul module `m` hands its weight over as B [K, N]: ``"b_transposed"`` for an
    nn.Linear (``x @ weight.T``, weight stored [out, in]), ``"contiguous"`` for GPT-2's
    ``Conv1D`` (``addmm(bias, x, weight)``, weight stored [in, out]); None for any other
    module."""
    import torch

    if isinstance(m, torch.nn.Linear):
        return "b_transposed"
    w = getattr(m, "weight", None)
    if type(m).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2 \
            and getattr(m, "nf", None) == w.shape[1]:
        return "contiguous"
    return None


def matmul_plug_math(m, x, layout):
    """What a matmul plug computes for module `m` on `x` [..., K]: ``A @ B (+ bias)`` with
    A = x as [M, K] and B the module's weight in `layout` (torch's own matmul standing in
    for the kernel), reshaped to x's leading dims."""
    import torch

    a = x.reshape(-1, x.shape[-1])
    b = m.weight.t() if layout == "b_transposed" else m.weight
    out = a @ b
    if m.bias is not None:
        out = out + m.bias
    return out.reshape(*x.shape[:-1], b.shape[1])


def matmul_params(m, x):
    """``(layout, params, None)`` when matmul module `m`'s own forward on `x` matches
    ``A @ B (+ bias)`` in its layout within matmul's tolerance (params: ``has_bias``), else
    ``(layout, None, reason)`` with the measured error."""
    import torch

    layout = matmul_layout(m)
    out = _own_forward(m, x)
    if not isinstance(out, torch.Tensor):
        return layout, None, f"{type(m).__name__} returns {type(out).__name__}, not a tensor"
    with torch.no_grad():
        ref = matmul_plug_math(m, x, layout)
    excess, err = _excess(out, ref, "matmul")
    if excess > 0:
        return layout, None, f"{type(m).__name__}'s forward differs from A @ B (+ bias) by {err:.3g}"
    return layout, {"has_bias": m.bias is not None}, None


def matmul_problem(m, x):
    """The problem shape ``(M, N, K)`` of matmul module `m` called on `x` [..., K]: M the
    rows of x, N the module's output features (an nn.Linear's weight is [N, K], a Conv1D's
    [K, N])."""
    k = int(x.shape[-1])
    n = int(m.weight.shape[0 if matmul_layout(m) == "b_transposed" else 1])
    return (x.numel() // max(k, 1), n, k)


def capture_matmul_inputs(model, forward, skip=()):
    """:func:`capture_module_inputs` of the matmul modules (nn.Linear, Conv1D), problem
    shapes ``(M, N, K)``; modules in `skip` (the projections of a gated MLP planned as a
    whole, :func:`mlp_linears`) are left out."""
    skip = set(map(id, skip))
    return capture_module_inputs(model, forward, lambda m: id(m) not in skip and matmul_layout(m) is not None,
                                 matmul_problem)


def matmul_call_sites(model, forward, skip=()):
    """The matmul call sites of `model` in one `forward()` (nn.Linear and GPT-2's Conv1D,
    but those in `skip`): one entry per (class, layout, parameters, problem shape [M, N,
    K], dtype) with the module instances and calls behind it, each pluggable (`params`:
    ``has_bias``) or not (`reason`). The planner plans one matmul target per matched site
    (``autokernel_profiler::rank``)."""
    seen = capture_matmul_inputs(model, forward, skip)
    sites = {}
    for m, (x, shapes, dtype, calls) in seen.items():
        try:
            layout, params, reason = matmul_params(m, x)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            layout, params, reason = matmul_layout(m), None, f"its forward raised {type(e).__name__}: {e}"
        for shape in shapes:
            key = (type(m).__name__, layout, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": "matmul", "params": params,
                                          "layout": layout, "shape": list(shape), "dtype": dtype,
                                          "reason": reason, "instances": 0, "calls": 0})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values())


# --- gated MLP call sites: the activation decided by each module's own forward ----------

# The projections of a gated MLP module, by attribute name: (gate, up, down).
_MLP_NAMES = [("gate_proj", "up_proj", "down_proj"), ("w_gate", "w_up", "w_down")]
# fused_mlp's `activation` values, in the order a tie is decided (the default first).
MLP_ACTIVATIONS = ("silu", "gelu_tanh")


def mlp_projections(m):
    """``(gate, up, down)``: the bias-free nn.Linear projections of a gated MLP module
    (``gate_proj/up_proj/down_proj`` as HF's LlamaMLP and GemmaMLP, or ``w_gate/w_up/w_down``),
    gate and up [intermediate, hidden], down [hidden, intermediate]; None for any other
    module."""
    import torch

    for names in _MLP_NAMES:
        parts = [getattr(m, n, None) for n in names]
        if not all(isinstance(p, torch.nn.Linear) and p.bias is None for p in parts):
            continue
        gate, up, down = parts
        if gate.weight.shape == up.weight.shape and down.weight.shape == gate.weight.shape[::-1]:
            return gate, up, down
    return None


def mlp_problem(m, x):
    """The fused_mlp problem ``(tokens, hidden, intermediate)`` of gated MLP `m` on x [...,
    hidden]."""
    gate = mlp_projections(m)[0]
    return (x.numel() // max(int(x.shape[-1]), 1), int(gate.weight.shape[1]), int(gate.weight.shape[0]))


def mlp_params(m, x):
    """``(params, None)`` when gated MLP module `m`'s own forward on x matches
    ``down(act(gate(x)) · up(x))`` (``catalogue.mlp_model_code``) for one fused_mlp
    activation within the kind's tolerance (params: ``activation``, the closest), else
    ``(None, reason)`` with the smallest error measured. The activation cannot be read from
    an attribute (transformers 5 applies it through a module, ``act_fn``; others call
    ``F.silu``), so it is decided by running the module."""
    import torch

    catalogue = _catalogue()
    gate, up, down = mlp_projections(m)
    out = _own_forward(m, x)
    if not isinstance(out, torch.Tensor):
        return None, f"{type(m).__name__} returns {type(out).__name__}, not a tensor"
    scored = []
    with torch.no_grad():
        for act in MLP_ACTIVATIONS:
            ref = catalogue.mlp_model_code(x, gate.weight, up.weight, down.weight, act)
            excess, err = _excess(out, ref, "fused_mlp")
            scored.append((excess > 0, err, act))
    fits = [s for s in scored if not s[0]]
    if not fits:
        err = min(s[1] for s in scored)
        return None, (f"{type(m).__name__}'s forward matches no gated MLP down(act(gate(x)) · up(x)) "
                      f"(act {' or '.join(MLP_ACTIVATIONS)}): error {err:.3g} at best")
    return {"activation": min(fits, key=lambda s: s[1])[2]}, None


def capture_mlp_inputs(model, forward):
    """:func:`capture_module_inputs` of the gated MLP modules, problem shapes ``(tokens,
    hidden, intermediate)``."""
    return capture_module_inputs(model, forward, lambda m: mlp_projections(m) is not None, mlp_problem)


def mlp_call_sites(model, forward):
    """The gated MLP call sites of `model` in one `forward()`: ``(sites, matched)``, one
    site per (class, parameters, problem shape [tokens, hidden, intermediate], dtype) with
    the module instances and calls behind it, each pluggable (`params`: ``activation``) or
    not (`reason`, with the measured error); `matched` the modules that matched, which the
    profiler times as a whole and whose projections are no matmul call sites. The planner
    plans one fused_mlp target per matched site (``autokernel_profiler::rank``)."""
    sites, matched = {}, []
    for m, (x, shapes, dtype, calls) in capture_mlp_inputs(model, forward).items():
        try:
            params, reason = mlp_params(m, x)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            params, reason = None, f"its forward raised {type(e).__name__}: {e}"
        if params is not None:
            matched.append(m)
        for shape in shapes:
            key = (type(m).__name__, json.dumps(params, sort_keys=True), shape, dtype, reason)
            site = sites.setdefault(key, {"module": type(m).__name__, "kind": "fused_mlp", "params": params,
                                          "shape": list(shape), "dtype": dtype, "reason": reason,
                                          "instances": 0, "calls": 0})
            site["instances"] += 1
            site["calls"] += calls
    return list(sites.values()), matched


def mlp_linears(modules):
    """The projections of the gated MLP `modules` (what ``matmul_call_sites`` skips)."""
    return [p for m in modules for p in mlp_projections(m)]


# --- attention call sites: causal, scale, K/V heads and mask read from each call ----------

# The call site name of a direct `torch.nn.functional.scaled_dot_product_attention` call.
SDPA_SITE = "F.scaled_dot_product_attention"


def _masked(m):
    """Where an additive mask drops a key: −inf, or a value below half the dtype's lowest
    (transformers fills with `finfo.min`)."""
    import torch

    return (m == float("-inf")) | (m <= torch.finfo(m.dtype).min / 2)


def attention_params(q, k, v, mask, dropout, causal, scale):
    """The flash_attention parameters of one attention call: ``(params, padding, None)``
    when the kernel computes it (``padding`` the additive ``[batch, seq]`` mask to hand it,
    or None), else ``(None, None, reason)``.

    q [batch, heads, q_len, head_dim] and k, v [batch, kv_heads, k_len, head_dim] as the
    attention function receives them; `mask` as it passes them on to SDPA (None, boolean:
    True keeps a key, or additive) and `causal` the causal flag SDPA gets. A mask constant
    along the query (BERT's padding, `[b,1,1,k]` or `[b,1,q,k]`) becomes the kernel's
    ``[batch, seq]`` additive mask (a boolean one as ``where(m, 0, -inf)``); a mask that is
    exactly the causal pattern becomes ``causal``; any other mask, dropout, differing query
    and key lengths or head dims are not supported, and the reason says which.
    """
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return None, None, f"Q/K/V of {q.dim()}/{k.dim()}/{v.dim()} dims, not [batch, heads, seq, head_dim]"
    b, h, s, d = q.shape
    if dropout:
        return None, None, f"dropout {dropout:g}"
    if k.shape[2] != s:
        return None, None, f"query length {s} and key length {k.shape[2]} differ (a KV cache or cross-attention)"
    if tuple(v.shape) != tuple(k.shape) or k.shape[0] != b or k.shape[3] != d:
        return None, None, f"Q {tuple(q.shape)}, K {tuple(k.shape)} and V {tuple(v.shape)} do not fit one problem"
    if h % k.shape[1]:
        return None, None, f"{k.shape[1]} K/V heads do not divide {h} query heads"
    default = 1.0 / math.sqrt(d)
    params = {"causal": bool(causal),
              "scale": None if scale is None or math.isclose(float(scale), default, rel_tol=1e-6) else float(scale),
              "kv_heads": int(k.shape[1]) if k.shape[1] < h else None,
              "has_mask": False}
    if mask is None:
        return params, None, None
    if mask.dtype == torch.bool:
        add = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    else:
        add = mask
    m = add.reshape((1,) * (4 - add.dim()) + tuple(add.shape)) if add.dim() <= 4 else add
    if m.dim() != 4 or m.shape[1] != 1 or m.shape[0] not in (1, b) or m.shape[3] != s or m.shape[2] not in (1, s):
        return None, None, f"a {str(mask.dtype).replace('torch.', '')} mask of shape {list(mask.shape)}"
    if causal:
        return None, None, "a mask together with is_causal"
    masked = _masked(m)
    if m.shape[2] != 1 and not bool(((m == m[:, :, :1]) | (masked & masked[:, :, :1])).all()):
        tril = torch.ones(s, s, dtype=torch.bool, device=m.device).tril()
        if bool((masked == ~tril).all()) and bool((m.masked_fill(masked, 0) == 0).all()):
            params["causal"] = True  # the causal pattern spelled out as a mask
            return params, None, None
        if bool((masked | tril).all()):
            return None, None, f"a padding mask combined with causal masking ({list(mask.shape)})"
        return None, None, f"a mask of shape {list(mask.shape)} that varies along the query"
    row = m[:, 0, 0, :]
    padding = row.masked_fill(_masked(row), float("-inf")).to(q.dtype).expand(b, s).contiguous()
    params["has_mask"] = True
    return params, padding, None


def _hf_attention(model):
    """``(configs, interface, mask interface)`` when `model` is a transformers model whose
    attention goes through the attention-function registry (``config._attn_implementation``),
    else None. `configs` are the distinct configs of the model's modules, each with the
    implementation its attention modules look up."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        return None
    try:
        from transformers.masking_utils import AttentionMaskInterface
        from transformers.modeling_utils import AttentionInterface
    except ImportError:
        return None
    configs = {}
    for m in model.modules():
        c = getattr(m, "config", None)
        if c is not None and hasattr(c, "_attn_implementation"):
            configs[id(c)] = c
    return list(configs.values()), AttentionInterface, AttentionMaskInterface


@contextlib.contextmanager
def hf_attention_function(model, make):
    """Routes `model`'s attention through ``make(original)`` for the duration: a function
    registered under a name of its own in transformers' attention registry (and the mask
    function of the model's implementation under the same name, so that the model builds
    the masks it built before), with the model's configs pointed at it, restored after.
    `original(module, query, key, value, attention_mask, **kwargs)` is what the model
    called before. Other models keep theirs: the name is this model's only. Yields False
    (and changes nothing) when the model does not go through the registry."""
    import sys

    hf = _hf_attention(model)
    if hf is None:
        yield False
        return
    configs, interface, mask_interface = hf
    before = [(c, c._attn_implementation) for c in configs]
    name = f"autokernel_{next(_HF_NAMES)}"

    def original(module, *args, **kwargs):
        impl = before[0][1] or "eager"
        if impl == "eager" or impl not in interface._global_mapping:
            own = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
            fn = interface._global_mapping.get(impl, own)
        else:
            fn = interface._global_mapping[impl]
        return fn(module, *args, **kwargs)

    impl = before[0][1] or "eager"
    mask_fn = mask_interface._global_mapping.get(impl, mask_interface._global_mapping.get("sdpa"))
    if impl == "sdpa":
        mask_fn = _causal_skip_while_tracing(mask_fn)
    interface._global_mapping[name] = make(original)
    mask_interface._global_mapping[name] = mask_fn
    try:
        for c in configs:
            c._attn_implementation_internal = name
        yield True
    finally:
        for c, was in before:
            c._attn_implementation_internal = was
        interface._global_mapping.pop(name, None)
        mask_interface._global_mapping.pop(name, None)


def _causal_skip_while_tracing(sdpa_mask):
    """transformers' SDPA mask function, returning no mask (SDPA's `is_causal` instead) for a
    plain causal mask (no padding, no offset, as many keys as queries) also while torch.compile
    traces or a CUDA graph captures. Outside those, ``sdpa_mask`` itself makes that choice
    (``masking_utils._ignore_causal_mask_sdpa``); while tracing it materializes the mask, to keep
    a graph exported at one length from hard-coding `is_causal` (a compiled graph is guarded on
    the lengths instead). Without this, the attention call of a compiled or captured causal LM
    carries a mask that no plug can read there, and never takes the kernel."""
    import functools

    from transformers.masking_utils import causal_mask_function

    @functools.wraps(sdpa_mask)
    def mask(*args, **kwargs):
        if (not args and kwargs.get("allow_is_causal_skip", True) and kwargs.get("attention_mask") is None
                and kwargs.get("mask_function", causal_mask_function) is causal_mask_function
                and kwargs.get("local_size") is None and kwargs.get("q_offset", 0) == 0
                and kwargs.get("kv_offset", 0) == 0 and kwargs.get("q_length") is not None
                and kwargs.get("q_length") == kwargs.get("kv_length")):
            return None
        return sdpa_mask(*args, **kwargs)

    return mask


# The numbers of the names `hf_attention_function` registers: one per use, never reused.
_HF_NAMES = __import__("itertools").count()


def _hf_call(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """What transformers' SDPA attention (``sdpa_attention_forward``) hands SDPA for one call
    through the registry: ``(mask, dropout, causal, scale, reason)``; `reason` names what the
    kernel cannot take (a position bias)."""
    if kwargs.get("position_bias") is not None:
        return None, dropout, False, scaling, "a position bias (T5-style relative attention)"
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    return attention_mask, dropout, causal, scaling, None


class _AttentionCall:
    """One captured attention call: the site it belongs to (`site`, a key), the module that
    made it (`owner`, None for a direct SDPA call) and, for the first call of each site,
    what a plug check needs: `params`, the problem `q`, `k`, `v`, the additive `padding`
    mask (or None) and `out`, the model's own attention output as [batch, heads, seq,
    head_dim] (None for the later calls of a site, to keep one forward's activations only
    once per site)."""

    def __init__(self, site, owner, params=None, q=None, k=None, v=None, padding=None, out=None):
        self.site, self.owner, self.params = site, owner, params
        self.q, self.k, self.v, self.padding, self.out = q, k, v, padding, out


def capture_attention_calls(model, forward):
    """Runs `forward()` once recording every attention call of `model`: through
    transformers' attention registry (the model's own function wrapped, see
    `hf_attention_function`), and direct ``F.scaled_dot_product_attention`` calls outside
    it. Returns a list of ``(site key, site fields, call)`` with `call` an `_AttentionCall`
    whose first of each site keeps its inputs."""
    import torch
    import torch.nn.functional as F

    calls = []
    seen = set()
    inside = [0]

    def record(site_name, owner, q, k, v, mask, dropout, causal, scale, reason, out):
        padding = None
        if reason is None:
            params, padding, reason = attention_params(q, k, v, mask, dropout, causal, scale)
        else:
            params = None
        dtype = str(q.dtype).replace("torch.", "")
        shape = [int(x) for x in q.shape]
        key = (site_name, json.dumps(params, sort_keys=True), tuple(shape), dtype, reason)
        call = _AttentionCall(key, owner)
        if key not in seen and params is not None:
            seen.add(key)
            call = _AttentionCall(key, owner, params, q.detach().clone(), k.detach().clone(), v.detach().clone(),
                                  padding, out.detach().clone())
        calls.append((key, {"module": site_name, "kind": "flash_attention", "params": params, "shape": shape,
                            "dtype": dtype, "reason": reason}, call))

    def make(original):
        def captured(module, query, key, value, attention_mask, *args, **kwargs):
            inside[0] += 1
            try:
                out = original(module, query, key, value, attention_mask, *args, **kwargs)
            finally:
                inside[0] -= 1
            named = dict(zip(("dropout", "scaling"), args), **kwargs)
            mask, dropout, causal, scale, reason = _hf_call(module, query, key, value, attention_mask, **named)
            # transformers' functions return (output [batch, seq, heads, head_dim], weights)
            record(type(module).__name__, module, query, key, value, mask, dropout, causal, scale, reason,
                   out[0].transpose(1, 2))
            return out
        return captured

    sdpa = F.scaled_dot_product_attention

    def direct(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        out = sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                   **kw)
        if not inside[0]:
            reason = None
            if not kw.get("enable_gqa", False) and key.shape[1] != query.shape[1]:
                reason = "K/V with fewer heads than Q without enable_gqa"
            record(SDPA_SITE, None, query, key, value, attn_mask, dropout_p, is_causal, scale, reason, out)
        return out

    F.scaled_dot_product_attention = direct
    try:
        with hf_attention_function(model, make):
            with torch.no_grad():
                forward()
    finally:
        F.scaled_dot_product_attention = sdpa
    return calls


def attention_call_sites(model, forward):
    """The attention call sites of `model` in one `forward()`: one entry per (function or
    attention module class, parameters, shape [batch, heads, seq, head_dim], dtype) with
    its calls, each either pluggable (`params`) or not (`reason`). What the planner plans
    flash_attention targets from (``autokernel_profiler::rank``)."""
    sites, owners = {}, {}
    for key, fields, call in capture_attention_calls(model, forward):
        site = sites.setdefault(key, dict(fields, instances=0, calls=0))
        site["calls"] += 1
        # a direct SDPA call has no module: each call counts as its own instance
        mine = owners.setdefault(key, set())
        mine.add(id(call.owner) if call.owner is not None else len(mine))
        site["instances"] = len(mine)
    return list(sites.values())


# --- rotary call sites: the pairing decided by the model's own function or module ----------

# The module-level rotary function of transformers' models (``modeling_llama`` and the
# models copied from it): ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``, Q and K
# together, cos/sin [batch, seq, head_dim] with the halves duplicated.
ROTARY_FUNCTION = "apply_rotary_pos_emb"
# rotary_embedding's `pairing` values, in the order a tie is decided (the default first).
ROTARY_PAIRINGS = ("interleaved", "half_split")


def rotary_function_modules(model):
    """The Python modules of `model`'s classes that define a module-level
    ``apply_rotary_pos_emb`` (transformers' ``modeling_<model>``), which the model's
    attention looks up by name at each call: what a wrapper of the function replaces."""
    import sys

    found = {}
    for m in model.modules():
        mod = sys.modules.get(type(m).__module__)
        if mod is not None and callable(getattr(mod, ROTARY_FUNCTION, None)):
            found[mod.__name__] = mod
    return list(found.values())


@contextlib.contextmanager
def hf_rotary_function(model, make):
    """Replaces ``apply_rotary_pos_emb`` in each module of :func:`rotary_function_modules`
    by ``make(original)`` for the duration, restored after (the profiler's capture and its
    timed ranges; a plug uses ``plugs``' per-instance dispatcher instead). Yields the
    modules changed (empty: the model has no such function)."""
    mods = rotary_function_modules(model)
    before = [(mod, getattr(mod, ROTARY_FUNCTION)) for mod in mods]
    try:
        for mod, original in before:
            setattr(mod, ROTARY_FUNCTION, make(original))
        yield mods
    finally:
        for mod, original in before:
            setattr(mod, ROTARY_FUNCTION, original)


def rotary_half_tables(cos, sin, pairing, check=True):
    """The kernel's tables ``[seq, head_dim/2]`` from the full-width tables a rotary
    function gets (HF: ``[1, seq, head_dim]`` or ``[seq, head_dim]``, each angle twice):
    the first half for ``half_split`` (``cos[..., :d/2]``, the tables being ``cat(f, f)``),
    the even lanes for ``interleaved`` (the tables being ``f`` repeated lane by lane).
    None when the tables have a batch of more than one (positions per row) or, with `check`,
    their halves (lanes) are not the duplicates this pairing assumes."""
    import torch

    if cos.shape != sin.shape or cos.dim() not in (2, 3) or (cos.dim() == 3 and cos.shape[0] != 1) \
            or cos.shape[-1] % 2:
        return None
    c, s = cos.reshape(cos.shape[-2], cos.shape[-1]), sin.reshape(sin.shape[-2], sin.shape[-1])
    half = c.shape[-1] // 2
    if pairing == "half_split":
        first = (c[:, :half], s[:, :half])
        second = (c[:, half:], s[:, half:])
    else:
        first = (c[:, 0::2], s[:, 0::2])
        second = (c[:, 1::2], s[:, 1::2])
    if check and not (torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])):
        return None
    return first[0].contiguous(), first[1].contiguous()


def rotary_module(m):
    """Whether `m` is a rotary embedding module: its class name says rotary or RoPE and it
    holds a 1-D ``inv_freq`` (the inverse frequencies of its angles, ``θ_i``)."""
    import torch

    name = type(m).__name__.lower()
    inv = getattr(m, "inv_freq", None)
    return ("rotary" in name or "rope" in name) and isinstance(inv, torch.Tensor) and inv.dim() == 1 \
        and inv.is_floating_point()


def rotary_module_tables(m, seq, dtype, device):
    """The tables ``[seq, head_dim/2]`` of rotary module `m` at positions ``0..seq-1``: the
    cos and sin of ``outer(positions, inv_freq)`` computed in float32 and cast to `dtype`,
    as the bundled llama's ``RotaryEmbedding`` and HF's rotary embeddings compute them."""
    import torch

    t = torch.arange(seq, device=device, dtype=torch.float32)
    freqs = torch.outer(t, m.inv_freq.to(device=device, dtype=torch.float32))
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def _best_pairing(cls, pairs):
    """``(params, None)`` for the pairing whose reference fits every ``(x, out, tables)`` of
    `pairs` (``{pairing: [(x, out, (cos, sin)), ...]}``, the pairings whose tables exist)
    with the smallest error, else ``(None, reason)`` with the error at best."""
    catalogue = _catalogue()
    scored = []
    for pairing, cases in pairs.items():
        worst_excess, worst_err = float("-inf"), 0.0
        for x, out, (c, s) in cases:
            excess, err = _excess(out, catalogue.rotary_model_code(x, c, s, pairing), "rotary_embedding")
            worst_excess, worst_err = max(worst_excess, excess), max(worst_err, err)
        scored.append((worst_excess > 0, worst_err, pairing))
    fits = [s for s in scored if not s[0]]
    if fits:
        return {"pairing": min(fits, key=lambda s: s[1])[2]}, None
    if not scored:
        return None, (f"{cls}'s cos/sin tables are neither two equal halves (half_split) nor lanes repeated in "
                      f"pairs (interleaved), or have positions per batch row")
    err = min(s[1] for s in scored)
    return None, (f"{cls} matches no rotary pairing ({' or '.join(ROTARY_PAIRINGS)}) with its own cos/sin tables: "
                  f"error {err:.3g} at best")


def rotary_function_params(q, k, cos, sin, out, extra):
    """``(params, None)`` when one ``apply_rotary_pos_emb(q, k, cos, sin)`` call returning
    `out` (its ``(q_embed, k_embed)``) is the kernel applied to Q and to K with the tables
    :func:`rotary_half_tables` takes from cos/sin at the pairing in params; else ``(None,
    reason)``. `extra` holds the call's other arguments (only ``unsqueeze_dim=1``, Q/K as
    [batch, heads, seq, head_dim], is taken)."""
    import torch

    cls = ROTARY_FUNCTION
    if any(v != 1 for v in extra.values()):
        return None, f"{cls} called with {extra} (only unsqueeze_dim=1: Q/K [batch, heads, seq, head_dim])"
    if not all(isinstance(t, torch.Tensor) for t in (q, k, cos, sin)) or q.dim() != 4 or k.dim() != 4:
        return None, f"{cls} called on other than 4-D Q/K tensors"
    if q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:] or q.shape[-1] % 2:
        return None, f"{cls} with Q {list(q.shape)} and K {list(k.shape)} (not one seq and even head_dim)"
    if cos.shape[-2:] != q.shape[-2:]:
        return None, f"{cls} with cos/sin {list(cos.shape)} for Q {list(q.shape)}"
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return None, f"{cls} returns {type(out).__name__}, not (q_embed, k_embed)"
    pairs = {}
    for pairing in ROTARY_PAIRINGS:
        tables = rotary_half_tables(cos, sin, pairing)
        if tables is not None:
            pairs[pairing] = [(q, out[0], tables), (k, out[1], tables)]
    return _best_pairing(cls, pairs)


def rotary_module_params(m, args, kwargs, out):
    """``(params, None)`` when rotary module `m` called as ``m(x)`` returning `out` is the
    kernel applied to x [batch, heads, seq, head_dim] with :func:`rotary_module_tables` at
    the pairing in params; else ``(None, reason)`` (HF's rotary embeddings return their
    cos/sin tables, applied by ``apply_rotary_pos_emb``: that is where they are plugged)."""
    import torch

    cls = type(m).__name__
    x = args[0] if args else None
    if not isinstance(out, torch.Tensor):
        what = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        return None, (f"{cls} returns {what} (the cos/sin tables a rotary function applies, "
                      f"e.g. {ROTARY_FUNCTION}), not x rotated")
    if len(args) != 1 or kwargs or not isinstance(x, torch.Tensor) or x.dim() != 4:
        return None, f"{cls} is called with more than one x [batch, heads, seq, head_dim]"
    if out.shape != x.shape or 2 * m.inv_freq.numel() != x.shape[-1]:
        return None, f"{cls} maps {list(x.shape)} to {list(out.shape)} with {m.inv_freq.numel()} frequencies"
    tables = rotary_module_tables(m, x.shape[-2], x.dtype, x.device)
    return _best_pairing(cls, {p: [(x, out, tables)] for p in ROTARY_PAIRINGS})


class _RotaryCall:
    """One captured rotary call: the site it belongs to (`site`, a key), its `owner` (the
    rotary module, or the Python module whose ``apply_rotary_pos_emb`` was called), its
    `params` (None: `reason`), and, for the first call of each site, what a plug check needs:
    `cases`, the ``(x, out)`` pairs of the tensors it rotated (Q and K, or the module's x)
    and `tables`, the ``(cos, sin)`` full-width tables a function got (None for a module)."""

    def __init__(self, site, owner, params, reason, cases=None, tables=None):
        self.site, self.owner, self.params, self.reason = site, owner, params, reason
        self.cases, self.tables = cases, tables


def capture_rotary_calls(model, forward):
    """Runs `forward()` once recording every rotary call of `model`: the rotary modules'
    (:func:`rotary_module`, with a forward hook) and the calls of a module-level
    ``apply_rotary_pos_emb`` (:func:`hf_rotary_function`). Returns a list of ``(site key,
    site fields, call)``, one per rotated tensor shape of each call, `call` a
    :class:`_RotaryCall` whose first of each site keeps its inputs and outputs."""
    import torch

    calls, seen = [], set()

    def record(name, owner, params, reason, cases, tables, dtype):
        shapes = []
        for x, _out in cases:
            shape = [int(d) for d in x.shape] if isinstance(x, torch.Tensor) else []
            if shape not in shapes:
                shapes.append(shape)
        first = (name, json.dumps(params, sort_keys=True), json.dumps(shapes), dtype, reason)
        keep = first not in seen and params is not None
        seen.add(first)
        for x, _out in cases:
            shape = [int(d) for d in x.shape] if isinstance(x, torch.Tensor) else []
            key = (name, json.dumps(params, sort_keys=True), tuple(shape), dtype, reason)
            kept = [(a.detach().clone(), b.detach().clone()) for a, b in cases] if keep else None
            call = _RotaryCall(key, owner, params, reason, kept,
                               tuple(t.detach().clone() for t in tables) if keep and tables else None)
            keep = False
            calls.append((key, {"module": name, "kind": "rotary_embedding", "params": params, "shape": shape,
                                "dtype": dtype, "reason": reason}, call))

    def module_hook(m, args, kwargs, out):
        x = args[0] if args else None
        try:
            params, reason = rotary_module_params(m, args, kwargs, out)
        except Exception as e:  # noqa: BLE001 - a module the matcher cannot run is not pluggable
            params, reason = None, f"its forward raised {type(e).__name__}: {e}"
        dtype = str(x.dtype).replace("torch.", "") if isinstance(x, torch.Tensor) else "unknown"
        out_t = out if isinstance(out, torch.Tensor) else None
        cases = [(x, out_t)] if isinstance(x, torch.Tensor) and out_t is not None else []
        if not cases and isinstance(x, torch.Tensor):
            cases = [(x, x)]  # the shape of a module that returns no rotated x, for the site
        record(type(m).__name__, m, params, reason, cases, None, dtype)

    def make(original):
        def captured(q, k, cos, sin, *args, **kwargs):
            out = original(q, k, cos, sin, *args, **kwargs)
            extra = dict(zip(("unsqueeze_dim",), args), **kwargs)
            try:
                params, reason = rotary_function_params(q, k, cos, sin, out, extra)
            except Exception as e:  # noqa: BLE001 - a call the matcher cannot read is not pluggable
                params, reason = None, f"matching it raised {type(e).__name__}: {e}"
            cases = [(q, out[0]), (k, out[1])] if isinstance(out, (tuple, list)) and len(out) == 2 else []
            owner = owners.get(id(original), original)
            record(ROTARY_FUNCTION, owner, params, reason, cases, (cos, sin),
                   str(q.dtype).replace("torch.", "") if isinstance(q, torch.Tensor) else "unknown")
            return out
        return captured

    # the Python module whose function each original is: the owner of its calls
    owners = {id(getattr(mod, ROTARY_FUNCTION)): mod for mod in rotary_function_modules(model)}
    hooks = [m.register_forward_hook(module_hook, with_kwargs=True) for m in model.modules() if rotary_module(m)]
    try:
        with hf_rotary_function(model, make):
            with torch.no_grad():
                forward()
    finally:
        for h in hooks:
            h.remove()
    return calls


def rotary_call_sites(model, forward):
    """The rotary call sites of `model` in one `forward()`: one entry per (rotary module
    class or ``apply_rotary_pos_emb``, parameters, shape [batch, heads, seq, head_dim] of a
    rotated tensor, dtype) with its instances and calls (each rotated tensor one call: HF's
    function rotates Q and K, two calls of the kernel), each pluggable (`params`:
    ``pairing``) or not (`reason`). What the planner plans rotary_embedding targets from
    (``autokernel_profiler::rank``)."""
    sites, owners = {}, {}
    for key, fields, call in capture_rotary_calls(model, forward):
        site = sites.setdefault(key, dict(fields, instances=0, calls=0))
        site["calls"] += 1
        owners.setdefault(key, set()).add(id(call.owner))
        site["instances"] = len(owners[key])
    return list(sites.values())


def _hf_rotary_tables(model, seq, dtype, device):
    """The full-width cos/sin ``[1, seq, head_dim]`` a transformers model hands
    ``apply_rotary_pos_emb`` at positions ``0..seq-1``: its rotary embedding module (a
    :func:`rotary_module` returning the tables) called as ``m(x, position_ids)``, as the
    model calls it; None when it has no such module or the call fails."""
    import torch

    for m in model.modules():
        if not rotary_module(m):
            continue
        x = torch.zeros(1, seq, 1, dtype=dtype, device=device)
        try:
            with torch.no_grad():
                out = m(x, torch.arange(seq, device=device)[None])
        except Exception:  # noqa: BLE001 - not a table module of this calling convention
            continue
        if isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out):
            return out[0], out[1]
    return None


def probe_rotary_calls(model, shapes, dtype, seed=0):
    """Rotary calls as :func:`capture_rotary_calls` gives them, without a forward pass (an
    exported package's ``optimize(model)`` has no model inputs): for each shape [batch,
    heads, seq, head_dim] in `shapes`, a random x in `dtype` handed to each rotary module
    that rotates x (``m(x)``), and to each ``apply_rotary_pos_emb`` of the model's modules
    as Q and K with the tables of the model's own rotary embedding
    (:func:`_hf_rotary_tables`). The matcher decides each call's params from the model's
    own output, as it does for a captured call."""
    import sys

    import torch

    g = torch.Generator().manual_seed(seed)
    name = str(dtype).replace("torch.", "")
    calls = []

    def add(site, owner, params, reason, shape, cases, tables):
        key = (site, json.dumps(params, sort_keys=True), tuple(shape), name, reason)
        fields = {"module": site, "kind": "rotary_embedding", "params": params, "shape": list(shape),
                  "dtype": name, "reason": reason}
        calls.append((key, fields, _RotaryCall(key, owner, params, reason, cases, tables)))

    for shape in shapes:
        shape = [int(d) for d in shape]
        for m in model.modules():
            if not rotary_module(m):
                continue
            weight = next(iter(m.buffers()), None)
            device = weight.device if weight is not None else torch.device("cpu")
            x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
            try:
                out = _own_forward(m, x)
                params, reason = rotary_module_params(m, (x,), {}, out)
            except Exception as e:  # noqa: BLE001 - not a module that rotates x alone
                out, params, reason = None, None, f"its forward raised {type(e).__name__}: {e}"
            if params is not None:
                add(type(m).__name__, m, params, reason, shape, [(x, out)], None)
        mods = rotary_function_modules(model)
        if not mods:
            continue
        p = next(model.parameters(), None)
        device = p.device if p is not None else torch.device("cpu")
        tables = _hf_rotary_tables(model, shape[2], dtype, device)
        if tables is None:
            continue
        q = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
        for mod in mods:
            fn = getattr(mod, ROTARY_FUNCTION)
            original = getattr(getattr(fn, "__self__", None), "original", fn)  # under a plug's dispatcher
            with torch.no_grad():
                out = original(q, k, *tables)
            params, reason = rotary_function_params(q, k, *tables, out, {})
            if params is not None:
                add(ROTARY_FUNCTION, mod, params, reason, shape,
                    [(q, out[0]), (k, out[1])], tables)
    return calls
