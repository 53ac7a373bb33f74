"""The kernel catalogue's Python side: what must be Python, in one registry keyed by kind.

Every kind's facts (input names and dims, shape sets, dtypes, tolerances, output shape) are
written once, in Rust (``autokernel-core/src/catalogue.rs``); the bench worker hands them
to :func:`load_catalogue` as JSON when it starts. This module keeps, per kind, only its
input generator, its float32 reference and its eager PyTorch baseline, in
:data:`REGISTRY` (:func:`register`); the worker refuses to start when the two sides
disagree (a kind on one side only, other input names or shapes). docs/kernels.md,
"Adding a kind", lists the places a new kind touches.

Imported by the bench worker's harness (``harness.py``). Pure functions: the same
``(kind, shape, dtype, seed, mode)`` always gives bitwise the same tensors on a device.

Precision policy (one policy, applied to the reference and the candidate alike; the
harness calls :func:`apply_precision_policy` once before loading anything):

* ``torch.backends.cuda.matmul.allow_tf32 = False`` and
  ``torch.backends.cudnn.allow_tf32 = False`` (and float32 matmul precision ``"highest"``):
  a float32 matmul is an IEEE float32 matmul on both sides. A Triton candidate must do the
  same for float32 inputs (``tl.dot(..., input_precision="ieee")``); ``tl.dot``'s default
  for float32 is TF32 (10-bit mantissa), which misses the float32 tolerance (relative L2
  1e-4) by an order of magnitude.
* References are computed in float32 from float32 copies of the (already rounded) inputs,
  whatever the inputs' dtype, and return float32. A half-precision reference that overflows
  (e.g. ``x**2`` of fp16 values near 3e4 in rmsnorm) never fails a correct kernel.
* Candidates return the inputs' dtype (cross_entropy: a 0-dim float32); the only expected
  difference from the reference is the final rounding to that dtype plus float32
  accumulation in another order, which ``KernelKind::tolerance`` covers.

Modes of :func:`make_inputs` (the stability stage sweeps them): ``normal`` (standard
normal data, random non-unit weights), ``large`` (magnitudes near what the dtype holds
while the exact result, and every float32 intermediate of a straightforward kernel, stays
finite), ``small`` (near zero; a share of float16 values are subnormal), ``mixed`` (rows
whose scales differ by up to five orders of magnitude), ``zeros`` and ``constant``
(constant rows), and for softmax and cross_entropy only ``masked`` (rows with -inf
columns at the start, the end or both, at least one column kept; targets among the kept
columns). Only the *data* inputs follow the mode; weights (layernorm/rmsnorm weight
and bias, fused_mlp weights) stay random, and rotary cos/sin are always the real table.
Integer inputs (cross_entropy targets) ignore the mode.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import types
from typing import Callable, NamedTuple, Optional

MODES = ("normal", "large", "small", "mixed", "zeros", "constant", "masked")
"""Input modes accepted by :func:`make_inputs` (``masked`` only by kinds whose catalogue
entry has ``masked_rows``)."""


class Kind(NamedTuple):
    """What must be Python about one kind (immutable: the harness keeps its own copy).

    ``make_inputs(dims, dtype, g, mode)`` returns float32 (or int64) tensors keyed by the
    catalogue's input names, generated with the ``torch.Generator`` `g` on the current
    default device; :func:`make_inputs` rounds the float ones to `dtype`.
    ``reference(inputs)`` computes the output in float32 from float32 copies.
    ``eager(inputs)`` is the PyTorch a user would run in the inputs' dtype (the speedup's
    baseline); ``None`` times the reference instead.

    A kind whose catalogue entry declares ``params`` gets them too, as a dict with every
    parameter (defaults filled): ``make_inputs(dims, dtype, g, mode, params)``,
    ``reference(inputs, params, dtype)`` (`dtype`: the judged dtype, for references that
    round an intermediate as the model does) and ``eager(inputs, params)``.
    """

    make_inputs: Callable
    reference: Callable
    eager: Optional[Callable] = None


REGISTRY: dict = {}
"""Kind name → :class:`Kind`; filled by :func:`register` (built-ins below, extension
modules the worker imports after them)."""

_SPECS = types.MappingProxyType({})


def register(name: str, *, make_inputs: Callable, reference: Callable, eager: Optional[Callable] = None) -> None:
    """Registers kind `name`'s Python side; `name` must also be in the catalogue."""
    if name in REGISTRY:
        raise ValueError(f"kind {name!r} is registered twice")
    REGISTRY[name] = Kind(make_inputs, reference, eager)


def load_catalogue(text: str) -> None:
    """Takes the catalogue JSON the worker was started with (``Catalogue::to_json``)."""
    global _SPECS
    import json

    _SPECS = types.MappingProxyType({k["name"]: k for k in json.loads(text)["kinds"]})


def param_defaults(kind: str) -> dict:
    """Every parameter of `kind` at its default (``ParamSpec::default``); empty for a kind
    without parameters."""
    return {p["name"]: p["default"] for p in spec(kind).get("params", [])}


def resolve_params(kind: str, params) -> Optional[dict]:
    """`params` over the kind's defaults (a name the kind does not declare raises
    ValueError, naming the ones it has); None for a kind without parameters, whose
    registry functions take none."""
    defaults = param_defaults(kind)
    given = dict(params or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"{kind} has no parameter {unknown[0]!r}; its parameters are "
                         f"{', '.join(defaults) or 'none'}")
    if not defaults:
        return None
    return {**defaults, **given}


