"""Problems in KernelBench's format (docs/problems.md): a reference ``class Model(nn.Module)``
with ``get_inputs()`` and ``get_init_inputs()``, and a candidate kernel.py whose ``class
ModelNew`` has the same constructor.

Two processes use this module, with the same functions so that both build the same
inputs and weights:

* the candidate's sandboxed worker (``harness.run_problem``): builds ``ModelNew`` and the
  inputs of each case, runs it, writes its outputs as raw float32 files and reports its
  conduct (inputs changed, the reference module called, launches of its own kernels);
* the trusted script worker (:func:`check`, through ``call_script``): builds ``Model`` for
  the same cases, compares the candidate's files with its outputs and times the reference
  (eager and torch.compile).

So the reference's outputs never exist in the process a candidate runs in, as for the
kinds (docs/bench.md, "Threat model").

Cases: seeds ``FIRST_SEED``… at the problem's own sizes, and one more at *shrunk* sizes:
every int constant of the problem module of at least ``SHRINK_MIN`` (``batch_size = 16``,
``dim = 4096``) becomes ``g - g // 4 - 1`` before ``get_inputs()`` and
``get_init_inputs()`` read it, which catches a kernel right only at the default shape.
Smaller constants (kernel sizes, strides, head counts) stay.

Tolerances: KernelBench's, ``torch.allclose`` with atol = rtol = 1e-4 in float32 and 1e-2 in
float16 and bfloat16 (KernelBench's ``get_tolerance_for_precision``, after torchbench); a
problem overrides them with module-level ``ATOL`` and ``RTOL``.
"""

import importlib.util
import itertools
import os
import sys

SHRINK_MIN = 16
"""The smallest module-level int constant the shrunk case changes."""

FIRST_SEED = 42
"""The first case's seed; case i (at the default sizes) uses FIRST_SEED + i."""

TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
"""atol = rtol per dtype (KernelBench's defaults)."""

# The L2 flush before each timed trial: larger than any GPU's L2 (H100 50 MB, H200 60 MB).
_FLUSH_BYTES = 256 << 20

_COUNTER = itertools.count()

SHAPING_OPS = frozenset(
    "aten::" + name for name in (
        "empty empty_like empty_strided empty_permuted new_empty new_zeros new_full zeros "
        "zeros_like ones ones_like full full_like arange fill_ zero_ view view_as reshape "
        "_reshape_alias as_strided contiguous clone copy_ to _to_copy detach t transpose "
        "permute expand expand_as unsqueeze squeeze select slice narrow split chunk unbind "
        "flatten unflatten cat stack flip alias lift_fresh resolve_conj resolve_neg item "
        "_local_scalar_dense"
    ).split()
)
"""Ops that move, shape or allocate memory: left out of the reference's own ops that a
candidate may not re-dispatch all of (:func:`check`'s ``reference_ops``)."""


class ProblemError(Exception):
    """The problem file (not the candidate) is unusable: the request's fault."""


def shrunk(value):
    """The shrunk case's value of a size constant `value` (≥ SHRINK_MIN)."""
    return value - value // 4 - 1


def load(path, shrink=False):
    """Executes the problem file `path` as a fresh module; `shrink`: its size constants
    shrunk first (:func:`shrunk`). Returns (module, {name: (old, new)} of what changed).
    Raises ProblemError when it does not load or lacks Model, get_inputs or
    get_init_inputs."""
    name = f"autokernel_problem_{os.getpid()}_{next(_COUNTER)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"cannot load `{path}` as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the problem's own failure, reported as such
        raise ProblemError(f"the problem file `{path}` raised {type(e).__name__}: {e}") from e
    missing = [a for a in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(module, a, None))]
    if missing:
        raise ProblemError(f"`{path}` is not in KernelBench's format: it defines no {', '.join(missing)} "
                           "(a problem has `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`)")
    changed = {}
    if shrink:
        for key, value in list(vars(module).items()):
            if key.startswith("_") or type(value) is not int or value < SHRINK_MIN:
                continue
            changed[key] = (value, shrunk(value))
            setattr(module, key, shrunk(value))
    return module, changed


