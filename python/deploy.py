"""``optimize(model)``: an exported package's kernels installed into a user's model.

Shipped by ``autokernel export`` inside the package it writes (``<pkg>/_autokernel/``, beside
``plugs.py``, ``call_sites.py``, ``kernel_ops.py`` and the catalogue); the package's
``__init__`` calls :func:`optimize` with its ``manifest.json``. Nothing here needs
autokernel's binary or its bench worker.

What it does, per target of the manifest (what ``autokernel verify`` put into the model):
registers the kernel as the operator ``torch.ops.autokernel.<pkg>_<target>`` with the
target's parameters bound (``kernel_ops.register``), so the model runs it in eager mode,
under ``torch.compile`` without a graph break and inside CUDA graphs; then installs a plug
(``plugs.Plug``) on this model instance that calls the operator for the calls at the
target's parameters, dtype and shapes, and hands every other call to the model's own code.
Module plugs (norms, fused add-norms, matmul, gated MLPs) are first checked against each module's own
forward on a random input of the target's shape (the model's code is the plug's reference);
a kernel that disagrees is left out, with the error. A rotary plug is checked the same way
against the model's rotary modules and its ``apply_rotary_pos_emb`` (with the tables of its
own rotary embedding); the function is replaced in its transformers module for the process,
but by a dispatcher that takes only the calls made while this model instance runs (a
forward pre-hook and post-hook on it), so other models keep the original function, which
is restored when the last plug is undone (``plugs._RotaryDispatch``).
"""

import contextlib
import json
import os
import warnings
import weakref

import torch

try:  # inside an exported package
    from . import kernel_ops, plugs
except ImportError:  # top-level modules (the repository's tests)
    import kernel_ops
    import plugs