def spec(kind: str) -> dict:
    """The catalogue entry of `kind` (``KindSpec`` as JSON). Raises ValueError when the
    kind is not in the catalogue."""
    try:
        return _SPECS[kind]
    except KeyError:
        raise ValueError(f"unknown kernel kind {kind!r}; expected one of {', '.join(_SPECS)}") from None


LAYOUTS = ("contiguous", "b_transposed")
"""Memory layouts accepted by :func:`make_inputs` (``autokernel_core::Layout``)."""

RMSNORM_EPS = 1e-6
"""Default epsilon of rmsnorm (its ``eps`` parameter): ``x / sqrt(mean(x²) + 1e-6) · w``."""

LAYERNORM_EPS = 1e-5
"""Default epsilon of layernorm (its ``eps`` parameter; PyTorch's ``nn.LayerNorm`` default)."""

_HALF = (torch.float16, torch.bfloat16)


def rmsnorm_model_code(x, weight, eps, weight_offset=0, cast_order="float32"):
    """RMSNorm over the last dim exactly as the model code of each cast order computes it,
    in the tensors' own dtypes (transformers 5.17, ``modeling_*.py``):

    - ``float32`` (GemmaRMSNorm): ``x̂ = x.float() · rsqrt(mean(x.float()²) + eps)``, times
      ``(offset + w.float())``, cast to x's dtype at the end;
    - ``llama`` (LlamaRMSNorm): ``x̂`` in float32, cast to x's dtype, then
      ``(offset + w) · x̂`` (promotion decides the output dtype);
    - ``t5`` (T5LayerNorm): ``x · rsqrt(mean(x.float()²) + eps)`` (float32), cast to the
      weight's dtype when that is float16 or bfloat16, then ``(offset + w) · x̂``.

    The eager baseline of rmsnorm and what the model matcher compares a module with.
    """
    var = x.float().pow(2).mean(-1, keepdim=True)
    if cast_order == "float32":
        h = x.float() * torch.rsqrt(var + eps)
        return (h * (weight_offset + weight.float())).to(x.dtype)
    w = weight + weight_offset if weight_offset else weight
    if cast_order == "llama":
        return w * (x.float() * torch.rsqrt(var + eps)).to(x.dtype)
    h = x * torch.rsqrt(var + eps)
    if weight.dtype in _HALF:
        h = h.to(weight.dtype)
    return w * h

def gate_activation(g, activation="silu"):
    """A gated MLP's activation of the gate pre-activation `g`, fused_mlp's ``activation``:
    ``silu`` (SwiGLU) ``g·sigmoid(g)``; ``gelu_tanh`` (GeGLU, transformers'
    ``gelu_pytorch_tanh``) ``0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))``."""
    if activation == "silu":
        return F.silu(g)
    if activation == "gelu_tanh":
        return F.gelu(g, approximate="tanh")
    raise ValueError(f"unknown fused_mlp activation {activation!r}; expected silu or gelu_tanh")


def mlp_model_code(x, w_gate, w_up, w_down, activation="silu"):
    """A gated MLP as the models write it, in the tensors' own dtype: ``down(act(gate(x)) ·
    up(x))`` with bias-free ``F.linear`` (weights stored [out, in]; transformers 5.17
    ``LlamaMLP``, ``GemmaMLP``). The eager baseline of fused_mlp and what the model matcher
    compares a module with."""
    return F.linear(gate_activation(F.linear(x, w_gate), activation) * F.linear(x, w_up), w_down)


ROTARY_PAIRINGS = ("interleaved", "half_split")
"""rotary_embedding's ``pairing`` values, the default first (``autokernel_core`` catalogue)."""


def rotary_model_code(x, cos, sin, pairing="interleaved"):
    """Rotary position embedding of one tensor `x` [..., seq, head_dim] as the models write
    it, in the tensors' own dtypes, with cos/sin [seq, head_dim/2] (the angle of pair i at
    position s): ``interleaved`` rotates the pairs ``(x[..., 2i], x[..., 2i+1])`` (RoFormer,
    the bundled llama example's ``RotaryEmbedding``); ``half_split`` the pairs ``(x[..., i],
    x[..., i + head_dim/2])``, which is HF transformers' ``x·cos + rotate_half(x)·sin``
    with its duplicated-halves tables ``cat(cos, cos)`` (5.17 ``modeling_llama``). The eager
    baseline and reference of rotary_embedding and what the model matcher compares a rotary
    function or module with."""
    if pairing == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    if pairing == "half_split":
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    raise ValueError(f"unknown rotary_embedding pairing {pairing!r}; expected {' or '.join(ROTARY_PAIRINGS)}")


ROTARY_BASE = 10000.0
"""Base of the rotary frequencies ``θ_i = base^(−2i/d)`` (RoFormer, Su et al. 2021, eq. 15)."""

