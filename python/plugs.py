"""Plugs: a kept kernel installed into one model instance, in place of the module forwards
or functional calls whose parameters are its target's, and undone from it.

Used by verification (``verify_model.py``) and by an exported package (``autokernel
export``), which ships this file. Which calls a plug may take is decided by the call-site
matcher (``call_sites.py``), the same the profiler planned the target with.

How each kind is plugged in:

- matmul: the ``nn.Linear`` (``x @ Wᵀ + b``, ``Wᵀ`` the transposed view of the weight: the
  ``b_transposed`` layout) and GPT-2 ``Conv1D`` (``addmm(b, x, W)``, W as stored: the
  ``contiguous`` layout) modules whose layout and ``has_bias``, read and checked by the
  matcher (``call_sites.matmul_params``), are the target's; before it is installed the
  kernel is checked against each such module's own forward on an input captured from the
  model (:func:`check_matmul`), and a mismatch leaves it out with the error;
- layernorm and rmsnorm: the norm modules whose parameters, read and decided by the
  matcher (``call_sites.norm_params``: eps and bias from the module, rmsnorm's weight
  offset and cast order from its own forward), are the target's ``params``; before it is
  installed the kernel is checked against each such module's own forward on an input
  captured from the model (:func:`check_norm`), and a mismatch leaves it out with the error;
- softmax: ``torch.nn.functional.softmax`` / ``torch.softmax`` over the last dim;
- flash_attention: the attention calls whose parameters, read by the matcher
  (``call_sites.attention_params``: causal, scale, K/V heads, padding mask), are the
  target's ``params``: in a transformers model through an attention function registered for
  that model instance (its ``config._attn_implementation``, restored after), elsewhere through
  ``F.scaled_dot_product_attention``; the kernel is first checked against the model's own
  attention on a captured call (:func:`check_attention`), and a mismatch leaves it out;
- cross_entropy: ``F.cross_entropy`` with mean reduction and no weights, smoothing or ignored ids;
- fused_mlp: gated MLP modules (bias-free ``gate_proj/up_proj/down_proj`` or
  ``w_gate/w_up/w_down`` linears: HF's ``LlamaMLP``, ``GemmaMLP``, the bundled ``SwiGLU``)
  whose activation, decided by the matcher from the module's own forward
  (``call_sites.mlp_params``: SiLU or tanh GELU), is the target's; checked against each
  such module's own forward on a captured input first (:func:`check_mlp`);
- rotary_embedding: the calls of HF's module-level ``apply_rotary_pos_emb(q, k, cos, sin)``
  (Q and K together, each rotated by one kernel call, with the tables ``[seq, head_dim/2]``
  taken from the model's own ``[1, seq, head_dim]`` cos/sin: :func:`call_sites.rotary_half_tables`)
  made while this model instance runs, through one dispatcher per Python module shared by
  every plug and model (``_RotaryDispatch``: installed with the first plug, the original
  restored when the last is removed; a forward pre-hook and post-hook on the model tell its
  calls from another model's), and the ``forward`` of rotary modules with an ``inv_freq``
  (the bundled llama's ``RotaryEmbedding``: x rotated, the tables computed as the module
  does), both at the pairing the matcher (``call_sites.rotary_function_params``,
  ``rotary_module_params``) decided from the model's own code; the kernel is first checked
  against the model's own function or module on a captured call (:func:`check_rotary`);
- add_rmsnorm and add_layernorm (a residual add, then the norm of the sum): the norm modules
  whose input is the sum the model's last add returned (``call_sites.capture_add_norm_inputs``)
  and whose params, decided as a norm's, are the target's. While the model's forward runs
  (not while torch.compile traces it) a torch function mode (:class:`_FusedAdd`) learns which
  norm takes the sum of which add (by the add's line of code and its count in the forward);
  an add it has learned runs the fused kernel at once, the model getting the kernel's sum
  and the norm, when called on that sum unchanged, the kernel's norm. While torch.compile traces,
  the norm calls the kernel on (sum, 0) and a post-grad graph pass (:class:`ChainPass`) hands
  it the add's operands instead, so that the compiled graph holds one kernel where the add
  and the norm were. The kernel is first checked against each such module's own forward on
  the captured operands (:func:`check_add_norm`);
- reduce has no standard call site and is reported as not pluggable.

Each kernel takes only the calls at its target's problem shapes (see :class:`Plug`).
"""

import contextlib
import contextvars
import os
import sys
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # inside a package (an exported one)
    from . import call_sites, kernel_ops
except ImportError:  # top-level modules, beside the worker's scripts
    import call_sites
    import kernel_ops


def _rows(x):
    """x as a contiguous 2-D [rows, last dim] view."""
    return x.reshape(-1, x.shape[-1]).contiguous()