class Report:
    """What :func:`optimize` did to one model: ``replaced`` (one dict per installed target:
    ``target``, ``kind``, ``op``, ``params``, ``shapes`` (the problem shapes whose calls it
    takes; empty: every call), ``modules`` when the plug replaces module forwards), ``left`` (``{"target", "reason"}`` per target not installed), ``warnings``
    (environment differences, training mode). :meth:`undo` takes every plug out again;
    ``str(report)`` is the summary :func:`optimize` prints."""

    def __init__(self, package):
        self.package = package
        # the verification's deploy mode and its modes table (``manifest.json``)
        self.deploy = None
        self.modes = []
        # where the kernels take calls (``plugs.CONTEXTS``; :func:`_contexts`)
        self.contexts = list(plugs.CONTEXTS)
        # whether the caller chose `contexts` (else the verification's table did)
        self.contexts_asked = False
        self.replaced = []
        self.left = []
        self.warnings = []
        self._stack = contextlib.ExitStack()
        self.undone = False

    def undo(self):
        """Restores every module forward and registry entry the plugs changed; the model is
        then exactly as it was before :func:`optimize`. Calling it twice does nothing."""
        self._stack.close()
        self.undone = True

    def calls(self):
        """Calls each installed target took since :func:`optimize`, by target id, in eager
        mode (a compiled model's calls are not counted: counting inside a traced graph
        would make torch.compile recompile it at every call)."""
        return {r["target"]: r["_plug"].calls for r in self.replaced}

    def __repr__(self):
        return (f"<autokernel Report {self.package}: {len(self.replaced)} installed, {len(self.left)} left"
                f"{', undone' if self.undone else ''}>")

    def to_dict(self):
        """The report as JSON-able data."""
        replaced = [{k: v for k, v in r.items() if not k.startswith("_")} for r in self.replaced]
        return {"package": self.package, "replaced": replaced, "left": list(self.left),
                "warnings": list(self.warnings), "deploy": self.deploy, "modes": list(self.modes),
                "contexts": list(self.contexts)}

    def __str__(self):
        lines = [f"{self.package}: {len(self.replaced)} kernel(s) installed, {len(self.left)} left out"]
        for r in self.replaced:
            # the shapes said, since a call at any other runs the model's own code
            at = f" at {', '.join('x'.join(map(str, s)) for s in r['shapes'])}" if r.get("shapes") else ""
            where = f" in {len(r['modules'])} module(s)" if r.get("modules") is not None else ""
            lines.append(f"  replaced {r['target']} ({r['kind']}){at}{where} -> torch.ops.autokernel.{r['op']}")
        for e in self.left:
            lines.append(f"  left {e['target']}: {e['reason']}")
        if self.deploy:
            lines.append(f"  chosen for {self.deploy}; the verification measured the model with them at "
                         + ", ".join(_mode_text(m) for m in self.modes))
        off = [c for c in plugs.CONTEXTS if c not in self.contexts]
        if self.replaced and off:
            why = "as asked" if self.contexts_asked else \
                "the verification measured the model slower with the kernels there"
            lines.append(f"  in {_context_names(off)} the model's own code runs: {why}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        return "\n".join(lines)


def _mode_text(m):
    """One mode of the verification's table, as the report prints it: `compile 0.53x`."""
    if m.get("error"):
        return f"{m['mode']} (failed)"
    speedup = m.get("speedup")
    return f"{m['mode']} {speedup:.2f}x" if speedup else f"{m['mode']} n/a"


CONTEXT_MODES = {"eager": ("eager",), "cudagraph": ("cudagraph",), "compile": ("compile", "reduce-overhead")}
"""The verification's modes (``model_modes.MODES``) behind each context a plug tells apart
(``plugs.CONTEXTS``)."""


def _contexts(deploy, modes):
    """Where the kernels take calls (a list of ``plugs.CONTEXTS``), from the verification's
    `deploy` mode and its `modes` table (rows ``{"mode", "speedup", "error"}``): the context
    of the deploy mode (the kernels were chosen there); every other context unless one of
    its modes measured the model slower with the kernels (speedup < 1) or failed with them,
    so that running, capturing or compiling the optimized model is not slower than doing so
    to the model alone (in eager, a host-paced model pays each plugged call's host time;
    under torch.compile, inductor fuses the ops an opaque operator hides). A plug that is
    off in a context hands its calls on before anything else (``plugs.Plug._off``)."""
    out = []
    for context, names in CONTEXT_MODES.items():
        rows = [m for m in modes if m.get("mode") in names]
        lost = any(m.get("error") or (m.get("speedup") or 1.0) < 1.0 for m in rows)
        if deploy in names or not lost:
            out.append(context)
    return out


def _context_names(contexts):
    """`contexts` as the report prints them: ``eager and torch.compile``."""
    names = {"eager": "eager", "cudagraph": "CUDA graphs", "compile": "torch.compile"}
    return " and ".join(names[c] for c in contexts)


def _environment_differences(recorded):
    """What differs between the machine the kernels were verified on (`recorded`: the
    manifest's ``verified_on``) and this one: GPU, torch, triton. Each a sentence."""
    import triton

    here = {
        "device": f"cuda {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    out = []
    for key, now in here.items():
        then = recorded.get(key)
        if then and then != now:
            out.append(f"verified with {key} {then}, running with {now}: the kernels' speed (and on another "
                       f"GPU, their correctness) was not measured here")
    return out


def _register(manifest, root, target):
    """The target's operator, registered once per process (``kernel_ops.register``)."""
    name = f"{manifest['package']}_{target['id']}"
    op = kernel_ops.registered().get(kernel_ops.op_name(name))
    if op is None:
        op = kernel_ops.register(os.path.join(root, target["kernel"]), name=name, params=target.get("params"))
    return op


def _module_kind(kind):
    """For a kind plugged into modules: (does module m run it, the width of its input's last
    dim, its problem shape on x), from the call-site matcher; None for other kinds."""
    cs = plugs.call_sites
    # a fused add-norm goes into the norm modules (any of them: a norm the model does not
    # call on a residual add's sum keeps its own forward, plugs._FusedAdd)
    kind = {v: k for k, v in cs.ADD_NORM.items()}.get(kind, kind)
    if kind in ("rmsnorm", "layernorm"):
        return (lambda m: cs.norm_kind(m) == kind and getattr(m, "weight", None) is not None,
                lambda m: int(m.weight.shape[-1]),
                lambda m, x: (x.numel() // x.shape[-1], int(x.shape[-1])))
    if kind == "matmul":
        return (lambda m: cs.matmul_layout(m) is not None,
                lambda m: int(m.weight.shape[1 if cs.matmul_layout(m) == "b_transposed" else 0]),
                cs.matmul_problem)
    if kind == "fused_mlp":
        return (lambda m: cs.mlp_projections(m) is not None,
                lambda m: int(cs.mlp_projections(m)[0].weight.shape[1]),
                cs.mlp_problem)
    return None


def _probes(plug, model, select, width, problem):
    """``{module: (x, shapes, dtype, calls)}`` as the call-site matcher's captures give it,
    for every module of `model` that runs the plug's kind at one of its shapes, with a random
    input of that shape (in the plug's dtype, on the module's device) in place of one captured
    from a forward pass: the plug's check (``plugs.check_norm``, ``check_matmul``,
    ``check_mlp``) then decides the module's params with its own forward and checks the
    kernel against it."""
    g = torch.Generator().manual_seed(0)
    dtype_name = str(plug.dtype).replace("torch.", "")
    found = {}
    for m in model.modules():
        if not select(m):
            continue
        weight = next(m.parameters(), None)
        if weight is not None and weight.dtype != plug.dtype:
            continue  # a module in another dtype does not compute the target (a float16 model)
        device = weight.device if weight is not None else torch.device("cpu")
        for shape in plug.shapes:
            x = torch.randn(int(shape[0]), width(m), generator=g).to(device=device, dtype=plug.dtype)
            here = tuple(int(d) for d in problem(m, x))
            if plug._mine(*here):
                found[m] = (x, [here], dtype_name, 1)
                break
    return found


def _check_rotary(plug, model):
    """Finds where a rotary plug goes in `model` and checks the kernel there, on random
    inputs at the target's shapes (``call_sites.probe_rotary_calls``: the model's rotary
    modules and its ``apply_rotary_pos_emb`` with the tables of its own rotary embedding,
    their pairing decided by their own output): None, or why the target is left out. A
    rotary module has no weights of its own to tell its dtype by, and takes any: the
    model's floating-point parameters tell what its activations will be."""
    weights = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if weights and plug.dtype not in weights:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in weights))
        wanted = str(plug.dtype).removeprefix("torch.")
        return f"no module of this model computes rotary_embedding in {wanted} (its parameters are {names})"
    try:
        why = plugs.check_rotary(plug, plugs.call_sites.probe_rotary_calls(model, plug.shapes, plug.dtype))
    except Exception as e:  # noqa: BLE001 - a kernel that raises on the model's input is wrong
        why = f"raised {type(e).__name__}: {e}"
    if why:
        return f"plug check failed: {why}"
    if not plug.modules and not plug.function_modules:
        return f"{plugs.unused_reason(plug)} (no rotary module or function of it at these parameters)"
    return None


def optimize(model, manifest_path, *, allow_training=False, contexts=None, verbose=True):
    """Installs the exported kernels into `model` (an ``nn.Module``, this instance only) and
    returns a :class:`Report`; ``report.undo()`` takes them out again.

    `manifest_path`: the package's ``manifest.json``. A model in training mode is left as
    it is (the kernels have no backward) unless `allow_training`; a call made while
    gradients are needed goes to the model's own code in any case. `contexts`: where the
    kernels take calls, any of ``plugs.CONTEXTS`` (``"eager"``, ``"cudagraph"``: while a
    CUDA graph captures, ``"compile"``: while torch.compile traces); None decides from the
    verification's modes table (:func:`_contexts`). Out of eager, the first eager call at
    each shape still runs the kernel when CUDA graphs take it (so that Triton has compiled
    and loaded it before a capture). Warns when the GPU, torch or triton differ from
    those the kernels were verified with. `verbose` prints the report.

    Raises TypeError when `model` is not an ``nn.Module``, ValueError for an unknown
    context, RuntimeError when `model` already holds kernels of an earlier `optimize` that
    was not undone (undoing them out of order would leave plugs behind)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"optimize takes a torch.nn.Module, not {type(model).__name__}")
    if isinstance(contexts, str):
        contexts = (contexts,)
    earlier = _OPTIMIZED.get(id(model))
    if earlier is not None and earlier[0]() is model and not earlier[1].undone:
        raise RuntimeError(f"this model already holds the kernels of {earlier[1].package}: call that report's "
                           "undo() first (optimize installs once per model instance)")
    root = os.path.dirname(os.path.abspath(manifest_path))
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    report = Report(manifest["package"])
    verification = manifest.get("verification", {})
    report.deploy, report.modes = verification.get("deploy"), verification.get("modes") or []
    if contexts is None:
        # as the verification recorded it; a manifest from before it did: from its table
        recorded = verification.get("contexts")
        report.contexts = recorded if recorded is not None else _contexts(report.deploy, report.modes)
    else:
        unknown = sorted(set(contexts) - set(plugs.CONTEXTS))
        if unknown:
            raise ValueError(f"unknown contexts {unknown}; expected some of {list(plugs.CONTEXTS)}")
        report.contexts = [c for c in plugs.CONTEXTS if c in contexts]
        report.contexts_asked = True
    for w in _environment_differences(manifest.get("verified_on", {})):
        report.warnings.append(w)
        warnings.warn(f"{manifest['package']}: {w}", stacklevel=3)
    if model.training and not allow_training:
        why = ("the model is in training mode and the kernels have no backward: call model.eval() first, "
               "or optimize(model, allow_training=True) to install them for calls made without gradients")
        report.warnings.append(why)
        warnings.warn(f"{manifest['package']}: {why}", stacklevel=3)
        for t in manifest["targets"]:
            report.left.append({"target": t["id"], "reason": "training mode: not installed"})
        if verbose:
            print(report)
        return report
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    for t in manifest["targets"]:
        try:
            op = _register(manifest, root, t)
        except Exception as e:  # noqa: BLE001 - a kernel that cannot load is left out, said
            report.left.append({"target": t["id"], "reason": f"cannot register: {type(e).__name__}: {e}"})
            continue
        # never a patch of torch that other models in the process would see
        plug = plugs.Plug(t["id"], t["kind"], op, t.get("shapes") or (), t.get("params"), dtypes[t["dtype"]],
                          t.get("layout"), process_wide=False)
        modules = None
        module_kind = _module_kind(t["kind"])
        if t["kind"] == "rotary_embedding":
            why = _check_rotary(plug, model)
            if why:
                report.left.append({"target": t["id"], "reason": why})
                continue
            modules = [name for name, m in model.named_modules() if m in plug.modules]
            modules += [f"{mod.__name__}.{plugs.call_sites.ROTARY_FUNCTION}" for mod in plug.function_modules]
        elif module_kind is not None:
            check = {"matmul": plugs.check_matmul, "fused_mlp": plugs.check_mlp}.get(t["kind"], plugs.check_norm)
            try:
                probes = _probes(plug, model, *module_kind)
                if t["kind"] in plugs.call_sites.ADD_NORM.values():
                    # the add's operands: the probe and a second random input of its shape
                    g = torch.Generator().manual_seed(1)
                    probes = {m: (x, torch.randn(x.shape, generator=g).to(x), *rest)
                              for m, (x, *rest) in probes.items()}
                    check = plugs.check_add_norm
                why = check(plug, probes)
            except Exception as e:  # noqa: BLE001 - a kernel that raises on the module's input is wrong
                why = f"raised {type(e).__name__}: {e}"
            if why:
                report.left.append({"target": t["id"], "reason": f"plug check failed: {why}"})
                continue
            if not plug.modules:
                report.left.append({"target": t["id"], "reason": f"no module of this model computes {t['kind']} "
                                    f"{t.get('params')} at {plug.shapes} in {t['dtype']}"})
                continue
            modules = [name for name, m in model.named_modules() if m in plug.modules]
        # after the checks above, which must see every call at the target's shapes
        plug.contexts = set(report.contexts)
        try:
            report._stack.enter_context(plug.installed(model))
        except NotImplementedError as e:
            report.left.append({"target": t["id"], "reason": f"not pluggable: {e}"})
            continue
        report.replaced.append({"target": t["id"], "kind": t["kind"], "op": op.name, "params": t.get("params"),
                                "shapes": [list(s) for s in plug.shapes], "modules": modules, "_plug": plug})
    if report.replaced:
        for key in [k for k, (ref, _) in _OPTIMIZED.items() if ref() is None]:
            del _OPTIMIZED[key]
        _OPTIMIZED[id(model)] = (weakref.ref(model), report)
    if verbose:
        print(report)
    return report


# id(model) -> (a weak reference to it, the Report of the kernels it holds): one `optimize`
# at a time per model instance (an attribute on the model would be state torch.compile
# guards on)
_OPTIMIZED = {}

