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
``get_init_inputs()`` read it, which catches a kernel right only at the default shape;
where the reference itself fails at those sizes (a hidden size no longer divisible by the
head count), ``g - g // 4`` instead (:func:`describe`). Smaller constants (kernel sizes,
strides, head counts) stay. A case's seed builds the weights (KernelBench's seeding); its
inputs come from a second seed the candidate's worker draws only after ``ModelNew`` is
built, so no constructor can know them in advance and keep answers ready.

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


def shrunk(value, rule=0):
    """The shrunk case's value of a size constant `value` (≥ SHRINK_MIN): rule 0 makes it odd
    and off every power of two (``g - g // 4 - 1``), rule 1 keeps a factor of it
    (``g - g // 4``) for problems whose sizes must divide one another."""
    return value - value // 4 - (1 if rule == 0 else 0)


def load(path, sizes=None):
    """Executes the problem file `path` as a fresh module, with the module-level int constants
    named in `sizes` (name → value) set to those values before anything reads them. Returns
    (module, {name: (old, new)} of what changed). Raises ProblemError when it does not load,
    lacks Model, get_inputs or get_init_inputs, or `sizes` names a constant it lacks."""
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
    for key, value in (sizes or {}).items():
        old = vars(module).get(key)
        if type(old) is not int:
            raise ProblemError(f"`{path}` has no module-level int constant `{key}` to resize")
        changed[key] = (old, int(value))
        setattr(module, key, int(value))
    return module, changed


def size_constants(module):
    """The module-level int constants of a problem the shrunk case changes (≥ SHRINK_MIN,
    names not starting with `_`): name → value."""
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and type(v) is int and v >= SHRINK_MIN}


def describe(problem):
    """What the judge needs before it runs a candidate on `problem` (a path), after running
    its reference once at the problem's own sizes: ``sizes`` (the
    size constants, name → value), ``shrunk_sizes`` (their values in the shrunk case: the
    first rule of :func:`shrunk` at which the reference builds and runs; {} when none does
    or there are no constants), ``shrunk_skipped`` (why there is no shrunk case, or None) and
    ``device`` (where this worker runs: cuda or cpu). Raises ProblemError for a file that is
    not a usable problem."""
    import torch

    module, _ = load(problem)
    sizes = size_constants(module)
    harness = sys.modules.get("harness")
    device = harness._STATE.get("device", "cpu") if harness is not None else "cpu"
    result = {"sizes": sizes, "shrunk_sizes": {}, "shrunk_skipped": None, "device": device}
    tolerance(module, "float32")
    try:
        model, inputs = build(module, module.Model, FIRST_SEED, device, "float32")
        with torch.no_grad():
            out = model(*inputs)
    except Exception as e:  # noqa: BLE001 - the problem's own failure, reported as such
        raise ProblemError(f"the reference Model raised {type(e).__name__}: {e}") from e
    try:
        outputs_of(out)
    except TypeError as e:
        raise ProblemError(f"the reference Model's {e}") from e
    if not sizes:
        result["shrunk_skipped"] = (f"the problem has no module-level int constant of at least {SHRINK_MIN} "
                                    "(batch_size, dim, ...), so no case at other sizes")
        return result
    errors = []
    for rule in (0, 1):
        candidate = {k: shrunk(v, rule) for k, v in sizes.items()}
        try:
            shrunk_module, _ = load(problem, candidate)
            model, inputs = build(shrunk_module, shrunk_module.Model, FIRST_SEED, device, "float32")
            with torch.no_grad():
                outputs_of(model(*inputs))
        except Exception as e:  # noqa: BLE001 - the reference's failure at these sizes
            errors.append(f"{candidate}: {type(e).__name__}: {e}")
            continue
        result["shrunk_sizes"] = candidate
        return result
    result["shrunk_skipped"] = "the reference itself fails at the shrunk sizes (" + "; ".join(errors) + ")"
    return result