def describe(problem):
    """What the judge needs before it runs a candidate on `problem` (a path): ``sizes`` (the
    size constants, name → value), ``shrunk_sizes`` (their shrunk values) and ``device``
    (where this worker runs: cuda or cpu). Raises ProblemError for a file that is not a
    usable problem."""
    _, changed = load(problem, shrink=True)
    harness = sys.modules.get("harness")
    device = harness._STATE.get("device", "cpu") if harness is not None else "cpu"
    return {"sizes": {k: v[0] for k, v in changed.items()}, "shrunk_sizes": {k: v[1] for k, v in changed.items()},
            "device": device}


def tolerance(module, dtype):
    """(atol, rtol) for outputs in `dtype` (a name), the problem's ATOL/RTOL first."""
    default = TOLERANCES[dtype]
    return float(getattr(module, "ATOL", default)), float(getattr(module, "RTOL", default))


def _torch_dtype(torch, name):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def _on(torch, value, device, dtype):
    """`value` (a get_inputs item) on `device`, floating tensors in `dtype`."""
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    return value


def build(module, cls, seed, device, dtype_name):
    """`cls(*get_init_inputs())` and the inputs of the case `seed`, as KernelBench builds
    them: the seed set before the init inputs, the model and the inputs each; the model
    and the floating inputs moved to `device` in the dtype. Returns (model, inputs)."""
    import torch

    dtype = _torch_dtype(torch, dtype_name)
    torch.manual_seed(seed)
    init = module.get_init_inputs()
    torch.manual_seed(seed)
    model = cls(*init)
    model = model.to(device=device, dtype=dtype) if isinstance(model, torch.nn.Module) else model
    torch.manual_seed(seed)
    inputs = [_on(torch, x, device, dtype) for x in module.get_inputs()]
    return model, inputs


def outputs_of(result):
    """The output tensors of a forward's `result` (a tensor, or a tuple or list of them).
    Raises TypeError for anything else."""
    import torch

    items = result if isinstance(result, (tuple, list)) else [result]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"forward returned {type(result).__name__}; a problem's forward returns a tensor "
                        "or a tuple of tensors")
    return list(items)


def time_call(fn, inputs, device, trials, lease=None):
    """Median latency of `fn(*inputs)` in µs, timed as KernelBench does: warm-up calls
    discarded, then `trials` calls each between CUDA events with the L2 flushed before it
    (on the CPU, wall time). `lease`: a context manager held around the trials (the GPU
    lease)."""
    import contextlib
    import time

    import torch

    lease = lease or contextlib.nullcontext()
    with torch.no_grad(), lease:
        for _ in range(3):
            fn(*inputs)
        samples = []
        if device == "cuda":
            flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            for _ in range(trials):
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*inputs)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
        else:
            for _ in range(trials):
                t0 = time.perf_counter()
                fn(*inputs)
                samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return samples[len(samples) // 2]


def _read_output(torch, numpy, path, shape):
    """A candidate's raw float32 output file as a tensor of `shape`; None when its size does
    not match (the candidate's process wrote what it wrote)."""
    numel = 1
    for d in shape:
        numel *= int(d)
    if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) != numel * 4:
        return None
    return torch.from_numpy(numpy.fromfile(path, dtype=numpy.float32)).reshape([int(d) for d in shape])


def _own_ops(harness, model, inputs):
    """The compute ops `model(*inputs)` dispatches itself (not nested in another aten op),
    through the harness's op check; [] outside a worker."""
    import torch

    if harness is None:
        return []
    with torch.no_grad(), harness._TimedOps() as monitor:
        monitor.call(lambda: model(*inputs))
    _, own, _ = monitor.ops()
    return sorted(set(own) - SHAPING_OPS)