# Largest |value| of a "large" data input: near float16's max (65504) for float16; for the
# 8-bit-exponent dtypes (float32, bfloat16) a magnitude whose square times a row length
# stays far below float32's max (3.4e38), so a float32 kernel (and the float32 reference)
# computing x² or q·k stays finite.
_LARGE = types.MappingProxyType({torch.float16: 3.0e4, torch.bfloat16: 1.0e15, torch.float32: 1.0e15})
# Scale of a "small" data input: 1e-3, where float16 starts to be subnormal (< 6.1e-5) for
# a few percent of the values.
_SMALL = 1.0e-3


def apply_precision_policy() -> None:
    """Applies the precision policy of this module's docstring (no TF32 anywhere).

    Call once in the worker before any reference or candidate runs. Idempotent.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def patch_triton_interpreter() -> bool:
    """Makes Triton 3.6's interpreter run loops with runtime bounds under numpy ≥ 2.4.

    The interpreter holds a scalar kernel argument as a 1-element array and converts it
    with ``int(array)``, which numpy 2.4 rejects ("only 0-dimensional arrays can be
    converted to Python scalars"): every ``for i in range(0, n, BLOCK)`` with a runtime
    ``n`` (a matmul's K loop, a looped row) fails. This wraps the interpreter's tensor
    patching so that ``__index__`` reads the single element instead. Only matters when
    ``TRITON_INTERPRET=1``; call once after importing triton, before running kernels.
    Idempotent; returns True when the patch is in place, False when this Triton has no
    interpreter hook to patch (nothing to do).
    """
    try:
        from triton.runtime import interpreter as _interp
    except Exception:  # noqa: BLE001 - no interpreter in this triton build
        return False
    original = getattr(_interp, "_patch_lang_tensor", None)
    if original is None:
        return False
    if getattr(original, "_autokernel_index_fix", False):
        return True

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._autokernel_index_fix = True
    _interp._patch_lang_tensor = patched
    return True


def modes(kind: str) -> list[str]:
    """The input modes `kind` takes: every one of :data:`MODES` but ``masked``, which only
    kinds with ``masked_rows`` take."""
    return [m for m in MODES if m != "masked" or spec(kind)["masked_rows"]]


def _check(kind: str, shape, mode: str) -> list[int]:
    names = spec(kind)["dim_names"]
    dims = [int(d) for d in shape]
    if len(dims) != len(names) or any(d <= 0 for d in dims):
        raise ValueError(f"a {kind} shape has {len(names)} positive dims ({', '.join(names)}), got {list(shape)}")
    if mode not in MODES:
        raise ValueError(f"unknown input mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "masked" and not spec(kind)["masked_rows"]:
        raise ValueError(f"the masked mode is for kinds whose rows may hold -inf, not {kind}")
    return dims


def _dtype_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def _randn(g: torch.Generator, shape) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32)


def _uniform(g: torch.Generator, shape, lo: float, hi: float) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo


def _row_scales(g: torch.Generator, shape, lo_exp: float, hi_exp: float) -> torch.Tensor:
    """One scale per row (all dims but the last), 10^u with u uniform in [lo_exp, hi_exp]."""
    rows = list(shape[:-1]) + [1]
    return torch.pow(10.0, _uniform(g, rows, lo_exp, hi_exp))


def _data(g, shape, mode, *, large, normal=1.0, small=_SMALL, mixed=(-3.0, 3.0), const=1.0):
    """A data tensor in float32 following `mode`.

    large: uniform in [-large, large] (half the values above large/2); normal: N(0, normal²);
    small: N(0, small²); mixed: N(0,1) times a per-row 10^u, u uniform in `mixed`;
    zeros; constant: each row a constant drawn from N(0, const²).
    """
    if mode == "normal":
        return _randn(g, shape) * normal
    if mode == "large":
        return _uniform(g, shape, -large, large)
    if mode == "small":
        return _randn(g, shape) * small
    if mode == "mixed":
        return _randn(g, shape) * _row_scales(g, shape, *mixed)
    if mode == "zeros":
        return torch.zeros(shape, dtype=torch.float32)
    # constant rows
    rows = list(shape[:-1]) + [1]
    return (_randn(g, rows) * const).expand(*shape).contiguous()


def _masked_rows(g, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard normal rows with -inf columns, as masks leave them, and each row's kept span
    [lo, hi) (at least one column). Row r % 3 == 0 masks its leading columns (a sliding
    window or left padding), 1 its trailing ones (a causal row, a padded vocabulary), 2
    both ends. Row 0 keeps only its last column and row 1 only its first; the others keep a
    uniform share (1 to cols columns), so most masked runs are longer than any one block of
    a kernel that walks the row in chunks, from either end."""
    x = _randn(g, [rows, cols])
    kept = (torch.rand([rows], generator=g) * cols).long().clamp(1, cols)
    kept[:2] = 1
    pattern = torch.arange(rows) % 3
    start = (torch.rand([rows], generator=g) * (cols - kept + 1)).long().clamp(max=cols - kept)
    lo = torch.where(pattern == 0, cols - kept, torch.where(pattern == 1, 0, start))
    hi = lo + kept
    col = torch.arange(cols)[None, :]
    masked = (col < lo[:, None]) | (col >= hi[:, None])
    return x.masked_fill(masked, float("-inf")), lo, hi


def _weight(g, n: int) -> torch.Tensor:
    """A random, non-unit affine weight: 1 + 0.5·N(0,1) (values from about −1 to 3)."""
    return 1.0 + 0.5 * _randn(g, [n])


def _finish(tensors: dict, dtype: torch.dtype, device) -> dict:
    out = {}
    for name, t in tensors.items():
        if t.is_floating_point():
            t = t.to(dtype)
        out[name] = t.contiguous().to(device)
    return out


def rotary_tables(seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, each ``[seq, head_dim/2]`` float32.

    Angle of position p and pair i is ``p · base^(−2i/head_dim)`` with base 10000
    (RoFormer, Su et al. 2021, §3.4.2), the table LLaMA-style models use.
    """
    half = head_dim // 2
    inv_freq = 1.0 / (ROTARY_BASE ** (torch.arange(half, dtype=torch.float64) * 2.0 / head_dim))
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def _reduce_large(g, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of values near the dtype's max whose exact sum is one of them.

    Each row holds pairs (v, −v) and one unpaired value (plus a zero when cols is even),
    shuffled. Values are integers in [2^14, 2^15) times 2^k (k = 0 for float16, 85 for
    the others), so any float32 accumulation order is exact while partial sums stay below
    2^24·2^k; a float16 accumulator overflows (partial sums reach 1e6).
    """
    k = 0 if dtype == torch.float16 else 85
    mag = torch.floor(_uniform(g, [rows, cols], 2.0**14, 2.0**15)) * (2.0**k)
    sign = torch.where(torch.rand([rows, cols], generator=g) < 0.5, -1.0, 1.0)
    v = (mag * sign).to(dtype).float()  # round first so that −v cancels v exactly
    npairs = (cols - 1) // 2
    x = torch.zeros(rows, cols, dtype=torch.float32)
    x[:, :npairs] = v[:, :npairs]
    x[:, npairs : 2 * npairs] = -v[:, :npairs]
    x[:, 2 * npairs] = v[:, -1]
    perm = torch.argsort(torch.rand([rows, cols], generator=g), dim=1)
    return torch.gather(x, 1, perm)


def make_inputs(kind: str, shape, dtype: torch.dtype, device, seed: int, mode: str = "normal",
                layout: str = "contiguous", registry=None, params=None) -> dict:
    """Fresh tensors for ``kernel_fn(**inputs)``, keyed by the catalogue's input names.

    `shape` is the problem shape of ``KernelKind::dim_names`` (see the module docstring);
    `dtype` the floating dtype of every float input; `device` where the tensors go
    (``"cuda"``, ``"cpu"``); `seed` makes them deterministic; `mode` one of :data:`MODES`.

    Tensors, all contiguous: matmul ``A [M,K]``, ``B [K,N]`` (and ``bias [N]`` with
    ``has_bias``); softmax/reduce ``x [rows,
    cols]``; layernorm ``x [rows, cols]``, ``weight [cols]``, ``bias [cols]``; rmsnorm ``x``,
    ``weight``; flash_attention ``Q [batch, heads, seq, head_dim]``, ``K, V [batch, kv_heads,
    seq, head_dim]`` and with ``has_mask`` an additive key-padding ``mask [batch, seq]``; fused_mlp ``x [T,
    H]``, ``w_gate [I, H]``, ``w_up [I, H]``, ``w_down [H, I]``; cross_entropy ``logits
    [rows, vocab]`` and ``targets [rows]`` int64 in ``[0, vocab)``; rotary_embedding ``x
    [b, h, s, d]``, ``cos``, ``sin`` ``[s, d/2]`` (d must be even).

    `layout` (:data:`LAYOUTS`) says how the tensors sit in memory, with the same values:
    ``"contiguous"``; ``"b_transposed"``, matmul's ``B`` as the transpose of a contiguous
    ``[N, K]`` tensor (strides ``(1, K)``), the way ``nn.Linear`` hands its weight over.

    `registry` is where the kind's generator is looked up (:data:`REGISTRY` by default;
    the harness passes its own frozen copy). `params` are the kind's semantic parameters
    (a dict; unset ones take the catalogue's defaults), e.g. layernorm without ``bias``.

    Raises ValueError for an unknown kind, mode, layout or parameter, or a shape of the
    wrong rank.
    """
    dims = _check(kind, shape, mode)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown input layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    # Generated where they are used: a CPU generator plus a host-to-device copy was a large
    # part of each case at the `gpu` shapes (docs/benchmarks.md, turnaround). Every factory
    # call below allocates on `device` (torch.device as a context manager).
    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int(seed))
    entry = _entry(kind, registry)
    p = resolve_params(kind, params)
    with torch.device(device):
        made = entry.make_inputs(dims, dtype, g, mode) if p is None else entry.make_inputs(dims, dtype, g, mode, p)
        inputs = _finish(made, dtype, device)
    if layout == "b_transposed" and kind == "matmul":
        inputs["B"] = inputs["B"].t().contiguous().t()
    return inputs


def _entry(kind: str, registry) -> Kind:
    spec(kind)
    try:
        return (REGISTRY if registry is None else registry)[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} has no registered input generator and reference") from None


_ADD_NORMS = {"add_rmsnorm": "rmsnorm", "add_layernorm": "layernorm"}
"""The fused residual-add norms and the norm each applies to ``h = x + residual``: the same
parameters, the output ``[2, rows, cols]`` stacking h and the norm of h."""


def _builtin_inputs(kind: str, dims, dtype: torch.dtype, g: torch.Generator, mode: str,
                    params=None) -> dict:
    """The built-in kinds' input generators (float32 tensors), run with the target device
    as the default device; `params` those of a kind that has some (every one set)."""
    dmax = _dtype_max(dtype)
    large = _LARGE.get(dtype, _LARGE[torch.float32])
    t: dict[str, torch.Tensor] = {}

    if kind == "matmul":
        m, n, k = dims
        if mode == "large":
            # A near the dtype's max, B scaled by its inverse so that C has the spread of the
            # normal mode (σ ≈ √K). Bigger outputs cannot be judged elementwise: tensor-core
            # accumulation differs from cuBLAS by ~1e-5 of the partial sums, which exceeds
            # float16's atol (1e-2) at entries near zero once C reaches ~1e3.
            a = _uniform(g, [m, k], -large, large)
            b_amp = 3.0 / large
            b = _uniform(g, [k, n], -b_amp, b_amp)
        elif mode == "mixed":
            # Rows of A and columns of B scaled by 10^u, u in [-3, 0] (see "large" for the top).
            a = _randn(g, [m, k]) * _row_scales(g, [m, k], -3.0, 0.0)
            b = _randn(g, [k, n]) * _row_scales(g, [n, k], -3.0, 0.0).reshape(1, n)
        elif mode == "small":
            # Entries ~0.03: C ~ 1e-3·√K stays a normal float16 number.
            a = _randn(g, [m, k]) * 0.03
            b = _randn(g, [k, n]) * 0.03
        elif mode == "zeros":
            a = torch.zeros(m, k)
            b = _randn(g, [k, n])
        else:
            a = _data(g, [m, k], mode, large=large)
            b = _randn(g, [k, n])
        t = {"A": a, "B": b}
        # drawn either way, after A and B: they do not depend on has_bias. ~N(0, 1), small
        # next to C's spread (~√K) in every mode but zeros, where C is the bias alone.
        bias = _randn(g, [n])
        if (params or {}).get("has_bias", False):
            t["bias"] = bias

    elif kind in ("softmax", "cross_entropy"):
        rows, cols = dims
        if mode == "masked":
            x, lo, hi = _masked_rows(g, rows, cols)
        else:
            x = _data(g, [rows, cols], mode, large=large)
            lo, hi = torch.zeros(rows, dtype=torch.int64), torch.full([rows], cols)
        if kind == "softmax":
            t = {"x": x}
        else:
            # A target in the kept columns (a masked target's loss is infinite).
            span = hi - lo
            targets = lo + (torch.rand([rows], generator=g) * span).long().clamp(max=span - 1)
            t = {"logits": x, "targets": targets}

    elif kind in ("layernorm", "rmsnorm"):
        rows, cols = dims
        params = params or {}
        # Constant rows: var = 0 makes (x − mean)·rsqrt(var + eps) amplify the rounding of
        # the mean by 1/√eps (≈ 316 at the default eps 1e-5, 10⁶ at BERT's 1e-12); constants
        # of ~1e-2·√(eps / 1e-5) keep that far below the float32 tolerance for any correct
        # kernel (the exact output is the bias).
        eps = float(params.get("eps", 1e-5))
        const = 1e-2 * min(1.0, math.sqrt(eps / 1e-5)) if kind == "layernorm" else 1.0
        x = _data(g, [rows, cols], mode, large=large, const=const)
        w = _weight(g, cols)
        t = {"x": x, "weight": w}
        if kind == "layernorm":
            b = 0.5 * _randn(g, [cols])  # drawn either way: x and w do not depend on has_bias
            if params.get("has_bias", True):
                t["bias"] = b
        elif params.get("weight_offset", 0):
            # Gemma's weights are stored as w − 1 (initialised at 0): 1 + w keeps the spread
            t["weight"] = w - 1.0

    elif kind in _ADD_NORMS:
        # h drawn as the norm's x is (the mode is about the norm's input), then split into
        # x and residual: |x|, |residual| ≤ |h|, so the sum cannot overflow where h does not;
        # constant and zero rows split in halves, exactly, and stay constant
        t = _builtin_inputs(_ADD_NORMS[kind], dims, dtype, g, mode, params)
        h = t.pop("x")
        share = torch.full_like(h, 0.5) if mode in ("constant", "zeros") else torch.rand(h.shape, generator=g)
        t = {"x": h * (1.0 - share), "residual": h * share, **t}

    elif kind == "reduce":
        rows, cols = dims
        # Row sums ~ σ·√cols (6σ tail) must stay ≤ max/4 in the output dtype.
        per_row = dmax / 4.0 / (6.0 * math.sqrt(cols))
        if mode == "large":
            x = _reduce_large(g, rows, cols, dtype)
        elif mode == "mixed":
            x = _data(g, [rows, cols], mode, large=large, mixed=(-3.0, min(3.0, math.log10(per_row))))
        elif mode == "constant":
            x = _data(g, [rows, cols], mode, large=large, const=min(1.0, dmax / (8.0 * 5.0 * cols)))
        else:
            x = _data(g, [rows, cols], mode, large=large)
        t = {"x": x}

    elif kind == "flash_attention":
        b, h, s, d = dims
        params = params or {}
        hkv = _kv_heads(h, params)
        if mode == "large":
            # Raw scores q·k reach ~1.2× float16's max (a kernel holding scores in float16
            # overflows); float32 keeps scaled scores ≲ 100. Not larger: every FlashAttention
            # kernel computes exp2(s·c − m) with a fused multiply-add whose rounding is relative
            # to |s| (at |s| ~ 1e10 it zeroes whole rows). V stays O(1): P is rounded to the
            # input dtype before P·V (FlashAttention's design), an error relative to max|V|.
            if dtype == torch.float32:
                qk_amp = math.sqrt(100.0 * math.sqrt(d) / d)
            else:
                qk_amp = math.sqrt(1.2 * 65504.0 / d)
            q = _uniform(g, [b, h, s, d], -qk_amp, qk_amp)
            kk = _uniform(g, [b, hkv, s, d], -qk_amp, qk_amp)
            v = _uniform(g, [b, hkv, s, d], -1.0, 1.0)
        elif mode == "zeros":
            # Q = K = 0: uniform attention, the output is the causal running mean of V.
            q = torch.zeros(b, h, s, d)
            kk = torch.zeros(b, hkv, s, d)
            v = _randn(g, [b, hkv, s, d])
        elif mode == "small":
            q = _randn(g, [b, h, s, d]) * _SMALL
            kk = _randn(g, [b, hkv, s, d]) * _SMALL
            v = _randn(g, [b, hkv, s, d]) * 1e-2
        else:
            mixed = (-1.0, 1.0)
            q = _data(g, [b, h, s, d], mode, large=large, mixed=mixed)
            kk = _data(g, [b, hkv, s, d], mode, large=large, mixed=mixed)
            # V rows up to 10× apart: the rounding of P to the input dtype before P·V
            # (FlashAttention's design) scales with max|V| and must stay below atol.
            v = _data(g, [b, hkv, s, d], mode, large=large, mixed=(-2.0, 1.0))
        t = {"Q": q, "K": kk, "V": v}
        if params.get("has_mask", False):
            t["mask"] = _padding_mask(g, b, s, causal=params.get("causal", True))

    elif kind == "fused_mlp":
        tok, hid, inter = dims
        if mode == "large":
            # x near the dtype's max; gate/up weights scaled so that the pre-activations have
            # σ = t = √(max/288) in float16 (then |silu(g)·u| ≲ 36t² = max/8: the intermediate,
            # stored in the input dtype by a two-kernel design and by eager PyTorch, stays
            # finite); w_down scaled by 1/t² so that the output is O(1) and the intermediate's
            # rounding (relative 2⁻¹¹) stays below the elementwise atol.
            t_pre = math.sqrt(dmax / 288.0) if dtype == torch.float16 else 1.0e6
            sigma_w = t_pre * math.sqrt(3.0) / (large * math.sqrt(hid))
            x = _uniform(g, [tok, hid], -large, large)
            w_gate = _randn(g, [inter, hid]) * sigma_w
            w_up = _randn(g, [inter, hid]) * sigma_w
            w_down = _randn(g, [hid, inter]) / (t_pre * t_pre * math.sqrt(inter))
        else:
            if mode == "small":
                x = _randn(g, [tok, hid]) * 0.05  # output ~1e-3: still a normal float16
            else:
                # mixed: output ∝ row scale², up to 10 (bfloat16: 1, its rounding being 8×
                # float16's): the intermediate's rounding stays well below atol.
                top = 0.0 if dtype == torch.bfloat16 else 0.5
                x = _data(g, [tok, hid], mode, large=large, mixed=(-1.0, top))
            w_gate = _randn(g, [inter, hid]) / math.sqrt(hid)
            w_up = _randn(g, [inter, hid]) / math.sqrt(hid)
            w_down = _randn(g, [hid, inter]) / math.sqrt(inter)
        t = {"x": x, "w_gate": w_gate, "w_up": w_up, "w_down": w_down}

    elif kind == "rotary_embedding":
        b, h, s, d = dims
        if d % 2:
            raise ValueError(f"rotary_embedding needs an even head_dim, got {d}")
        # |out| ≤ √2·|x|: "large" stays at 3e4·√2 < 65504 in float16. For the 8-bit-exponent
        # dtypes "large" is 256: x0·c − x1·s cancels, and a kernel using a fused multiply-add
        # differs from PyTorch by ~2⁻²⁴·|x|, which must stay below float32's atol (1e-4).
        x = _data(g, [b, h, s, d], mode, large=large if dtype == torch.float16 else 256.0)
        cos, sin = rotary_tables(s, d)
        t = {"x": x, "cos": cos, "sin": sin}

    return t


def _float_dtype(inputs: dict) -> torch.dtype:
    """The judged dtype: that of the first floating input (float32 when there is none)."""
    return next((v.dtype for v in inputs.values() if v.is_floating_point()), torch.float32)


def reference(kind: str, inputs: dict, registry=None, params=None) -> torch.Tensor:
    """The PyTorch reference, computed in float32 from float32 copies of `inputs`, for the
    kind's parameters `params` (unset ones at their defaults): a contiguous float32 tensor
    of the catalogue's output shape."""
    entry, p = _entry(kind, registry), resolve_params(kind, params)
    f = {k: (v.float() if v.is_floating_point() else v) for k, v in inputs.items()}
    out = entry.reference(f) if p is None else entry.reference(f, p, _float_dtype(inputs))
    return out.float().contiguous()


def eager(kind: str, inputs: dict, registry=None, params=None) -> torch.Tensor:
    """What a user runs without a custom kernel, in the inputs' dtype, for the kind's
    parameters `params`: the baseline of the speedup. A kind registered without one times
    its reference."""
    entry, p = _entry(kind, registry), resolve_params(kind, params)
    if entry.eager is None:
        return reference(kind, inputs, registry, params)
    return entry.eager(inputs) if p is None else entry.eager(inputs, p)


def _kv_heads(heads: int, params: dict) -> int:
    """flash_attention's K/V head count: the ``kv_heads`` parameter, or `heads` when unset;
    ValueError unless it divides `heads` (grouped-query attention)."""
    hkv = params.get("kv_heads")
    hkv = heads if hkv is None else int(hkv)
    if hkv < 1 or heads % hkv:
        raise ValueError(f"flash_attention kv_heads={hkv} does not divide heads={heads}")
    return hkv


def _padding_mask(g: torch.Generator, batch: int, seq: int, causal: bool) -> torch.Tensor:
    """An additive key-padding mask ``[batch, seq]`` as tokenizers pad batches: row i keeps
    a random number of keys in [1, seq] (row 0 all of them) and masks the rest; padded keys
    get −inf in even rows and −65504 (float16's lowest finite number, what transformers'
    float masks hold) in odd ones. Without `causal` odd rows are padded on the left (keys
    at the start masked), as decoder batches are; with it always on the right, since a
    causal query 0 with key 0 padded would see no key, a softmax with no value (no row is
    ever fully masked)."""
    mask = torch.zeros(batch, seq)
    lengths = 1 + (torch.rand([batch], generator=g) * seq).long().clamp(max=seq - 1)
    for i in range(batch):
        n = seq if i == 0 else int(lengths[i])
        fill = float("-inf") if i % 2 == 0 else -65504.0
        if causal or i % 2 == 0:
            mask[i, n:] = fill
        else:
            mask[i, : seq - n] = fill
    return mask


def attention_model_code(q, k, v, mask=None, causal=True, scale=None):
    """Attention as PyTorch's SDPA computes it, in the inputs' dtype: K/V heads shared by
    groups of Q heads (``enable_gqa``), the key-padding `mask` ``[batch, seq]`` broadcast
    to ``[batch, 1, 1, seq]`` and, with `causal`, the causal mask folded into it (SDPA takes
    either ``is_causal`` or ``attn_mask``, not both)."""
    gqa = k.shape[1] != q.shape[1]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
    m = mask[:, None, None, :].to(q.dtype)
    if causal:
        s = q.shape[-2]
        keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        m = m.masked_fill(~keep, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale, enable_gqa=gqa)


def _builtin_reference(kind: str, f: dict, params=None, dtype=torch.float32) -> torch.Tensor:
    """The built-in kinds' references, on float32 inputs `f` (`params`: those of a kind that
    has some, every one set; `dtype`: the judged dtype).
    Definitions: matmul ``A @ B`` (``+ bias`` with ``has_bias``); softmax over the last dim; layernorm with its ``eps``,
    weight and (``has_bias``) bias; rmsnorm ``x̂ · (w + weight_offset)``, ``x̂ = x /
    sqrt(mean(x²) + eps)``, with x̂ and ``w + weight_offset`` rounded to `dtype` before the
    product for the ``llama`` and ``t5`` cast orders (the judged x and weight share the
    dtype, where the two orders agree; see :func:`rmsnorm_model_code`); attention
    ``softmax(Q·Kᵀ·scale + mask)·V`` with ``scale`` (default ``1/√d``), K/V heads repeated to
    Q's (grouped-query), the additive key-padding ``mask`` when given, causal unless
    ``causal`` is false (explicit math, no fused kernel, so the precision policy governs it); gated MLP
    ``(act(x·w_gateᵀ) · (x·w_upᵀ)) · w_downᵀ`` with its ``activation`` (:func:`gate_activation`); mean cross-entropy (0-dim); rotary
    with its ``pairing``, pairs ``(x[..., 2i], x[..., 2i+1])`` (interleaved) or ``(x[..., i],
    x[..., i + d/2])`` (half_split) rotated by ``cos/sin[s, i]`` (:func:`rotary_model_code`);
    sum over the last dim; add_rmsnorm and add_layernorm ``[h, norm(h)]`` with ``h = x +
    residual`` rounded to `dtype` (as the model adds) before the norm's reference.
    """
    if kind == "matmul":
        out = f["A"] @ f["B"]
        if "bias" in f:
            out = out + f["bias"]
    elif kind == "softmax":
        out = torch.softmax(f["x"], dim=-1)
    elif kind == "layernorm":
        x = f["x"]
        out = F.layer_norm(x, (x.shape[-1],), f["weight"], f.get("bias"), params["eps"])
    elif kind == "rmsnorm":
        x, w = f["x"], f["weight"] + params["weight_offset"]
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + params["eps"])
        if params["cast_order"] != "float32":
            h, w = h.to(dtype).float(), w.to(dtype).float()
        out = h * w
    elif kind == "flash_attention":
        q, k, v = f["Q"], f["K"], f["V"]
        s, d = q.shape[-2], q.shape[-1]
        group = q.shape[1] // k.shape[1]  # grouped-query: each K/V head serves `group` Q heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scale = params.get("scale")
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d) if scale is None else float(scale))
        if "mask" in f:
            scores = scores + f["mask"][:, None, None, :]
        if params.get("causal", True):
            causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
    elif kind == "fused_mlp":
        x = f["x"]
        h = gate_activation(x @ f["w_gate"].t(), params["activation"]) * (x @ f["w_up"].t())
        out = h @ f["w_down"].t()
    elif kind == "cross_entropy":
        out = F.cross_entropy(f["logits"], f["targets"], reduction="mean")
    elif kind == "rotary_embedding":
        out = rotary_model_code(f["x"], f["cos"], f["sin"], params["pairing"])
    elif kind in _ADD_NORMS:
        # the model adds in its dtype, then normalises the rounded sum
        h = (f["x"] + f["residual"]).to(dtype).float()
        rest = {k: v for k, v in f.items() if k not in ("x", "residual")}
        out = torch.stack([h, _builtin_reference(_ADD_NORMS[kind], {"x": h, **rest}, params, dtype)])
    else:  # reduce
        out = f["x"].sum(dim=-1)
    return out