def _grad_needed(args, parameters):
    """Whether a call builds an autograd graph: gradients enabled and a tensor argument or
    a parameter requires them. The kernels have no backward, so such a call goes to the
    model's own code (checked only when gradients are enabled: inference pays nothing)."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args) \
        or any(p.requires_grad for p in parameters)


def _compiling():
    """Whether torch.compile is tracing this call."""
    return getattr(torch.compiler, "is_compiling", lambda: False)()


CONTEXTS = ("eager", "cudagraph", "compile")
"""Where a plug's call can run: plain eager, while a CUDA graph captures, while torch.compile
traces (``compile`` and ``reduce-overhead`` alike: the plug cannot tell them apart)."""


def _context():
    """The context (:data:`CONTEXTS`) of the call being made."""
    if _compiling():
        return "compile"
    # no capture without an initialised CUDA: is_initialized reads a flag, where
    # is_available reads the environment and counts devices, in every plugged call of a
    # plug that takes calls in some contexts only
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return "cudagraph"
    return "eager"


def _tracing():
    """Whether this call is being captured into a CUDA graph or traced by torch.compile."""
    return _context() != "eager"


class Plug:
    """Installs one kernel into a model (module forwards or functional patches) and counts
    how often the model called it.

    A target was planned, and tuned, at the model's own problem shapes (`shapes`, e.g.
    GPT-2's LM head 1024x50257x768): the kernel takes only the calls at those shapes and
    every other call goes on to what was there before (PyTorch, or another target's kernel
    of the same kind). Without shapes (a standalone target) it takes every call.

    `fn` takes the kind's inputs by keyword with the target's `params` already bound: the
    kernel through :func:`kernel_ops.bind`, or its operator (:func:`kernel_ops.register`
    with the params). `params` are what the matcher must give a call for the plug to take
    it; `dtype` the target's (a call in another dtype goes on to the original);
    `process_wide` whether a kind plugged through a function of torch may patch it (else
    installing raises NotImplementedError)."""

    def __init__(self, target_id, kind, fn, shapes=(), params=None, dtype=None, layout=None, process_wide=True):
        self.target_id, self.kind, self.fn, self.calls = target_id, kind, fn, 0
        # whether the plug may patch a function of torch for the whole process (softmax,
        # cross-entropy, SDPA outside transformers): verification may for the length of a
        # check; in a user's process (``deploy.optimize``) it may not
        self.process_wide = process_wide
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.params = dict(params or {})
        self.dtype = dtype
        # matmul: the layout of B the target was judged in (``contiguous``: a Conv1D's W,
        # ``b_transposed``: an nn.Linear's Wᵀ); None takes either
        self.layout = layout
        # module kinds (norms, matmul, fused_mlp): the module instances found to compute
        # the target's params, checked against their own forward (`check_norm`, `check_module`)
        self.modules = []
        # norm kinds: (class, dtype) of modules that compute the target's params at its
        # shapes in another dtype than the target's, which the plug leaves alone (`check_norm`)
        self.other_dtypes = []
        # the contexts (:data:`CONTEXTS`) in which the plug takes calls; in the others the
        # model's own code runs (``deploy.optimize`` decides from the verification's modes
        # table: where the kernels made the model slower, it keeps its own ops)
        self.contexts = set(CONTEXTS)
        # problem shapes already run by the kernel in eager mode while eager is not among
        # `contexts` (:meth:`_mine`)
        self._warmed = set()
        # whether every one of `shapes` is in `_warmed` (never, without shapes)
        self._all_warmed = False

    def _mine(self, *problem):
        key = tuple(int(d) for d in problem)
        if self.shapes and key not in self.shapes:
            return False
        if len(self.contexts) == len(CONTEXTS):
            return True
        context = _context()
        if context in self.contexts:
            return True
        if context == "eager" and "cudagraph" in self.contexts and key not in self._warmed:
            # the first eager call at a shape runs the kernel all the same: Triton compiles
            # and loads it then, as it could not while a CUDA graph captures it
            self._warmed.add(key)
            self._all_warmed = bool(self.shapes) and len(self._warmed) == len(set(self.shapes))
            return True
        return False

    def _off(self):
        """Whether this call goes to the model's own code whatever its shape: the plug
        takes no call in this context, and (eager beside CUDA graphs) every shape of the
        target has had its first eager call. Checked before anything else in a replaced
        forward, so that the model pays the least host time where the kernels are off."""
        if len(self.contexts) == len(CONTEXTS):
            return False
        context = _context()
        if context in self.contexts:
            return False
        return context != "eager" or "cudagraph" not in self.contexts or self._all_warmed

    def _count(self, out):
        # not while torch.compile traces: dynamo guards on the counter's value, so counting
        # there recompiles the model at every call (seen on the H200: compiled GPT-2 with
        # the kernels hit the recompile limit and ran eager)
        if not _compiling():
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

    def _replace_forward(self, module, forward, undo, gated=True, one_input=True):
        """Replaces module.forward with forward(self, x, previous): `previous` is the
        forward in place before (a bound method), for the calls this plug does not take.
        `gated`: calls go to `previous` where the plug is off (:meth:`_off`) before
        `forward` sees them (a fused add-norm decides at the add instead). `one_input`:
        `forward` takes one positional input, and a call made otherwise (``norm(input=h)``,
        extra arguments) goes to `previous`."""
        had = "forward" in module.__dict__
        old = module.__dict__.get("forward")
        previous = module.forward
        plug = self

        def replaced(self, *a, **kw):
            if one_input and (kw or len(a) != 1) or gated and plug._off() or _grad_needed(a, self.parameters()):
                return previous(*a, **kw)
            return forward(self, *a, previous=previous, **kw)

        module.forward = types.MethodType(replaced, module)
        undo.append(lambda: setattr(module, "forward", old) if had else module.__dict__.pop("forward", None))

    def _patch(self, owner, name, wrapper, undo):
        if not self.process_wide:
            raise NotImplementedError(f"it would patch {owner.__name__}.{name} for the whole process, not for this "
                                      "model only")
        old = getattr(owner, name)
        setattr(owner, name, wrapper(old))
        undo.append(lambda: setattr(owner, name, old))

    def _matmul_call(self, module, x):
        """The kernel on x [..., K] with matmul module `module`'s weight as B [K, N] in
        its layout (an nn.Linear's Wᵀ as a view, strides (1, K); a Conv1D's W as stored:
        what the target was judged and timed in) and its bias with ``has_bias``."""
        layout = call_sites.matmul_layout(module)
        w = module.weight.detach()
        inputs = {"A": _rows(x), "B": w.t() if layout == "b_transposed" else w}
        if self.params.get("has_bias"):
            inputs["bias"] = module.bias.detach()
        out = self.fn(**inputs)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def _matmul_params(self):
        """The target's matmul params as the matcher (``call_sites.matmul_params``) gives
        a module's: ``has_bias`` at its default (false) when the target does not set it."""
        return {"has_bias": bool(self.params.get("has_bias", False))}

    def _takes_matmul(self, module, x):
        """Whether this plug takes a call of matmul module `module` on x: the target's
        dtype and problem shapes [M, N, K]."""
        return (self.dtype is None or x.dtype == self.dtype) and x.dim() >= 1 \
            and self._mine(*call_sites.matmul_problem(module, x))

    def _plug_matmul(self, model, undo):
        plug = self
        for m in self.modules:
            def forward(self, x, previous):
                if not plug._takes_matmul(self, x):
                    return previous(x)
                return plug._count(plug._matmul_call(self, x))

            self._replace_forward(m, forward, undo)

    def _norm_call(self, module, x):
        """The kernel on x [..., cols] with the module's weight (and bias) and the params."""
        inputs = {"x": _rows(x), "weight": module.weight}
        if self.kind == "layernorm" and module.bias is not None:
            inputs["bias"] = module.bias
        return self.fn(**inputs).reshape(x.shape)

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

    def _add_norm_call(self, module, a, b):
        """The fused kernel on the add's operands a, b [..., cols] with the norm module's
        weight (and bias): the ``[2, rows, cols]`` output, the sum then its norm."""
        inputs = {"x": _rows(a), "residual": _rows(b), "weight": module.weight}
        if self.kind == "add_layernorm" and module.bias is not None:
            inputs["bias"] = module.bias
        return self.fn(**inputs)

    def _takes_add(self, a, b):
        """Whether this plug may fuse the add ``a + b``: both contiguous, at its dtype and
        shapes, and a norm module to take the sum."""
        return bool(self.modules) and a.is_contiguous() and b.is_contiguous() and self._takes(a)

    def _plug_add_norm(self, model, undo):
        plug = self
        chain = _FusedAdd(plug)
        for m in self.modules:
            def forward(self, x, previous):
                if _compiling():
                    if plug._off() or not plug._takes(x):
                        return previous(x)
                    # the kernel on (x, 0) is the norm of x and x itself: correct as it
                    # stands, and the graph pass (`ChainPass`) hands it the add's operands
                    out = plug._add_norm_call(self, x, torch.zeros_like(x))
                    return out[1].view(x.shape)
                y = chain.take(x, self)
                if y is None:
                    y = chain.learn(x, self)
                if y is None:
                    return previous(x)
                return plug._count(y)

            # the add decided whether the plug takes the chain (its first eager call at a
            # shape warms it, `_mine`): the norm takes what the add computed
            self._replace_forward(m, forward, undo, gated=False)

        # while torch.compile traces, neither hook does anything (the same in both: one
        # trace is one context); otherwise each forward records whether it entered the mode,
        # since the plug may turn off during a forward (its shapes warmed, `_off`)
        def enter(_m, _args):
            if _compiling():
                return
            on = not self._off()
            chain.entered.append(on)
            if on:
                chain.start()
                chain.__enter__()

        def leave(_m, _args, _out):
            if _compiling() or not chain.entered:
                return
            if chain.entered.pop():
                chain.__exit__(None, None, None)
                chain.start()  # what the forward held is released

        hooks = [model.register_forward_pre_hook(enter), model.register_forward_hook(leave, always_call=True)]
        undo.append(lambda: [h.remove() for h in hooks])
        overload = getattr(self.fn, "overload", None)
        if overload is not None:
            ChainPass.join(overload, undo)

    _plug_add_rmsnorm = _plug_add_norm
    _plug_add_layernorm = _plug_add_norm

    def _plug_softmax(self, model, undo):
        plug = self

        def wrapper(original):
            def softmax(input, dim=None, *args, **kwargs):
                extra = kwargs.get("dtype") is not None or (args and args[0] is not None)
                if not plug._off() and isinstance(input, torch.Tensor) and dim in (-1, input.dim() - 1) \
                        and not extra and input.dim() > 0 \
                        and plug._mine(input.numel() // input.shape[-1], input.shape[-1]):
                    return plug._count(plug.fn(x=_rows(input))).reshape(input.shape)
                return original(input, dim, *args, **kwargs)
            return softmax

        self._patch(F, "softmax", wrapper, undo)
        self._patch(torch, "softmax", wrapper, undo)

    def _attention_params(self):
        """The target's flash_attention params with the kind's defaults filled in, as the
        profiler's matcher (``call_sites.attention_params``) gives a call's."""
        return dict(kernel_ops.catalogue_module().param_defaults("flash_attention"), **self.params)

    def _attention_call(self, q, k, v, padding):
        """The kernel on one attention problem: Q, K, V [batch, heads|kv_heads, seq,
        head_dim], the additive [batch, seq] `padding` mask with ``has_mask``."""
        extra = {"mask": padding} if padding is not None else {}
        return self.fn(Q=q.contiguous(), K=k.contiguous(), V=v.contiguous(), **extra)

    def _takes_attention(self, q, k, v, mask, dropout, causal, scale):
        """``(True, padding)`` when this plug takes an attention call: the matcher gives it
        the target's params, in the target's dtype and at one of its shapes."""
        if self.dtype is not None and q.dtype != self.dtype or q.dim() != 4 or not self._mine(*q.shape) \
                or _grad_needed((q, k, v), ()):
            return False, None
        if mask is not None and _tracing():
            # the matcher reads the mask's values on the host: not inside a CUDA graph's
            # capture or a compiled graph, where that call goes to the model's own code
            return False, None
        params, padding, _reason = call_sites.attention_params(q, k, v, mask, dropout, causal, scale)
        return params is not None and params == self._attention_params(), padding

    def _plug_flash_attention(self, model, undo):
        """A transformers model: an attention function of this plug's, registered for this
        model instance only (``call_sites.hf_attention_function``), taking the calls at
        the target's params and handing the others to the model's own. Another model: a patch
        of ``F.scaled_dot_product_attention`` taking the calls at the target's params."""
        plug = self

        def make(original):
            def attention(module, query, key, value, attention_mask, *args, **kwargs):
                if plug._off():
                    return original(module, query, key, value, attention_mask, *args, **kwargs)
                named = dict(zip(("dropout", "scaling"), args), **kwargs)
                mask, dropout, causal, scale, reason = call_sites._hf_call(
                    module, query, key, value, attention_mask, **named)
                if reason is None:
                    mine, padding = plug._takes_attention(query, key, value, mask, dropout, causal, scale)
                    if mine:
                        out = plug._count(plug._attention_call(query, key, value, padding))
                        return out.transpose(1, 2).contiguous(), None
                return original(module, query, key, value, attention_mask, *args, **kwargs)
            return attention

        stack = contextlib.ExitStack()
        if stack.enter_context(call_sites.hf_attention_function(model, make)):
            undo.append(stack.close)
            return
        stack.close()

        def wrapper(original):
            def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
                if not plug._off() and set(kw) <= {"enable_gqa"} and (kw.get("enable_gqa", False) or k.shape[1] == q.shape[1]):
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
                simple = (not plug._off() and weight is None and size_average is None and reduce is None and reduction == "mean"
                          and label_smoothing == 0.0 and input.dim() == 2 and target.dim() == 1
                          and not bool((target == ignore_index).any()) and plug._mine(*input.shape))
                if simple:
                    return plug._count(plug.fn(logits=input.contiguous(), targets=target))
                return original(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
            return cross_entropy

        self._patch(F, "cross_entropy", wrapper, undo)

    def _mlp_call(self, module, x):
        """The kernel on x [..., hidden] with gated MLP `module`'s projection weights, each
        in its stored [out, in] layout."""
        gate, up, down = call_sites.mlp_projections(module)
        out = self.fn(x=_rows(x), w_gate=gate.weight.detach(), w_up=up.weight.detach(),
                      w_down=down.weight.detach())
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def _takes_mlp(self, module, x):
        """Whether this plug takes a call of gated MLP `module` on x: the target's dtype and
        problem shapes [tokens, hidden, intermediate]."""
        return (self.dtype is None or x.dtype == self.dtype) and x.dim() >= 1 \
            and self._mine(*call_sites.mlp_problem(module, x))

    def _plug_fused_mlp(self, model, undo):
        plug = self
        for m in self.modules:
            def forward(self, x, previous):
                if not plug._takes_mlp(self, x):
                    return previous(x)
                return plug._count(plug._mlp_call(self, x))

            self._replace_forward(m, forward, undo)

    # --- rotary_embedding ---------------------------------------------------------------

    def _takes_rotary(self, x):
        """Whether this plug takes the rotation of x [batch, heads, seq, head_dim]: the
        target's dtype and shapes, no gradient needed."""
        return isinstance(x, torch.Tensor) and (self.dtype is None or x.dtype == self.dtype) and x.dim() == 4 \
            and self._mine(*x.shape) and not _grad_needed((x,), ())

    def _rotary_call(self, x, cos, sin):
        """The kernel on x [batch, heads, seq, head_dim] with tables cos/sin [seq,
        head_dim/2]."""
        return self.fn(x=x.contiguous(), cos=cos, sin=sin)

    def _function_tables(self, cos, sin):
        """The kernel's tables from the full-width cos/sin of an ``apply_rotary_pos_emb``
        call at this plug's pairing (``call_sites.rotary_half_tables``), or None when they
        are not the duplicates it assumes. The model hands every layer the same two tensors
        in one forward: the last pair's tables are kept (by identity), so the values are
        checked once per forward. Inside a CUDA graph's capture or a compiled graph the
        values cannot be read: the tables are then sliced unchecked, the model's own tables
        having been checked by :func:`check_rotary`."""
        last = getattr(self, "_last_tables", None)
        if last is not None and last[0] is cos and last[1] is sin:
            return last[2]
        pairing = self.params.get("pairing", "interleaved")
        tables = call_sites.rotary_half_tables(cos, sin, pairing, check=not _tracing())
        self._last_tables = (cos, sin, tables)
        return tables

    def _module_tables(self, module, x):
        """Rotary module `module`'s tables at x's length, dtype and device
        (``call_sites.rotary_module_tables``), computed at each call as the module itself
        does (a cache would be state a compiled graph has to guard on)."""
        return call_sites.rotary_module_tables(module, x.shape[-2], x.dtype, x.device)

    def _plug_rotary_embedding(self, model, undo):
        """The rotary modules found by :func:`check_rotary` (`modules`): their forward on
        this instance. The Python modules whose ``apply_rotary_pos_emb`` the model called
        at the target's params (`function_modules`): this plug joins their dispatcher for
        this model instance (:class:`_RotaryDispatch`)."""
        plug = self
        for m in self.modules:
            def forward(self, x, *args, previous, **kwargs):
                if args or kwargs or not plug._takes_rotary(x):
                    return previous(x, *args, **kwargs)
                return plug._count(plug._rotary_call(x, *plug._module_tables(self, x)))

            self._replace_forward(m, forward, undo, one_input=False)
        for mod in getattr(self, "function_modules", ()):
            _RotaryDispatch.join(mod, model, self, undo)


# The model instance whose forward is running (its id), for `_RotaryDispatch`: set by a
# forward pre-hook of each model a rotary plug is installed on, reset by its post-hook.
_RUNNING_MODEL = contextvars.ContextVar("autokernel_rotary_model", default=None)
# The same while torch.compile traces the forward: dynamo cannot trace a ContextVar (a graph
# break in every attention layer), but traces a list's appends and pops as side effects.
_TRACED_MODELS = []


def _running_model():
    """The id of the model whose forward is running (None outside one of those hooked)."""
    if _compiling():
        return _TRACED_MODELS[-1] if _TRACED_MODELS else None
    return _RUNNING_MODEL.get()


class _RotaryDispatch:
    """One wrapper of a Python module's ``apply_rotary_pos_emb`` shared by every rotary plug
    of every model (transformers' attention looks the function up in its module at each
    call, so the attribute must be replaced, for the whole process): a call is taken by the
    plugs installed on the model whose forward is running (``_RUNNING_MODEL``), Q and K each
    by a plug that takes its shape, dtype and tables; a call of another model, or one no
    plug takes, goes to the original function. The original is restored when the last plug
    leaves."""

    _by_module = {}

    def __init__(self, mod):
        self.mod, self.original, self.members = mod, getattr(mod, call_sites.ROTARY_FUNCTION), []
        setattr(mod, call_sites.ROTARY_FUNCTION, self.__call__)

    @classmethod
    def join(cls, mod, model, plug, undo):
        """Adds `plug` for `model` to `mod`'s dispatcher (installing it first), hooks
        `model` so that its calls are told from other models', and appends the undo of
        both to `undo`."""
        d = cls._by_module.get(mod.__name__)
        if d is None:
            d = cls._by_module[mod.__name__] = cls(mod)
        member = (id(model), plug)
        d.members.append(member)
        unhook = cls._hook(model)

        def remove():
            unhook()
            d.members.remove(member)
            if not d.members:
                setattr(d.mod, call_sites.ROTARY_FUNCTION, d.original)
                cls._by_module.pop(d.mod.__name__, None)

        undo.append(remove)

    # id(model) -> [plugs joined, hook handles]: one pre-hook and post-hook per model, however
    # many plugs and modules it has, so that the running model is set and reset in pairs
    _hooked = {}

    @classmethod
    def _hook(cls, model):
        """Hooks `model` (once, however many plugs join for it) so that
        ``_RUNNING_MODEL`` names it while its forward runs, and the value before is back
        after (nested models included; the post-hook runs even when the forward raises).
        Returns the function that takes one plug's share of the hooks away."""
        entry = cls._hooked.get(id(model))
        if entry is None:
            before = []
            key = id(model)

            def enter(_m, _args):
                if _compiling():
                    _TRACED_MODELS.append(key)
                    return
                before.append(_RUNNING_MODEL.get())
                _RUNNING_MODEL.set(key)

            def leave(_m, _args, _out):
                if _compiling():
                    if _TRACED_MODELS:
                        _TRACED_MODELS.pop()
                    return
                if before:
                    _RUNNING_MODEL.set(before.pop())

            hooks = [model.register_forward_pre_hook(enter), model.register_forward_hook(leave, always_call=True)]
            entry = cls._hooked[id(model)] = [0, hooks]
        entry[0] += 1

        def unhook():
            entry[0] -= 1
            if entry[0] == 0:
                for h in entry[1]:
                    h.remove()
                cls._hooked.pop(id(model), None)

        return unhook

    def __call__(self, q, k, cos, sin, *args, **kwargs):
        running = _running_model()
        plugs = [p for owner, p in self.members if owner == running and not p._off()] if running is not None else []
        extra = dict(zip(("unsqueeze_dim",), args), **kwargs)
        if not plugs or any(v != 1 for v in extra.values()) or not isinstance(cos, torch.Tensor):
            return self.original(q, k, cos, sin, *args, **kwargs)
        out, todo = [None, None], []
        for i, x in enumerate((q, k)):
            for p in plugs:
                tables = p._function_tables(cos, sin) if p._takes_rotary(x) and cos.shape[-2:] == x.shape[-2:] \
                    else None
                if tables is not None:
                    todo.append((i, p, x, tables))
                    break
        if not todo:
            return self.original(q, k, cos, sin, *args, **kwargs)
        if len(todo) < 2:  # one of Q and K taken: the model's own code for the other
            out = list(self.original(q, k, cos, sin, *args, **kwargs))
        for i, p, x, tables in todo:
            out[i] = p._count(p._rotary_call(x, *tables))
        return tuple(out)


class _FusedAdd(torch.overrides.TorchFunctionMode):
    """The torch function mode of a fused add-norm plug while its model's forward runs.

    It learns, from the model's own calls, which norm module takes the sum of which add:
    an add is named by the line of code that makes it and how many times that line has
    added at the plug's shapes in this forward (the add at the end of decoder layer *i* is
    that line's *i*-th add), and a plugged norm called on the sum of the add just made (the
    tensor itself or a view of all of it, unchanged since: its version counter) records the
    add's name for itself (:meth:`learn`). An add the plug takes whose name it has learned
    runs the fused kernel right there, with that norm's weights: the model gets the
    kernel's sum (``out[0]``), filled, as its add's result, and the norm's output is kept
    for that norm; when the norm is next called on that sum, unchanged, it returns it
    (:meth:`take`), else it computes its own. So whatever the model's code does between
    the add and the norm (TorchScript, an extension reading the sum, an in-place change),
    it sees the sum, and the norm its own result: a name learned wrong costs a kernel,
    never a value. The first forward at a shape learns (its norms come from the kernel,
    its sums from PyTorch's add); the later ones fuse.
    `entered` holds, per forward running (nested ones included), whether its pre-hook
    entered the mode, for its post-hook."""

    def __init__(self, plug):
        super().__init__()
        self.plug, self.entered = plug, []
        self.norms = {}  # an add's name -> the plugged norm module that took its sum
        self.start()

    def start(self):
        """Forgets what one forward held: its adds' counts, the last sum, a kept norm."""
        self.counts = {}  # the line of code of an add -> its adds so far in this forward
        self.last = None  # (sum, its version, the add's name, operands): the last add not fused
        self.kept = None  # (sum, its version, the norm's output, the norm module)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        operands = call_sites._add_operands(func, args, kwargs)
        if operands is None or not self.plug._takes_add(*operands):
            return func(*args, **kwargs)
        name = self._name()
        norm = self.norms.get(name)
        if norm is None:
            out = func(*args, **kwargs)
            self.last = (out, out._version, name, operands)
            return out
        out = self.plug._add_norm_call(norm, *operands)
        h = out[0].view(operands[0].shape)
        self.kept = (h, h._version, out[1], norm)
        return h

    def _name(self):
        """The name of the add being made: the line of the model's code that makes it
        (the first frame outside torch and this file) and its count in this forward."""
        frame = sys._getframe(1)
        while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                     or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        line = (frame.f_code, frame.f_lasti) if frame is not None else None
        n = self.counts.get(line, 0)
        self.counts[line] = n + 1
        return line, n

    def take(self, x, module):
        """The kept norm output, shaped as `x`, when `x` is its sum unchanged and `module`
        the norm it was computed for; else None."""
        kept, self.kept = self.kept, None
        if kept is None or kept[3] is not module or not call_sites.whole_view(x, kept[0]) or x._version != kept[1]:
            return None
        return kept[2].view(x.shape)

    def learn(self, x, module):
        """When `x` is the last add's sum, unchanged: names `module` as that add's norm and
        returns the kernel's norm of it, computed from the add's operands (the add itself
        was PyTorch's this once); else None. So the first forward at a shape runs the
        kernel too (where the plug takes no eager calls but a CUDA graph's, that first call
        is the warm-up, `Plug._mine`: Triton compiles and loads it then, as it cannot while a
        graph captures it)."""
        last = self.last
        if last is None or not call_sites.whole_view(x, last[0]) or x._version != last[1]:
            return None
        self.norms[last[2]] = module
        self.last = None
        return self.plug._add_norm_call(module, *last[3])[1].view(x.shape)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
"""Frames in torch's own files (the overrides machinery) are not the model's code (a
separator at the end: torchvision's are)."""


class ChainPass:
    """The graph pass that puts a fused add-norm kernel into a graph torch.compile builds:
    Inductor's post-grad custom pass (``torch._inductor.config.post_grad_custom_post_pass``,
    the hook vLLM's fusion passes use), set while a chain plug is installed. Under
    torch.compile a chain plug's norm calls its operator on ``(h, 0)`` (the norm of h, h
    itself: correct wherever the pass does not apply); the pass finds each such call whose
    ``h`` is a plain ``aten.add`` of two contiguous tensors of its shape and dtype, and
    whose other uses all come after it in the graph (a functional graph, in the order
    Inductor left it: the kernel's sum is the same value), hands the operator the add's operands instead, and
    gives those uses the operator's sum (``out[0]``): the add and the zeros leave the graph,
    and Inductor fuses everything around the kernel as before. One pass for every chain
    plug of the process (`ops`: their operators); a pass already set is run first."""

    ops = {}  # operator (OpOverload) -> how many installed plugs joined with it
    _installed = None  # (the pass object set in the config, the value before)

    @classmethod
    def join(cls, overload, undo):
        """Adds `overload` to the pass (setting the pass in Inductor's config first) and
        appends its removal to `undo` (the config restored when the last leaves)."""
        import torch._inductor.config as inductor_config

        if cls._installed is None:
            before = inductor_config.post_grad_custom_post_pass
            cls._installed = (_ChainGraphPass(before), before)
            inductor_config.post_grad_custom_post_pass = cls._installed[0]
        cls.ops[overload] = cls.ops.get(overload, 0) + 1

        def leave():
            cls.ops[overload] -= 1
            if not cls.ops[overload]:
                del cls.ops[overload]
            if not cls.ops and cls._installed is not None:
                inductor_config.post_grad_custom_post_pass = cls._installed[1]
                cls._installed = None

        undo.append(leave)

    @classmethod
    def rewrite(cls, graph):
        """Rewrites every chain call of `graph` (a post-grad ``torch.fx.Graph``) it can;
        returns how many."""
        aten = torch.ops.aten
        order = {n: i for i, n in enumerate(graph.nodes)}
        done = 0
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target not in cls.ops or len(node.args) < 2:
                continue
            h, zero = node.args[0], node.args[1]
            shape = None
            if h.op == "call_function" and h.target in _VIEWS and len(h.args) == 2:
                h, shape = h.args[0], h.args[1]
            if not (zero.op == "call_function" and zero.target == aten.full.default and zero.args[1] == 0):
                continue
            if not (h.op == "call_function" and h.target == aten.add.Tensor and len(h.args) == 2 and not h.kwargs):
                continue
            a, b = h.args
            val = h.meta.get("val")
            if not all(isinstance(t, torch.fx.Node) and _same_contiguous(t.meta.get("val"), val) for t in (a, b)):
                continue
            others = [u for u in h.users if u is not node and u is not node.args[0]]
            if any(order[u] < order[node] for u in others):
                continue
            with graph.inserting_before(node):
                operands = [a, b] if shape is None else [_graph_call(graph, aten.reshape.default, (t, shape))
                                                         for t in (a, b)]
            node.args = (*operands, *node.args[2:])
            if others:
                with graph.inserting_after(node):
                    total = _graph_call(graph, aten.select.int, (node, 0, 0))
                with graph.inserting_after(total):
                    total = _graph_call(graph, aten.reshape.default, (total, list(val.shape)))
                for u in others:
                    u.replace_input_with(h, total)
            done += 1
        if done:
            graph.eliminate_dead_code()
        return done


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default)
"""The reshapes a plug's ``_rows`` leaves in a post-grad graph between the sum and the operator."""


def _same_contiguous(t, like):
    """Whether fake tensor `t` is contiguous with `like`'s shape and dtype."""
    return isinstance(t, torch.Tensor) and isinstance(like, torch.Tensor) and t.shape == like.shape \
        and t.dtype == like.dtype and t.is_contiguous()


def _graph_call(graph, target, args):
    """A new call_function node of `graph` with its fake value (``meta["val"]``, which
    Inductor's lowering reads), computed from its inputs'."""
    node = graph.call_function(target, args)
    vals = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
    node.meta["val"] = target(*vals)
    return node


try:
    from torch._inductor.custom_graph_pass import CustomGraphPass as _CustomGraphPass
except ImportError:  # an older torch: a plain callable is what its config takes
    _CustomGraphPass = object


class _ChainGraphPass(_CustomGraphPass):
    """:class:`ChainPass` as Inductor takes a custom pass (a ``CustomGraphPass``: its
    ``uuid`` keys Inductor's FX graph cache, so it names this file's contents and the
    operators it rewrites), after the pass that was set before, if any."""

    def __init__(self, before):
        self.before = before

    def __call__(self, graph):
        if self.before is not None:
            self.before(graph)
        ChainPass.rewrite(graph)

    def uuid(self):
        import hashlib

        with open(__file__, "rb") as f:
            digest = hashlib.sha256(f.read())
        digest.update(repr(sorted(str(op) for op in ChainPass.ops)).encode())
        before = getattr(self.before, "uuid", lambda: None)() if self.before is not None else None
        return f"autokernel-chain-{digest.hexdigest()}-{before}"


def check_add_norm(plug, captured):
    """Finds the norm modules a fused add-norm plug may take and checks the kernel against
    them.

    `captured` is ``call_sites.capture_add_norm_inputs`` of the model: the norm modules
    called on a residual add's sum, with the add's operands. A module qualifies when it is
    of the plug's norm kind, the sum is at the plug's dtype and one of its shapes, and the
    matcher (``call_sites.norm_params`` on the sum) gives it the target's params. The kernel
    is then run on the captured operands and its sum compared with ``a + b``, its norm with
    the module's own forward on that sum, at the kind's tolerance. Sets ``plug.modules``;
    returns None, or why the kernel must be left out (the measured error)."""
    plug.modules = []
    norm = {v: k for k, v in call_sites.ADD_NORM.items()}[plug.kind]
    for m, (a, b, _shapes, _dtype, _calls) in captured.items():
        if call_sites.norm_kind(m) != norm:
            continue
        with torch.no_grad():
            h = a + b
        if not plug._takes(h) or call_sites.norm_params(m, h)[1] != plug.params:
            continue
        with torch.no_grad():
            out = plug._add_norm_call(m, a, b)
        for got, want, what in ((out[0].view(h.shape), h, "the sum"),
                                (out[1].view(h.shape), call_sites._own_forward(m, h), f"{type(m).__name__}'s forward")):
            excess, err = call_sites._excess(got, want, plug.kind)
            if excess > 0:
                return (f"differs from {what} by {err:.3g} (beyond the {plug.kind} tolerance) at "
                        f"{tuple(h.shape)} with {plug.params}")
        plug.modules.append(m)
    return None


def check_norm(plug, captured):
    """Finds the modules a norm plug may replace and checks the kernel against them.

    `captured` is ``call_sites.capture_norm_inputs`` of the model. A module qualifies
    when it was called at the plug's dtype and one of its shapes and the matcher
    (``call_sites.norm_params``) gives it the target's params. The kernel is then run on
    each qualifying module's captured input and compared with the module's own forward at
    the kind's tolerance: the model's code is the plug's reference. Sets ``plug.modules``;
    returns None, or why the kernel must be left out (the measured error)."""
    plug.modules, plug.other_dtypes = [], []
    for m, (x, shapes, dtype, _calls) in captured.items():
        if call_sites.norm_kind(m) != plug.kind:
            continue
        if not plug._takes(x):
            other = plug.dtype is not None and x.dtype != plug.dtype and x.dim() >= 1 \
                and plug._mine(x.numel() // x.shape[-1], x.shape[-1])
            if other and call_sites.norm_params(m, x)[1] == plug.params:
                plug.other_dtypes.append((type(m).__name__, dtype))
            continue
        kind, params, _reason = call_sites.norm_params(m, x)
        if params != plug.params:
            continue
        with torch.no_grad():
            out = plug._norm_call(m, x)
        want = call_sites._own_forward(m, x)
        excess, err = call_sites._excess(out, want, plug.kind)
        if excess > 0:
            return (f"differs from {type(m).__name__}'s own forward by {err:.3g} (beyond the {plug.kind} "
                    f"tolerance) at {tuple(x.shape)} with {plug.params}")
        plug.modules.append(m)
    return None


def check_matmul(plug, captured):
    """Finds the matmul modules (nn.Linear, Conv1D) a matmul plug may replace and checks
    the kernel against them.

    `captured` is ``call_sites.capture_matmul_inputs`` of the model. A module qualifies
    when its layout is the target's, its captured input is at the plug's dtype and one of
    its shapes, and the matcher (``call_sites.matmul_params``: its own forward against
    ``A @ B (+ bias)``) gives it the target's params (``has_bias``). The kernel is then run
    on each qualifying module's captured input and compared with the module's own forward at
    matmul's tolerance. Sets ``plug.modules``; returns None, or why the kernel must be left
    out (the measured error)."""
    plug.modules = []
    for m, (x, _shapes, _dtype, _calls) in captured.items():
        layout = call_sites.matmul_layout(m)
        if plug.layout is not None and layout != plug.layout or not plug._takes_matmul(m, x):
            continue
        if call_sites.matmul_params(m, x)[1] != plug._matmul_params():
            continue
        with torch.no_grad():
            out = plug._matmul_call(m, x)
        want = call_sites._own_forward(m, x)
        excess, err = call_sites._excess(out, want, "matmul")
        if excess > 0:
            return (f"differs from {type(m).__name__}'s own forward by {err:.3g} (beyond the matmul tolerance) "
                    f"at {call_sites.matmul_problem(m, x)} ({layout}) with {plug.params}")
        plug.modules.append(m)
    return None


def check_mlp(plug, captured):
    """Finds the gated MLP modules a fused_mlp plug may replace and checks the kernel
    against them.

    `captured` is ``call_sites.capture_mlp_inputs`` of the model. A module qualifies when
    its captured input is at the plug's dtype and one of its shapes and the matcher
    (``call_sites.mlp_params``: its own forward against ``down(act(gate(x)) · up(x))``)
    gives it the target's activation. The kernel is then run on each qualifying module's
    captured input and compared with the module's own forward at fused_mlp's tolerance.
    Sets ``plug.modules``; returns None, or why the kernel must be left out (the measured
    error)."""
    plug.modules = []
    want = {"activation": plug.params.get("activation", "silu")}
    for m, (x, _shapes, _dtype, _calls) in captured.items():
        if not plug._takes_mlp(m, x) or call_sites.mlp_params(m, x)[0] != want:
            continue
        with torch.no_grad():
            out = plug._mlp_call(m, x)
        excess, err = call_sites._excess(out, call_sites._own_forward(m, x), "fused_mlp")
        if excess > 0:
            return (f"differs from {type(m).__name__}'s own forward by {err:.3g} (beyond the fused_mlp tolerance) "
                    f"at {call_sites.mlp_problem(m, x)} with {plug.params}")
        plug.modules.append(m)
    return None


def check_attention(plug, calls):
    """Checks an attention plug against the model's own attention before it is installed.

    `calls` is ``call_sites.capture_attention_calls`` of the model. On the first
    captured call of each site whose matcher params are the target's, in its dtype and at
    one of its shapes, the kernel is compared with what the model's own attention function
    returned, at flash_attention's tolerance. Returns None, or why the kernel must be left
    out (the measured error)."""
    want = plug._attention_params()
    for _key, _fields, call in calls:
        if call.out is None or call.params != want or not plug._mine(*call.q.shape) \
                or (plug.dtype is not None and call.q.dtype != plug.dtype):
            continue
        with torch.no_grad():
            out = plug._attention_call(call.q, call.k, call.v, call.padding)
        excess, err = call_sites._excess(out, call.out, "flash_attention")
        if excess > 0:
            return (f"differs from {call.site[0]}'s own attention by {err:.3g} (beyond the flash_attention "
                    f"tolerance) at {tuple(call.q.shape)} with {plug.params}")
    return None


def check_rotary(plug, calls):
    """Finds the rotary call sites a rotary plug may take and checks the kernel against the
    model's own code before it is installed.

    `calls` is ``call_sites.capture_rotary_calls`` of the model. On the first captured call
    of each site whose matcher params are the target's (its pairing), for each tensor it
    rotated (HF's function: Q and K) in the plug's dtype and at one of its shapes, the
    kernel (with the tables the plug would hand it: ``rotary_half_tables`` of the call's
    cos/sin, or the module's ``rotary_module_tables``) is compared with what the model's own
    function or module returned, at rotary_embedding's tolerance. Sets ``plug.modules`` (the
    rotary modules) and ``plug.function_modules`` (the Python modules whose
    ``apply_rotary_pos_emb`` it takes); returns None, or why the kernel must be left out
    (the measured error)."""
    plug.modules, plug.function_modules = [], []
    want = dict(kernel_ops.catalogue_module().param_defaults("rotary_embedding"), **plug.params)
    checked = set()
    for key, _fields, call in calls:
        if call.params != want:
            continue
        function = key[0] == call_sites.ROTARY_FUNCTION
        if call.cases is not None:
            for x, out in call.cases:
                if not plug._takes_rotary(x):
                    continue
                if function:
                    tables = call_sites.rotary_half_tables(*call.tables, want["pairing"])
                else:
                    tables = call_sites.rotary_module_tables(call.owner, x.shape[-2], x.dtype, x.device)
                with torch.no_grad():
                    got = plug._rotary_call(x, *tables)
                excess, err = call_sites._excess(got, out, "rotary_embedding")
                if excess > 0:
                    return (f"differs from {key[0]}'s own output by {err:.3g} (beyond the rotary_embedding "
                            f"tolerance) at {tuple(x.shape)} with {plug.params}")
                checked.add(key[:2])
        if key[:2] not in checked or not plug._mine(*key[2]):
            continue  # a site whose first call no tensor of this plug's was checked on
        if function:
            if call.owner not in plug.function_modules:
                plug.function_modules.append(call.owner)
        elif call.owner not in plug.modules:
            plug.modules.append(call.owner)
    return None


def check_plugs(plugs, excluded, kinds, capture, check):
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


def check_all(plugs, excluded, model, forward):
    """Every plug check, before any plug is installed: the module plugs (norms, fused
    add-norms, matmul, fused_mlp) find their modules, rotary plugs their modules and functions, and all of them
    and attention are checked against the model's own code on inputs captured from one
    `forward()` each (only for the kinds `plugs`
    hold). A plug that fails is removed from `plugs` and named in `excluded`, as broken."""
    check_plugs(plugs, excluded, ("rmsnorm", "layernorm"),
                lambda: call_sites.capture_norm_inputs(model, forward), check_norm)
    check_plugs(plugs, excluded, tuple(call_sites.ADD_NORM.values()),
                lambda: call_sites.capture_add_norm_inputs(model, forward), check_add_norm)
    check_plugs(plugs, excluded, ("matmul",), lambda: call_sites.capture_matmul_inputs(model, forward),
                check_matmul)
    check_plugs(plugs, excluded, ("fused_mlp",), lambda: call_sites.capture_mlp_inputs(model, forward), check_mlp)
    check_plugs(plugs, excluded, ("flash_attention",),
                lambda: call_sites.capture_attention_calls(model, forward), check_attention)
    check_plugs(plugs, excluded, ("rotary_embedding",),
                lambda: call_sites.capture_rotary_calls(model, forward), check_rotary)


def unused_reason(plug):
    """Why `plug` took no call of the model, in the terms of its kind's matcher."""
    if plug.kind in ("rmsnorm", "layernorm"):
        return unused_norm_reason(plug)
    if plug.kind == "matmul":
        return unused_matmul_reason(plug)
    if plug.kind in call_sites.ADD_NORM.values():
        want = str(plug.dtype).replace("torch.", "")
        return (f"no norm module of the model called on a residual add's sum computes {plug.params} at its "
                f"shapes {plug.shapes} in {want}")
    if plug.kind == "fused_mlp":
        want = str(plug.dtype).replace("torch.", "")
        return (f"no gated MLP module of the model computes {plug.params} at its shapes {plug.shapes} "
                f"in {want}")
    if plug.kind == "flash_attention":
        return unused_attention_reason(plug)
    if plug.kind == "rotary_embedding":
        want = str(plug.dtype).replace("torch.", "")
        return (f"no rotary module or {call_sites.ROTARY_FUNCTION} call of the model computes {plug.params} at its "
                f"shapes {plug.shapes} in {want}")
    return f"the model never called it through a standard call site at its shapes {plug.shapes}"


def unused_attention_reason(plug):
    """Why an attention plug took no call: no attention call of the model has its params at
    its shapes in its dtype."""
    want = str(plug.dtype).replace("torch.", "")
    return (f"no attention call of the model computes {plug._attention_params()} at its shapes {plug.shapes} "
            f"in {want}")


def unused_matmul_reason(plug):
    """Why a matmul plug took no call: no nn.Linear or Conv1D of the model computes its
    params in its layout at its shapes in its dtype."""
    want = str(plug.dtype).replace("torch.", "")
    layout = f" in the {plug.layout} layout" if plug.layout else ""
    return (f"no nn.Linear or Conv1D module of the model computes {plug.params}{layout} at its shapes "
            f"{plug.shapes} in {want}")


def unused_norm_reason(plug):
    """Why a norm plug took no call: the modules computing its params run in another dtype
    (named, with their dtype), or no module computes them at its shapes."""
    want = str(plug.dtype).replace("torch.", "")
    if plug.other_dtypes:
        found = ", ".join(sorted({f"{cls} in {dtype}" for cls, dtype in plug.other_dtypes}))
        return (f"the {plug.kind} modules computing {plug.params} at its shapes run in another dtype than the "
                f"target's {want}: {found}")
    return f"no {plug.kind} module of the model computes {plug.params} at its shapes {plug.shapes} in {want}"