def check(problem, candidate, outputs_dir, dtype="float32", time_reference=False, compiled=False,
          trials=20):
    """The trusted half of judging a candidate on `problem` (a path): for each case of
    `candidate` (the JSON `harness.run_problem` returned), the reference's outputs in the
    same case, compared with the candidate's files under `outputs_dir`.

    Returns a dict: `cases` (per case: seed, shrunk, passed, max_abs_error, reason),
    `replayed` (why an output repeats an earlier case's, or None), `skipped` (why the shrunk
    case was not judged, or None), `reference_ops` (the aten ops the reference's forward
    dispatches itself, less :data:`SHAPING_OPS`: a candidate that dispatches all of them
    re-runs the reference) and, with `time_reference`, `eager_latency_us` and, with
    `compiled`, `compiled_latency_us` (or `compile_error`) at the first case.
    """
    import numpy
    import torch

    harness = sys.modules.get("harness")
    device = "cuda" if harness is not None and harness._STATE.get("device") == "cuda" else "cpu"
    lease = (lambda: harness.gpu_lease(device == "cuda")) if harness is not None else (lambda: None)
    modules = {}
    result = {"cases": [], "replayed": None, "skipped": None}
    seen = []  # (seed, candidate outputs, reference outputs) at the default sizes
    first = None
    for case in candidate.get("cases", []):
        shrink = bool(case["shrunk"])
        if shrink not in modules:
            modules[shrink] = load(problem, shrink)[0]
        module = modules[shrink]
        atol, rtol = tolerance(module, dtype)
        row = {"seed": case["seed"], "shrunk": shrink, "passed": False, "max_abs_error": None, "reason": None}
        try:
            model, inputs = build(module, module.Model, case["seed"], device, dtype)
            with torch.no_grad():
                refs = [t.detach().float().cpu() for t in outputs_of(model(*inputs))]
        except Exception as e:  # noqa: BLE001 - the reference's failure, not the candidate's
            if shrink:
                result["skipped"] = f"the reference raised at the shrunk sizes ({type(e).__name__}: {e})"
                continue
            raise ProblemError(f"the reference Model raised {type(e).__name__}: {e}") from e
        if first is None and not shrink:
            first = (model, inputs)
            result["reference_ops"] = _own_ops(harness, model, inputs)
        if case.get("error"):
            row["reason"] = case["error"]
            result["cases"].append(row)
            continue
        outs = case.get("outputs", [])
        if len(outs) != len(refs):
            row["reason"] = f"{len(outs)} outputs, the reference has {len(refs)}"
            result["cases"].append(row)
            continue
        cands = []
        for i, (meta, ref) in enumerate(zip(outs, refs)):
            if list(meta["shape"]) != list(ref.shape):
                row["reason"] = f"output {i} has shape {list(meta['shape'])}, the reference's is {list(ref.shape)}"
                break
            got = _read_output(torch, numpy, os.path.join(outputs_dir, os.path.basename(meta["file"])), meta["shape"])
            if got is None:
                row["reason"] = f"output {i}'s file is missing or of the wrong size"
                break
            cands.append(got)
        if row["reason"] is None:
            errors = [float((c - r).abs().max()) if c.numel() else 0.0 for c, r in zip(cands, refs)]
            bad = [i for i, (c, r) in enumerate(zip(cands, refs)) if not torch.allclose(c, r, atol=atol, rtol=rtol)]
            # NaN or Inf has no JSON form the judge can read: no figure, the reason says it
            finite = all(e == e and abs(e) != float("inf") for e in errors)
            row["max_abs_error"] = (max(errors) if errors else 0.0) if finite else None
            if bad:
                row["reason"] = (f"output {bad[0]} differs from the reference: max |error| "
                                 f"{errors[bad[0]]:.3g} (atol {atol:g}, rtol {rtol:g})")
            else:
                row["passed"] = True
            if not shrink:
                for seed, earlier, earlier_refs in seen:
                    same = all(c.shape == e.shape and torch.equal(c, e) for c, e in zip(cands, earlier))
                    differs = any(not torch.allclose(r, e, atol=atol, rtol=rtol) for r, e in zip(refs, earlier_refs))
                    if same and differs and result["replayed"] is None:
                        result["replayed"] = (f"its outputs at seed {case['seed']} are bitwise those at seed "
                                              f"{seed}, whose reference differs: it "
                                              "replays an earlier call's output")
                seen.append((case["seed"], cands, refs))
        result["cases"].append(row)
    if time_reference and first is not None:
        model, inputs = first
        result["eager_latency_us"] = time_call(model, inputs, device, trials, lease())
        if compiled:
            try:
                result["compiled_latency_us"] = time_call(torch.compile(model), inputs, device, trials, lease())
            except Exception as e:  # noqa: BLE001 - a reference torch.compile cannot compile
                result["compile_error"] = f"{type(e).__name__}: {e}"
    return result