def _builtin_eager(kind: str, inputs: dict, params=None) -> torch.Tensor:
    """The built-in kinds' eager PyTorch, in the inputs' dtype (fused ops where PyTorch has
    them: ``F.rms_norm`` at rmsnorm's default parameters, ``scaled_dot_product_attention``;
    rmsnorm's other variants as the models write them, :func:`rmsnorm_model_code`)."""
    if kind == "matmul":
        if "bias" in inputs:
            # the model's own op for a matmul with a bias (nn.Linear and Conv1D both reach it)
            return torch.addmm(inputs["bias"], inputs["A"], inputs["B"])
        return inputs["A"] @ inputs["B"]
    if kind == "softmax":
        return torch.softmax(inputs["x"], dim=-1)
    if kind == "layernorm":
        x = inputs["x"]
        return F.layer_norm(x, (x.shape[-1],), inputs["weight"], inputs.get("bias"), params["eps"])
    if kind == "rmsnorm":
        x = inputs["x"]
        if params["weight_offset"] == 0 and params["cast_order"] == "float32":
            return F.rms_norm(x, (x.shape[-1],), inputs["weight"], params["eps"])
        return rmsnorm_model_code(x, inputs["weight"], params["eps"], params["weight_offset"], params["cast_order"])
    if kind == "flash_attention":
        return attention_model_code(inputs["Q"], inputs["K"], inputs["V"], inputs.get("mask"),
                                    params["causal"], params["scale"])
    if kind == "fused_mlp":
        return mlp_model_code(inputs["x"], inputs["w_gate"], inputs["w_up"], inputs["w_down"], params["activation"])
    if kind == "cross_entropy":
        return F.cross_entropy(inputs["logits"].float(), inputs["targets"])
    if kind == "rotary_embedding":
        return rotary_model_code(inputs["x"], inputs["cos"].to(inputs["x"].dtype),
                                 inputs["sin"].to(inputs["x"].dtype), params["pairing"])
    if kind in _ADD_NORMS:
        # the unfused ops as the model runs them: the add, then the norm (the pair, not
        # stacked: a stack would time a copy the model never makes)
        h = inputs["x"] + inputs["residual"]
        rest = {k: v for k, v in inputs.items() if k not in ("x", "residual")}
        return h, _builtin_eager(_ADD_NORMS[kind], {"x": h, **rest}, params)
    return inputs["x"].sum(dim=-1)  # reduce