def tolerance(module, dtype):
    """(atol, rtol) for outputs in `dtype` (a name), the problem's ATOL/RTOL first."""
    default = TOLERANCES[dtype]
    values = []
    for name in ("ATOL", "RTOL"):
        value = getattr(module, name, default)
        if type(value) not in (int, float) or not value >= 0:
            raise ProblemError(f"the problem's {name} = {value!r} is not a tolerance: set it to a number "
                               f"of at least 0 (KernelBench's default in {dtype} is {default:g})")
        values.append(float(value))
    return values[0], values[1]


def _torch_dtype(torch, name):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def _on(torch, value, device, dtype):
    """`value` (a get_inputs item) on `device`, floating tensors in `dtype`."""
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    return value


def build_model(module, cls, seed, device, dtype_name):
    """`cls(*get_init_inputs())` as KernelBench builds it: the seed set before the init
    inputs and again before the model; moved to `device` in the dtype."""
    import torch

    dtype = _torch_dtype(torch, dtype_name)
    torch.manual_seed(seed)
    init = module.get_init_inputs()
    torch.manual_seed(seed)
    model = cls(*init)
    return model.to(device=device, dtype=dtype) if isinstance(model, torch.nn.Module) else model


def make_inputs(module, seed, device, dtype_name):
    """`get_inputs()` under `seed`, the floating tensors on `device` in the dtype."""
    import torch

    dtype = _torch_dtype(torch, dtype_name)
    torch.manual_seed(seed)
    return [_on(torch, x, device, dtype) for x in module.get_inputs()]


def build(module, cls, seed, device, dtype_name, input_seed=None):
    """(model, inputs) of a case: :func:`build_model` under `seed`, then
    :func:`make_inputs` under `input_seed` (`seed` when None, as KernelBench does)."""
    model = build_model(module, cls, seed, device, dtype_name)
    return model, make_inputs(module, seed if input_seed is None else input_seed, device, dtype_name)


def outputs_of(result):
    """The output tensors of a forward's `result` (a tensor, or a tuple or list of them).
    Raises TypeError for anything else."""
    import torch

    items = result if isinstance(result, (tuple, list)) else [result]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"forward returned {type(result).__name__}: a problem's forward returns a tensor "
                        "or a tuple or list of tensors")
    return list(items)


def time_call(fn, inputs, device, trials, lease=None, on_trial=None, before_trial=None):
    """Median latency of `fn(*inputs)` in µs, timed as KernelBench does: warm-up calls
    discarded, then `trials` calls each between CUDA events with the L2 flushed before it
    (on the CPU, wall time). `lease`: a context manager held around the trials (the GPU
    lease). `on_trial(i, result)`: called with each trial's result once it is timed (the
    candidate's worker keeps one to check); `before_trial(i)`: called before each trial,
    before the flush and outside the timing (the candidate's worker refills the inputs)."""
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
            for i in range(trials):
                if before_trial is not None:
                    before_trial(i)
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                result = fn(*inputs)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) * 1e3)
                if on_trial is not None:
                    on_trial(i, result)
        else:
            for i in range(trials):
                if before_trial is not None:
                    before_trial(i)
                t0 = time.perf_counter()
                result = fn(*inputs)
                samples.append((time.perf_counter() - t0) * 1e6)
                if on_trial is not None:
                    on_trial(i, result)
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
    """(the compute ops `model(*inputs)` dispatches itself, not nested in another aten op;
    those its chains end in, :meth:`harness._TimedOps.leaves`), less :data:`SHAPING_OPS`,
    through the harness's op check; ([], []) outside a worker."""
    import torch

    if harness is None:
        return [], []
    with torch.no_grad(), harness._TimedOps() as monitor:
        monitor.call(lambda: model(*inputs))
    _, own, _ = monitor.ops()
    return sorted(set(own) - SHAPING_OPS), monitor.leaves(SHAPING_OPS)