def _register_builtins() -> None:
    for kind in ("matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp",
                 "cross_entropy", "rotary_embedding", "reduce", *_ADD_NORMS):
        # a kind with parameters gets them (and its reference the judged dtype): see Kind
        register(
            kind,
            make_inputs=lambda dims, dtype, g, mode, params=None, k=kind: _builtin_inputs(k, dims, dtype, g, mode,
                                                                                          params),
            reference=lambda f, params=None, dtype=torch.float32, k=kind: _builtin_reference(k, f, params, dtype),
            eager=lambda inputs, params=None, k=kind: _builtin_eager(k, inputs, params),
        )


_register_builtins()


def tolerance_note(kind: str, dtype) -> str:
    """A likely cause to add to a failure message of `kind` in `dtype` (may be empty)."""
    name = str(dtype).replace("torch.", "")
    notes = []
    if name == "float32" and kind in ("matmul", "fused_mlp", "flash_attention"):
        notes.append(
            "float32 inputs must not use TF32: pass input_precision=\"ieee\" to tl.dot "
            "(the default for float32 is tf32, ~1e-3 relative error)"
        )
    if name in ("float16", "bfloat16"):
        notes.append(
            f"accumulate in float32 ({name} sums and squares overflow or lose precision, "
            "e.g. x² of 3e4 exceeds float16's max 65504)"
        )
    if kind in ("softmax", "cross_entropy", "flash_attention"):
        notes.append("subtract the row maximum before exp (and rescale when it changes)")
    if kind in ("layernorm", "rmsnorm", *_ADD_NORMS):
        notes.append("eps goes inside the square root; mask padded columns out of the mean")
    if kind in _ADD_NORMS:
        notes.append("out[0] is h = x + residual rounded to the dtype, and the norm is of that rounded h")
    return "; ".join(notes)