def _compare(torch, numpy, outputs_dir, outs, refs, atol, rtol):
    """(reason or None, max |error| or None, the candidate's tensors) of the candidate's
    output files `outs` (``{shape, file}`` each) against the reference's tensors `refs`."""
    if len(outs) != len(refs):
        return f"{len(outs)} outputs, the reference has {len(refs)}", None, []
    cands = []
    for i, (meta, ref) in enumerate(zip(outs, refs)):
        if list(meta["shape"]) != list(ref.shape):
            return f"output {i} has shape {list(meta['shape'])}, the reference's is {list(ref.shape)}", None, []
        got = _read_output(torch, numpy, os.path.join(outputs_dir, os.path.basename(meta["file"])), meta["shape"])
        if got is None:
            return f"output {i}'s file is missing or of the wrong size", None, []
        cands.append(got)
    errors = [float((c - r).abs().max()) if c.numel() else 0.0 for c, r in zip(cands, refs)]
    bad = [i for i, (c, r) in enumerate(zip(cands, refs)) if not torch.allclose(c, r, atol=atol, rtol=rtol)]
    # NaN or Inf has no JSON form the judge can read: no figure, the reason says it
    finite = all(e == e and abs(e) != float("inf") for e in errors)
    worst = (max(errors) if errors else 0.0) if finite else None
    if bad:
        return (f"output {bad[0]} differs from the reference: max |error| {errors[bad[0]]:.3g} "
                f"(atol {atol:g}, rtol {rtol:g})"), worst, cands
    return None, worst, cands


def check(problem, cases, candidate, outputs_dir, dtype="float32", time_reference=False, compiled=False,
          trials=20):
    """The trusted half of judging a candidate on `problem` (a path): for each of `cases`
    (the judge's list, ``{seed, sizes}`` each) the reference's outputs, built as the
    candidate's case was (its weights under ``seed``, its inputs under the ``input_seed``
    the candidate's worker drew and reported), compared with the candidate's files under
    `outputs_dir`; `candidate` is the JSON `harness.run_problem` returned.

    Returns a dict: `cases` (per case: seed, input_seed, shrunk, passed, max_abs_error, reason),
    `replayed` (why an output repeats an earlier case's, or None), `timed` (why the output of
    the trial the candidate's worker kept while timing differs from the reference, or None),
    `without_kernels` (why the outputs made with the candidate's own kernels skipped are still
    the reference's, or None),
    `skipped` (why the shrunk case was not judged, or None), `reference_ops` (the aten ops
    the reference's forward dispatches itself, less :data:`SHAPING_OPS`: a candidate that
    dispatches all of them re-runs the reference), `reference_leaf_ops` (the ops its chains
    end in, less the same: a candidate that dispatches all of those re-runs it from a lower
    level) and, with `time_reference`,
    `eager_latency_us` and, with `compiled`, `compiled_latency_us` (or `compile_error`) at
    the first case. Raises ProblemError when the reference fails at the problem's own
    sizes, and ValueError when `candidate` does not answer `cases` one for one.
    """
    import numpy
    import torch

    harness = sys.modules.get("harness")
    device = "cuda" if harness is not None and harness._STATE.get("device") == "cuda" else "cpu"
    lease = (lambda: harness.gpu_lease(device == "cuda")) if harness is not None else (lambda: None)
    ran = candidate.get("cases", [])
    if len(ran) != len(cases) or any(r.get("seed") != c["seed"] for r, c in zip(ran, cases)):
        raise ValueError("the candidate's worker reported other cases than it was given")
    modules = {}
    result = {"cases": [], "replayed": None, "timed": None, "without_kernels": None, "skipped": None}
    seen = []  # (seed, candidate outputs, reference outputs) at the default sizes
    first = None
    for case, got in zip(cases, ran):
        sizes = case.get("sizes") or {}
        shrink = bool(sizes)
        key = tuple(sorted(sizes.items()))
        if key not in modules:
            modules[key] = load(problem, sizes)[0]
        module = modules[key]
        atol, rtol = tolerance(module, dtype)
        input_seed = got.get("input_seed")
        row = {"seed": case["seed"], "input_seed": input_seed if type(input_seed) is int else None,
               "shrunk": shrink, "passed": False, "max_abs_error": None, "reason": None}
        if got.get("error"):
            row["reason"] = got["error"]
            result["cases"].append(row)
            continue
        if row["input_seed"] is None:
            row["reason"] = "the candidate's worker reported no input seed for the case"
            result["cases"].append(row)
            continue
        try:
            model, inputs = build(module, module.Model, case["seed"], device, dtype, input_seed)
            with torch.no_grad():
                refs = [t.detach().float().cpu() for t in outputs_of(model(*inputs))]
        except Exception as e:  # noqa: BLE001 - the reference's failure, not the candidate's
            if shrink:
                result["skipped"] = f"the reference raised at the shrunk sizes ({type(e).__name__}: {e})"
                continue
            raise ProblemError(f"the reference Model raised {type(e).__name__}: {e}") from e
        reason, worst, cands = _compare(torch, numpy, outputs_dir, got.get("outputs", []), refs, atol, rtol)
        row["reason"], row["max_abs_error"], row["passed"] = reason, worst, reason is None
        if first is None and not shrink:
            first = (model, inputs, refs, atol, rtol)
            result["reference_ops"], result["reference_leaf_ops"] = _own_ops(harness, model, inputs)
            def refs_at(seed):
                """The first case's reference outputs on the inputs of `seed`."""
                if seed == input_seed:
                    return refs
                with torch.no_grad():
                    return [t.detach().float().cpu() for t in outputs_of(model(*make_inputs(module, seed, device,
                                                                                              dtype)))]

            timed = candidate.get("timed")
            # the timed trials ran the first case's model: judged where that case passed
            if timed and row["passed"] and type(timed.get("input_seed")) is int:
                why, _, _ = _compare(torch, numpy, outputs_dir, timed.get("outputs", []),
                                     refs_at(timed["input_seed"]), atol, rtol)
                if why is not None:
                    result["timed"] = (f"its output at timed trial {timed.get('trial')} of seed {case['seed']} "
                                       f"(inputs seed {timed.get('input_seed')}) is not the reference's ({why}), "
                                       "though its first call's was")
            bare = candidate.get("without_kernels")
            if bare and row["passed"] and type(bare.get("input_seed")) is int:
                why, _, _ = _compare(torch, numpy, outputs_dir, bare.get("outputs", []),
                                     refs_at(bare["input_seed"]), atol, rtol)
                if why is None:
                    result["without_kernels"] = (f"its outputs at seed {case['seed']} (inputs seed "
                                                 f"{bare['input_seed']}) are the reference's with "
                                                 "its own Triton kernels skipped and fresh memory filled with NaN: "
                                                 "the kernels do none of the work")
        if cands and not shrink:
            for seed, earlier, earlier_refs in seen:
                same = all(c.shape == e.shape and torch.equal(c, e) for c, e in zip(cands, earlier))
                differs = any(not torch.allclose(r, e, atol=atol, rtol=rtol) for r, e in zip(refs, earlier_refs))
                if same and differs and result["replayed"] is None:
                    result["replayed"] = (f"its outputs at seed {case['seed']} are bitwise those at seed "
                                          f"{seed}, whose reference differs: it replays an earlier call's output")
            seen.append((case["seed"], cands, refs))
        result["cases"].append(row)
    if time_reference and first is not None:
        model, inputs = first[0], first[1]
        result["eager_latency_us"] = time_call(model, inputs, device, trials, lease())
        if compiled:
            try:
                result["compiled_latency_us"] = time_call(torch.compile(model), inputs, device, trials, lease())
            except Exception as e:  # noqa: BLE001 - a reference torch.compile cannot compile
                result["compile_error"] = f"{type(e).__name__}: {e}"
    return result
