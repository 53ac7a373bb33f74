"""Worker-side harness of autokernel-bench: loads a candidate kernel.py, runs it on fresh
inputs next to the catalogue's reference, times it, and hands the outputs to Rust.

The harness does NOT judge outputs: every comparison (shape, dtype, NaN/Inf rules,
tolerances, bitwise determinism) happens in Rust on float32 numpy copies, so a candidate
cannot change a verdict by patching Python functions. What the harness does check is the
candidate's conduct around a call (inputs left bitwise unchanged, output a plain tensor that
aliases no input and is not replayed); those findings go back to Rust as "problems". What
tells whether the result came from the candidate's own Triton kernels (the aten ops a
monitored call dispatched, the calls that launched no kernel of its file) goes back as
counts and op lists, which Rust judges (forbidden ops at once, the rest once the outputs
are right).

Every function the harness relies on is captured in `_P` when this module is imported, i.e.
before any candidate is loaded; Rust also keeps its own references and checks them after
each candidate (see `src/worker/guards.rs`).

Called from Rust (src/worker/) only; results are JSON strings and numpy arrays, and for the
timed loop (src/worker/timing.rs) the inputs, pools and calls it drives.
"""

import functools
import hashlib
import importlib.util
import inspect
import itertools
import json
import os
import sys
import time
import traceback
import types

_STATE = {
    "initialised": False,
    "device": "cpu",
    "last_outputs": [],  # previous calls' outputs, kept alive so a replay is detectable
    "counter": itertools.count(),
}

# Filled by init(): private references taken before any candidate code runs.
_P = {}


class CandidateError(Exception):
    """The candidate raised; carries the formatted traceback."""


class SetupError(Exception):
    """A problem with the machine or the request that the user fixes (no GPU for `--device
    cuda`): the worker reports its message alone, without a traceback."""


def _now():
    return time.perf_counter()


# The inherited fd of the GPU lease file (src/worker/lease.rs); unset on the CPU.
_GPU_LEASE_FD = "AUTOKERNEL_WORKER_GPU_LEASE_FD"


class gpu_lease:
    """Holds the GPU lease for the `with` block: no other worker of this user runs work on
    the GPU meanwhile, and this block waits while one measures (docs/bench.md, "The GPU
    lease"). For trusted work only (a fresh worker's warm-up, the verification's timing);
    the timed loop takes it in Rust. Does nothing where the worker was given no lease (the
    CPU) or it cannot be taken. Not reentrant: the lock belongs to the process's one open
    file description, so an inner release would free an outer hold. `on_gpu` false: a
    no-op (a worker left to choose its device that found none)."""

    def __init__(self, on_gpu=True):
        self._on_gpu = on_gpu

    def __enter__(self):
        import fcntl

        self._fd = None
        if not self._on_gpu:
            return self
        try:
            fd = int(os.environ[_GPU_LEASE_FD])
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
        except (KeyError, ValueError, OSError):
            pass
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return False


def init(device, catalogue_json, registry_modules_json="[]", launchers_json="[]"):
    """Imports torch, numpy and triton for `device` ("auto" | "cuda" | "cpu"), loads the
    catalogue (JSON of ``Catalogue::to_json``) and the Python registry: the built-in kinds,
    then each file of `registry_modules_json` (a JSON list of paths), which registers more
    with ``catalogue.register``.

    On the GPU, Triton's launchers for the kernel signatures of `launchers_json` (a JSON
    list of lists of argument type names, which earlier candidates' workers reported through
    `launcher_signatures`) are built before any candidate is loaded (`_build_launchers`).

    In CPU mode TRITON_INTERPRET=1 is set before triton is imported. Returns JSON with the
    device actually used, its name, versions, how long the imports took, and `kinds`: for
    each registered kind, the inputs its generator made at the catalogue's tiny shape
    (name, shape, dtype) or the error it raised, for Rust to compare with the catalogue.
    """
    t0 = _now()
    import numpy
    import torch

    has_cuda = bool(torch.cuda.is_available())
    if device == "cuda" and not has_cuda:
        raise SetupError(
            "device `cuda` was requested but torch.cuda.is_available() is False "
            "(no GPU, or a CPU-only torch build); use --device cpu"
        )
    use_cuda = has_cuda and device != "cpu"
    if not use_cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language  # noqa: F401
    import triton.testing
    # torch.profiler (which every experiment uses) imports torch._dynamo on first use, and
    # that rebinds torch.manual_seed: done here, before Rust snapshots the namespaces
    import torch._dynamo  # noqa: F401

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import catalogue
    # the problems' half of the harness, imported before Rust snapshots the namespaces
    # (`guarded_namespaces`): a candidate that rebinds its timing or its input draw is caught
    import problems  # noqa: F401

    catalogue.load_catalogue(catalogue_json)
    for i, path in enumerate(json.loads(registry_modules_json)):
        # an extension's kinds (docs/kernels.md, "Adding a kind"); runs before any candidate
        spec = importlib.util.spec_from_file_location(f"autokernel_registry_{i}", path)
        if spec is None or spec.loader is None:
            raise SetupError(f"cannot load the registry module `{path}`")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    # The precision policy (see catalogue.py): no TF32 for reference or candidate.
    catalogue.apply_precision_policy()
    if not use_cuda:
        catalogue.patch_triton_interpreter()
    _install_launch_counter()
    _remove_profiler_switches(torch)
    if use_cuda:
        _build_launchers(json.loads(launchers_json))
    # the first CUDA work of a worker (its context, a kernel) waits while another measures
    with gpu_lease(use_cuda):
        _warm_triton(torch, triton, "cuda" if use_cuda else "cpu")
    if use_cuda:
        _record_launcher_signatures()

    _STATE["device"] = "cuda" if use_cuda else "cpu"
    _STATE["initialised"] = True
    _STATE["import_done"] = _now()
    _P.update(
        torch=torch,
        numpy=numpy,
        triton=triton,
        catalogue=catalogue,
        # a private, read-only copy: a candidate rebinding a registry entry changes nothing
        kinds=types.MappingProxyType(dict(catalogue.REGISTRY)),
        make_inputs=catalogue.make_inputs,
        reference=catalogue.reference,
        eager=catalogue.eager,
        tolerance_note=catalogue.tolerance_note,
        param_defaults=catalogue.param_defaults,
        signature=inspect.signature,
        Tensor=torch.Tensor,
        equal=torch.equal,
        clone=torch.Tensor.clone,
        copy_=torch.Tensor.copy_,
        empty=torch.empty,
        detach=torch.Tensor.detach,
        to=torch.Tensor.to,
        contiguous=torch.Tensor.contiguous,
        view=torch.Tensor.view,
        numpy_of=torch.Tensor.numpy,
        untyped_storage=torch.Tensor.untyped_storage,
        data_ptr=torch.Tensor.data_ptr,
        np_array=numpy.array,
        perf_counter=time.perf_counter,
        time_ns=time.time_ns,
        partial=functools.partial,
        synchronize=torch.cuda.synchronize if use_cuda else (lambda: None),
        cuda_synchronize=torch.cuda.synchronize,
        profile=torch.profiler.profile,
        ProfilerActivity=torch.profiler.ProfilerActivity,
        record_function=torch.profiler.record_function,
        float32=torch.float32,
    )
    with gpu_lease(use_cuda):
        kinds = _exercise_references(json.loads(catalogue_json))
    name = torch.cuda.get_device_name() if use_cuda else "cpu"
    return json.dumps(
        {
            "device": _STATE["device"],
            "device_name": name,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "import_s": _now() - t0,
            "kinds": kinds,
        }
    )


# Argument type names of the kernel signatures Triton built a launcher for in this process,
# in the order first built (`_record_launcher_signatures`).
_LAUNCHER_SIGNATURES = {}


def _record_launcher_signatures():
    """Records the signature (argument type names, in order) of every launcher Triton's
    NVIDIA driver generates in this process, for `launcher_signatures`. The launcher's C
    source is a function of those names alone (Triton 3.6's `make_launcher` reads neither
    the constants' values nor the kernel), so a later worker can build the same launcher
    from them. Installed after the worker's own launchers (`_build_launchers`,
    `_warm_triton`), so it reports what the candidate's kernels used (Triton regenerates a
    launcher's source on each kernel's first launch, a cached one included). Signatures with
    tensor descriptors (TMA) are not recorded. Without Triton's NVIDIA driver module
    (another backend, another Triton) nothing is recorded."""
    try:
        from triton.backends.nvidia import driver

        make = driver.make_launcher
    except (ImportError, AttributeError):
        return

    def recording(constants, signature, tensordesc_meta):
        src = make(constants, signature, tensordesc_meta)
        types = tuple(signature.values())
        if not tensordesc_meta and all(type(t) is str for t in types):
            # latest last: the parent keeps the most recent
            _LAUNCHER_SIGNATURES.pop(types, None)
            _LAUNCHER_SIGNATURES[types] = None
        return src

    driver.make_launcher = recording


def _build_launchers(signatures):
    """Builds Triton's launcher for each signature (a list of argument type names) into
    this worker's private cache, as Triton's `CudaLauncher` would on a kernel's first
    launch, so that a candidate whose kernels have one of these signatures finds it built.
    The names come from earlier workers through the parent, which keeps only well-formed
    ones (`worker/launchers.rs`); Triton generates the C source. Best effort: a signature
    Triton refuses only loses the head start."""
    if not signatures:
        return
    try:
        from triton.backends.nvidia import driver
        from triton.runtime.build import compile_module_from_src
    except ImportError:
        return

    t0, built = _now(), 0
    for types in signatures:
        try:
            src = driver.make_launcher({}, dict(enumerate(types)), None)
            compile_module_from_src(src=src, name="__triton_launcher", library_dirs=driver.library_dirs(),
                                    include_dirs=driver.include_dirs, libraries=driver.libraries)
            built += 1
        except Exception as e:  # noqa: BLE001 - a head start, not a requirement
            print(f"autokernel worker: no launcher built ahead for {types}: {type(e).__name__}: {e}",
                  file=sys.stderr)
    print(f"autokernel worker: {built} Triton launcher(s) built ahead in {_now() - t0:.2f} s",
          file=sys.stderr)


def launcher_signatures():
    """JSON: the signatures of the launchers Triton built in this process (lists of argument
    type names), for the parent to hand to the next workers (`init`'s `launchers_json`)."""
    return json.dumps([list(t) for t in _LAUNCHER_SIGNATURES])


def _warm_triton(torch, triton, device):
    """Compiles and launches a one-block copy kernel of the harness's own on `device`, before
    any candidate is loaded, and checks its output. Each candidate's worker has an empty
    private Triton cache, so on the GPU its first compile also builds Triton's C helpers
    with the host compiler (`cuda_utils`, a launcher) and sets up the compiler: done here,
    that happens while the worker waits as a spare instead of inside the first candidate's
    judged time (docs/benchmarks.md, "H200: where a fresh worker's time goes"). A Triton that
    cannot compile or run this is the installation's fault, never a candidate's: SetupError.
    On the CPU (Triton's interpreter) nothing is compiled; the check still runs."""
    tl = triton.language

    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    try:
        x = torch.arange(13, dtype=torch.float32, device=device)
        y = torch.zeros(16, dtype=torch.float32, device=device)
        _copy[(1,)](x, y, x.numel(), BLOCK=16)
        ok = bool(torch.equal(y[:13], x)) and not bool(y[13:].any())
    except Exception as e:  # noqa: BLE001 - reported: the worker refuses to start
        raise SetupError(f"Triton cannot compile and run a copy kernel on {device}: "
                         f"{type(e).__name__}: {e}") from e
    if not ok:
        raise SetupError(f"Triton's copy kernel gave wrong values on {device}: {y.tolist()}")


def _exercise_references(catalogue_spec):
    """Runs every registered kind's input generator, reference and eager op once at its
    catalogue tiny shape (a kind the catalogue lacks at a shape of the rank its generator
    is given), on the chosen device: whatever torch initialises lazily on first use (the
    CUDA context, cuBLAS, modules imported on demand) happens now, before Rust snapshots
    the namespaces it guards, and never looks like a candidate's doing. Returns, per kind,
    {inputs: [[name, shape, dtype]], error} for Rust to compare with the catalogue."""
    torch = _P["torch"]
    tiny = {k["name"]: k["tiny_shape"] for k in catalogue_spec["kinds"]}
    report = {}
    for kind in _P["kinds"]:
        entry = {"inputs": [], "error": None}
        report[kind] = entry
        if kind not in tiny:
            continue  # Rust names it: registered but not in the catalogue
        try:
            inputs = _make(kind, tiny[kind], torch.float32, 0, "normal")  # default params
            entry["inputs"] = [[k, [int(d) for d in v.shape], _dtype_name(v.dtype)] for k, v in inputs.items()]
            _reference(kind, {k: v.clone() for k, v in inputs.items()})
            _eager(kind, inputs)
        except Exception as e:  # noqa: BLE001 - reported: the worker refuses to start
            entry["error"] = f"{type(e).__name__}: {e}"
    _P["synchronize"]()
    return report


class InputsRefused(ValueError):
    """The kind's input generator refused the request (parameters that do not fit the
    shape, such as a K/V head count that does not divide the heads): the request's fault,
    never the candidate's (the Rust side answers it as an error, not a verdict)."""


def _make(kind, shape, dtype, seed, mode, layout="contiguous", params=None):
    """Fresh inputs of `kind` from the harness's own registry copy, for the parameters
    `params` (a dict; None: the kind's defaults). Raises InputsRefused for a ValueError of
    the generator."""
    try:
        return _P["make_inputs"](kind, list(shape), dtype, _STATE["device"], int(seed), mode, layout,
                                 registry=_P["kinds"], params=params)
    except ValueError as e:
        raise InputsRefused(str(e)) from e


def _reference(kind, inputs, params=None):
    return _P["reference"](kind, inputs, registry=_P["kinds"], params=params)


def _eager(kind, inputs, params=None):
    """The PyTorch a user would run without a custom kernel, in the inputs' dtype: what the
    speedup is measured against (the registry's `eager`, else the reference)."""
    return _P["eager"](kind, inputs, registry=_P["kinds"], params=params)


def _kernel_kwargs(candidate, kind, params):
    """The parameters to pass to the candidate's `kernel_fn` as keyword arguments: those its
    signature takes (all of them when it takes ``**kwargs``). A parameter it does not take
    is left out when its value is the kind's default (a kernel written before the kind had
    the parameter computes exactly that); at any other value the kernel cannot honour it,
    and CandidateError says which keyword to add."""
    if not params:
        return {}
    try:
        sig = _P["signature"](candidate.fn)
        takes = {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        takes_all = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    except (TypeError, ValueError):  # no signature to read: hand everything over
        takes, takes_all = set(), True
    defaults = _P["param_defaults"](kind)
    out = {}
    for name, value in params.items():
        if takes_all or name in takes:
            out[name] = value
        elif name not in defaults or value != defaults[name]:
            raise CandidateError(
                f"kernel_fn takes no `{name}` keyword, and this target needs {name}={value!r} "
                f"(the default is {defaults.get(name)!r}): add `{name}` to kernel_fn's parameters "
                f"and honour it (docs/kernels.md lists each kind's parameters)"
            )
    return out


def status():
    """JSON: pid and seconds since torch was imported (to show the worker is warm)."""
    return json.dumps(
        {
            "pid": os.getpid(),
            "imported_s_ago": _now() - _STATE.get("import_done", _now()),
            "device": _STATE["device"],
        }
    )


def guarded_names():
    """Names of the objects Rust re-checks by identity after each candidate: module
    attribute paths resolved from `sys.modules`. Kept here so the list lives next to the
    code that uses the objects."""
    names = [
        "torch.equal",
        "torch.Tensor.clone",
        "torch.Tensor.copy_",
        "torch.empty",
        "torch.Tensor.detach",
        "torch.Tensor.to",
        "torch.Tensor.contiguous",
        "torch.Tensor.view",
        "torch.Tensor.numpy",
        "torch.Tensor.untyped_storage",
        "torch.Tensor.data_ptr",
        "torch.Tensor",
        "torch.cuda.synchronize",
        "torch.cuda.Event",
        "torch.profiler.profile",
        "numpy.array",
        "time.perf_counter",
        "catalogue.make_inputs",
        "catalogue.reference",
        "catalogue.eager",
        "harness.run_case",
        "harness.timed_call",
        "harness.load",
        "harness._to_host",
        "harness._bits_equal",
    ]
    return json.dumps(names)


def guarded_tables():
    """The catalogue's data tables as one JSON text: every kind's catalogue entry, the input
    modes and layouts, the large-input scales. Rust takes it before any candidate and
    compares it after the load and every stage, and before it calls a refused input the
    request's fault: an edit in place (a kind's `dim_names` appended to) keeps every
    object's identity, which is all the namespace guards see."""
    import catalogue
    return json.dumps([{k: v for k, v in catalogue._SPECS.items()}, catalogue.MODES, catalogue.LAYOUTS,
                       [[str(k), v] for k, v in catalogue._LARGE.items()]], sort_keys=True, default=repr)


def guarded_namespaces():
    """Namespaces whose entries Rust snapshots before any candidate runs and re-checks by
    identity after the load and after every stage: the reference and the harness look
    their functions up in these at call time, so a candidate that rebinds one (say
    `torch.softmax = lambda x, dim: torch.zeros_like(x)`, which made the reference agree
    with an all-zeros kernel and poisoned the worker for the next one) is caught.

    JSON list of {name, scope}: `scope` "callables" checks the entries that are callables
    or classes (data such as `torch.cuda._initialized` legitimately changes), "all" every
    entry (our own modules and `_P`), "class" every entry and no new ones (a new
    `Tensor.__matmul__` would shadow the C implementation). Keys written `__x__` are kept in
    modules only where they are callables (`builtins.__import__`): data such as
    `__warningregistry__` changes when a warning fires. Every Python function kept is
    checked by its code object and defaults as well as by identity."""
    spaces = [
        ("torch", "callables"),
        ("torch.nn.functional", "callables"),
        ("torch.Tensor", "class"),
        ("torch._C", "callables"),
        ("torch._C._VariableFunctions", "callables"),
        ("torch._C._nn", "callables"),
        ("torch.linalg", "callables"),
        ("torch.special", "callables"),
        ("torch.fft", "callables"),
        ("torch.library", "callables"),
        ("torch.overrides", "callables"),
        ("numpy", "callables"),
        ("math", "callables"),
        ("builtins", "callables"),
        ("triton.testing", "callables"),
        # the op check reads the profiler's events; the launch counter and the autotuner's
        # profiler scope (`_install_launch_counter`)
        ("torch.profiler.profile", "class"),
        ("torch.profiler.profiler._KinetoProfile", "class"),
        ("torch.autograd.profiler.profile", "class"),
        ("triton.runtime.jit.JITFunction", "class"),
        ("triton.runtime.interpreter.InterpretedFunction", "class"),
        ("triton.runtime.autotuner.Autotuner", "class"),
        ("torch.cuda.Event", "class"),
        ("statistics", "callables"),
        # the harness's reports to Rust (ops, launches, timings) are written with json:
        # `json.dumps` with default arguments goes through the shared encoder instance
        ("json", "all"),
        ("json.encoder", "callables"),
        ("json.JSONEncoder", "class"),
        ("json.JSONDecoder", "class"),
        ("json._default_encoder", "class"),
        ("json._default_decoder", "class"),
        ("catalogue", "all"),
        ("problems", "all"),
        ("harness", "all"),
        # the op monitor: its methods, by value (instances have no dict of their own to
        # shadow them in)
        ("harness._TimedOps", "class"),
        ("harness._P", "all"),
    ]
    return json.dumps([{"name": n, "scope": sc} for n, sc in spaces])


# ---------------------------------------------------------------------------------------
# Launches of the candidate's own Triton kernels (issue 21, point 3)
# ---------------------------------------------------------------------------------------

# Launches per loaded candidate file: path -> count of launches of Triton kernels whose
# Python function was compiled from that file (a candidate is compiled under its own path).
_LAUNCHES = {}
# The counts themselves, one slot per loaded file (`_LAUNCHES` maps a path to its slot):
# Rust reads a slot by index (`launch_slot`), so reading a count runs no code of the
# candidate's (a dict lookup by path could, through a key of the same hash).
_LAUNCH_COUNTS = []
# The slot (in `_LAUNCH_COUNTS`) of the candidate file whose kernels' launches are counted
# but skipped, or None: a problem's candidate is run once so (`_without_own_kernels`) to see
# whether its kernels do any of the work.
_SKIP_LAUNCHES = [None]
# A profiler scope a candidate cannot name in advance: what runs under it is Triton's
# autotuner benchmarking configs (triton.testing.do_bench's torch.quantile among it), not
# the call's own work.
_AUTOTUNE_SCOPE = f"autokernel::autotune_{os.urandom(8).hex()}"
# How many times the autotuner's benchmarking opened that scope: a profile holding more of
# it than were opened had one forged by the candidate around its own work.
_AUTOTUNE_OPENED = [0]
# The profiler scope around each timed call of a candidate (`_TimedOps`): the aten ops
# under it are the call's, those outside it on the harness's thread the harness's own.
_CALL_SCOPE = f"autokernel::call_{os.urandom(8).hex()}"


def _install_launch_counter():
    """Wraps Triton's launch entry point (``JITFunction.run``, and ``InterpretedFunction.run``
    of the CPU interpreter; Gluon kernels and ``triton.autotune`` end in the former) to
    count, per loaded candidate file, the launches of the kernels defined in it; and the
    autotuner's benchmarking in `_AUTOTUNE_SCOPE`. Once per worker, before any candidate:
    the classes are then guarded (`guarded_namespaces`), so a candidate that unwraps them is
    TAMPER."""
    import torch
    import triton.runtime.jit as jit

    def wrap(cls):
        original = cls.run

        def run(self, *args, grid, warmup, **kwargs):
            if not warmup and _LAUNCHES:
                code = getattr(getattr(self, "fn", None), "__code__", None)
                path = getattr(code, "co_filename", None)
                slot = _LAUNCHES.get(path)
                if slot is not None:
                    _LAUNCH_COUNTS[slot] += 1
                    if _SKIP_LAUNCHES[0] == slot:
                        return None
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        cls.run = run

    wrap(jit.JITFunction)
    try:
        from triton.runtime.interpreter import InterpretedFunction
        wrap(InterpretedFunction)
    except ImportError:
        pass
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    bench = getattr(Autotuner, "_bench", None)
    if bench is None:
        return
    record_function = torch.profiler.record_function

    def _bench(self, *args, **kwargs):
        _AUTOTUNE_OPENED[0] += 1
        with record_function(_AUTOTUNE_SCOPE):
            return bench(self, *args, **kwargs)

    Autotuner._bench = _bench


# Switches of torch's profiler that hide a thread's ops from a session while it runs, which
# the harness never calls (torch's public `profile.toggle_collection_dynamic` does, and so
# raises in a candidate's worker): a candidate turned collection off around torch's
# softmax, turned it back on and passed the op check (docs/bench.md, "Threat model").
_PROFILER_SWITCHES = ("_toggle_collection_dynamic", "_enable_record_function")


def _refused_switch(*args, **kwargs):
    raise RuntimeError("autokernel: torch's profiler switches are not available to a kernel "
                       "(the judge's op check runs under the profiler)")


def _remove_profiler_switches(torch):
    """Replaces `_PROFILER_SWITCHES` in every module that holds them (found through the
    garbage collector's referrers) with `_refused_switch`, and keeps no reference to them:
    the functions are freed, so no candidate can find them again, by module or through the
    garbage collector. Once per worker, before any candidate."""
    import gc
    import torch._C._autograd as autograd
    for name in _PROFILER_SWITCHES:
        original = getattr(autograd, name, None)
        if original is None:
            continue
        for holder in gc.get_referrers(original):
            if isinstance(holder, dict):
                for key in [k for k, v in holder.items() if v is original]:
                    holder[key] = _refused_switch
        del original


def launches(path):
    """Launches counted so far of the Triton kernels defined in the candidate file `path`."""
    slot = _LAUNCHES.get(path)
    return 0 if slot is None else _LAUNCH_COUNTS[slot]


def launch_slot(path):
    """The index in `_LAUNCH_COUNTS` of the loaded candidate file `path`'s count."""
    return _LAUNCHES[path]


# ---------------------------------------------------------------------------------------
# Loading a candidate
# ---------------------------------------------------------------------------------------


class Candidate:
    """A loaded kernel.py: its module, kernel_fn, declared kind and the source's hash."""

    def __init__(self, module, fn, kind, sha256, path):
        self.module = module
        self.fn = fn
        self.kind = kind
        self.sha256 = sha256
        self.path = path


def _exec_file(path, result):
    """Compiles and executes the candidate file `path` under a fresh module name, filling
    `result` (a dict) with `sha256` (of the exact bytes compiled) and, on failure,
    `message`, `line`, `traceback` and `cuda_error`. Returns the module, or None."""
    with open(path, "rb") as f:
        source = f.read()
    result["sha256"] = hashlib.sha256(source).hexdigest()
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        result["message"] = f"{type(e).__name__}: {e.msg}"
        result["line"] = e.lineno
        return None
    name = f"autokernel_candidate_{os.getpid()}_{next(_STATE['counter'])}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        # exec the code compiled from the hashed bytes: what runs is what was hashed
        exec(code, module.__dict__)
    except BaseException as e:  # noqa: BLE001 - any failure of the candidate is a verdict
        sys.modules.pop(name, None)
        result["message"] = _exception_text(e)
        result["line"] = _candidate_line(e, path)
        result["traceback"] = _format_tb(e)
        result["cuda_error"] = _is_cuda_error(e)
        return None
    return module


def load(path):
    """Loads `path` under a fresh module name. Returns (json, Candidate | None).

    The JSON has `ok`, `sha256` (of the exact bytes compiled), `kind`, and on failure
    `message` and `line`.
    """
    result = {"ok": False, "sha256": None, "kind": None, "message": None, "line": None}
    module = _exec_file(path, result)
    if module is None:
        return json.dumps(result), None
    sha = result["sha256"]
    fn = module.__dict__.get("kernel_fn")
    kind = module.__dict__.get("KERNEL_KIND")
    if not callable(fn):
        result["message"] = "kernel.py defines no callable `kernel_fn`"
        return json.dumps(result), None
    if not isinstance(kind, str):
        result["message"] = "kernel.py defines no `KERNEL_KIND` string (e.g. KERNEL_KIND = \"softmax\")"
        return json.dumps(result), None
    result["ok"] = True
    result["kind"] = kind
    if path not in _LAUNCHES:
        _LAUNCHES[path] = len(_LAUNCH_COUNTS)
        _LAUNCH_COUNTS.append(0)
    return json.dumps(result), Candidate(module, fn, kind, sha, path)


def unload(candidate):
    """Drops the candidate's module from sys.modules (its name is never reused)."""
    if candidate is not None:
        sys.modules.pop(candidate.module.__name__, None)
    _STATE["last_outputs"] = []


def _candidate_line(exc, path):
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _format_tb(exc):
    try:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    except BaseException:  # noqa: BLE001 - a candidate's exception may refuse to be formatted
        return f"(the traceback could not be formatted)\n{_exception_text(exc)}"


def _type_name(obj):
    """`module.qualname` of obj's type, read past any metaclass (a candidate's class may
    raise on `__name__`); never raises."""
    cls = type(obj)
    try:
        module = type.__dict__["__module__"].__get__(cls)
        name = type.__dict__["__qualname__"].__get__(cls)
        return f"{module}.{name}"
    except BaseException:  # noqa: BLE001 - never let a name lookup become a harness error
        return "<a class whose name cannot be read>"


# The most characters of a candidate's exception message a verdict keeps.
_MESSAGE_CHARS = 2000


def _exception_text(exc):
    """`Type: message` of a candidate's exception, for a verdict. Never raises: an
    exception whose `__str__`, `__repr__` or class name raises is still described."""
    name = _type_name(exc).rsplit(".", 1)[-1]
    for show in (str, repr):
        try:
            text = show(exc)
            if type(text) is str:
                if len(text) > _MESSAGE_CHARS:
                    # a verdict's reason, not a dump: a reply line has a size limit
                    text = f"{text[:_MESSAGE_CHARS]}… ({len(text) - _MESSAGE_CHARS} more characters)"
                return f"{name}: {text}"
        except BaseException:  # noqa: BLE001 - try the next way of printing it
            pass
    return f"{name}: (its message could not be printed: __str__ and __repr__ raised)"


_CUDA_ERROR_MARKERS = (
    "CUDA error",
    "cudaError",
    "CUBLAS_STATUS",
    "CUDNN_STATUS",
    "illegal memory access",
    "device-side assert",
    "an illegal instruction",
    "misaligned address",
    "unspecified launch failure",
)


def _is_cuda_error(exc):
    text = _exception_text(exc)
    return any(m in text for m in _CUDA_ERROR_MARKERS)


# ---------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------


def _dtype(name):
    torch = _P["torch"]
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]


def _dtype_name(dt):
    return str(dt).replace("torch.", "")


def _to_host(t):
    """A float32 numpy copy of tensor `t` (never a view of its memory).

    On the GPU the cast to float32 runs there and the copy lands in page-locked host memory
    (a fresh tensor of torch's caching host allocator), the fast path of a device-to-host
    copy; the numpy array is then the only owner of that memory."""
    t = _P["detach"](t)
    if t.device.type == "cuda":
        t32 = _P["contiguous"](_P["to"](t, _P["float32"]))
        host = _P["empty"](tuple(t32.shape), dtype=_P["float32"], pin_memory=True)
        _P["copy_"](host, t32)
        return _P["numpy_of"](host)
    host = _P["contiguous"](_P["to"](_P["to"](t, "cpu"), _P["float32"]))
    return _P["np_array"](_P["numpy_of"](host), copy=True)


def _bits_equal(a, b):
    """Bitwise equality of two tensors of the same dtype (NaN payloads included)."""
    torch = _P["torch"]
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    if a.is_floating_point():
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a = _P["view"](_P["contiguous"](a), as_int)
        b = _P["view"](_P["contiguous"](b), as_int)
    return bool(_P["equal"](a, b))


def _storage_range(t):
    s = _P["untyped_storage"](t)
    start = s.data_ptr()
    return start, start + s.nbytes()


def _overlaps(a, b):
    (s0, e0), (s1, e1) = a, b
    return s0 < e1 and s1 < e0 and e0 > s0 and e1 > s1


class _TimedOps:
    """The op check of the correctness stages, over every timed call (issue 21, point 2):
    one profiler session (CPU activity only: no device-side tracing) spans a whole
    measurement, and each of the candidate's calls runs in `_CALL_SCOPE` (`call`). On the
    GPU the profiler's host time per op falls inside the slack before each timed call, so
    the events still time the device's work (docs/benchmarks.md). `ops()` gives (every
    aten op dispatched in the calls, nested ones included; the ops the calls dispatched
    themselves: not nested inside another aten op nor, unless forged, the autotuner's
    benchmarking) as sorted lists. Ops on another thread than the calls' count as the
    calls' own (a candidate's thread); the harness's own work between calls (flush,
    rotation) is outside the scope on the calls' thread, and not counted.

    Events are read from the profiler's raw results, not `profile.events()`: its tree of
    Python objects costs far more per event, and a measurement has thousands."""

    # no instance dict: a candidate cannot shadow `ops` on the monitor it finds in a frame
    # (the class itself is a guarded namespace)
    __slots__ = ("_prof", "_opened", "_entered_ns")

    def __init__(self):
        self._prof = _P["profile"](activities=[_P["ProfilerActivity"].CPU], record_shapes=False)
        self._opened = 0
        self._entered_ns = 0

    def __enter__(self):
        self._opened = _AUTOTUNE_OPENED[0]
        self._prof.__enter__()
        self._entered_ns = _P["time_ns"]()
        return self

    def __exit__(self, *exc):
        return self._prof.__exit__(*exc)

    @staticmethod
    def call(fn):
        with _P["record_function"](_CALL_SCOPE):
            return fn()

    def ops(self):
        """(every op, own ops, what a call did to the session or None): a session that began
        after `__enter__` was restarted inside a call, and the events before it are lost."""
        results = self._prof.profiler.kineto_results
        restarted = None
        if results.trace_start_ns() > self._entered_ns:
            restarted = "stopped the profiler's session and started another, losing the ops before"
        rows = sorted(((e.start_thread_id(), e.start_ns(), -(e.start_ns() + e.duration_ns()), e.name())
                       for e in results.events()))
        scope_threads = {r[0] for r in rows if r[3] == _CALL_SCOPE}
        forged = sum(1 for r in rows if r[3] == _AUTOTUNE_SCOPE) > _AUTOTUNE_OPENED[0] - self._opened
        every, own = set(), set()
        # per thread, the open events: (end, in a call, inside an aten op, in the autotuner)
        stack, thread = [], None
        for tid, start, neg_end, name in rows:
            end = -neg_end
            if tid != thread:
                stack, thread = [], tid
            while stack and stack[-1][0] <= start:
                stack.pop()
            call, in_aten, tuned = stack[-1][1:] if stack else (tid not in scope_threads, False, False)
            is_aten = name.startswith("aten::")
            if is_aten and call:
                every.add(name)
                if not in_aten and (forged or not tuned):
                    own.add(name)
            stack.append((end, call or name == _CALL_SCOPE, in_aten or is_aten, tuned or name == _AUTOTUNE_SCOPE))
        return sorted(every), sorted(own), restarted

    def leaves(self, ignored):
        """The aten ops of the calls that dispatched no other aten op outside `ignored` (a set
        of names: ops that only shape or allocate) below them: where a composite op such as
        `aten::conv2d` ends (`aten::mkldnn_convolution` on the CPU), which a candidate that
        calls a lower-level op of the same chain dispatches too. Sorted."""
        results = self._prof.profiler.kineto_results
        rows = sorted(((e.start_thread_id(), e.start_ns(), -(e.start_ns() + e.duration_ns()), e.name())
                       for e in results.events()))
        scope_threads = {r[0] for r in rows if r[3] == _CALL_SCOPE}
        # per thread, the open events: [end, in a call, name if an aten op, has an aten child]
        stack, thread, leaves = [], None, set()

        def close(entry):
            if entry[2] is not None and entry[1] and not entry[3]:
                leaves.add(entry[2])

        for tid, start, neg_end, name in rows:
            if tid != thread:
                for entry in stack:
                    close(entry)
                stack, thread = [], tid
            while stack and stack[-1][0] <= start:
                close(stack.pop())
            call = stack[-1][1] if stack else tid not in scope_threads
            is_aten = name.startswith("aten::")
            if is_aten and name not in ignored:
                for entry in reversed(stack):
                    if entry[2] is not None:
                        entry[3] = True
                        break
            stack.append([-neg_end, call or name == _CALL_SCOPE, name if is_aten and name not in ignored else None,
                          False])
        for entry in stack:
            close(entry)
        return sorted(leaves)


def _call(fn, inputs, kwargs, monitored):
    """Calls the candidate on `inputs` and the parameters `kwargs`; when `monitored`, under
    the op check (`_TimedOps`, as every timed call). Returns (output, ops, own ops, why the
    op check saw only part of the call or None): the aten ops the call dispatched, nested
    ones included, and those it dispatched itself, as sorted lists (empty when not
    monitored)."""
    if not monitored:
        out = fn(**inputs, **kwargs)
        _P["synchronize"]()
        return out, [], [], None
    with _TimedOps() as monitor:
        out = monitor.call(lambda: fn(**inputs, **kwargs))
        _P["synchronize"]()
    every, own, restarted = monitor.ops()
    return out, every, own, restarted


def run_case(candidate, kind, shape, dtype, seed, mode, repeats, layout="contiguous", params_json="{}"):
    """Runs one case: fresh inputs, then `repeats` calls of the candidate on a copy of them:
    the first under the op check (`_call`), the repeats not, so that a kernel honest only
    while it sees the profiler is caught by the launch count and the bitwise-identical
    outputs. No reference is computed here (issue 21, point 1): the trusted reference
    worker computes it from the same seed, and the parent compares.

    Returns (json, outputs): outputs is a list of float32 numpy copies (one per call that
    produced a checkable tensor). The JSON holds `out_shape`, `out_dtype` (Rust compares them
    with the catalogue), `problems` (list of {kind, message}: the candidate's conduct around
    a call), `error` (the candidate raised: message, traceback, cuda_error), `ops` and
    `own_ops` (the aten ops the call dispatched, nested ones included, and those it
    dispatched itself, in the first call) and `launchless_calls` (calls with a non-empty
    output that launched no Triton kernel defined in the candidate's file). Rust judges the
    ops and the launches (`execute::forbidden_in_calls`, `borrowed_in_calls`): the harness
    reports, it does not rule. `params_json` holds the kind's parameters (a JSON object,
    defaults filled by Rust), for the generator and `kernel_fn`'s keyword arguments
    (`_kernel_kwargs`).
    """
    device = _STATE["device"]
    dt = _dtype(dtype)
    params = json.loads(params_json)
    gen = _make(kind, shape, dt, seed, mode, layout, params)
    meta = {
        "out_shape": None,
        "out_dtype": None,
        "problems": [],
        "error": None,
        "ops": [],
        "own_ops": [],
        "launchless_calls": 0,
    }
    problems = meta["problems"]
    every_op, own_op = set(), set()
    cand_inputs = {k: _P["clone"](v) for k, v in gen.items()}
    ranges = {k: _storage_range(v) for k, v in cand_inputs.items()}
    ranges.update({f"{k} (generator copy)": _storage_range(v) for k, v in gen.items()})
    outputs = []
    kept = []  # this case's outputs, alive until it ends
    for r in range(int(repeats)):
        try:
            kwargs = _kernel_kwargs(candidate, kind, params)
            launched = launches(candidate.path)
            out, ops, own, restarted = _call(candidate.fn, cand_inputs, kwargs, r == 0)
            launched = launches(candidate.path) - launched
        except BaseException as e:  # noqa: BLE001 - SystemExit too: a verdict, not a worker exit
            meta["error"] = {
                "message": _exception_text(e),
                "line": _candidate_line(e, candidate.path),
                "traceback": _format_tb(e),
                "cuda_error": _is_cuda_error(e),
            }
            break
        every_op.update(ops)
        own_op.update(own)
        if restarted:
            problems.append({"kind": "profiler", "message": f"kernel_fn {restarted}"})
            break
        meta["ops"], meta["own_ops"] = sorted(every_op), sorted(own_op)
        # inputs bitwise unchanged
        for k, v in cand_inputs.items():
            if not _bits_equal(v, gen[k]):
                problems.append(
                    {"kind": "modified_input", "message": f"the candidate modified its input `{k}` in place"}
                )
        if type(out) is not _P["Tensor"]:
            problems.append(
                {
                    "kind": "not_tensor",
                    "message": f"kernel_fn returned {_type_name(out)}, not a plain torch.Tensor",
                }
            )
            break
        if out.device.type != device:
            problems.append(
                {"kind": "wrong_device", "message": f"output is on `{out.device}`, inputs were on `{device}`"}
            )
            # nothing to copy or compare (a meta tensor has no data)
            break
        orange = _storage_range(out)
        for k, rr in ranges.items():
            if _overlaps(orange, rr):
                problems.append(
                    {"kind": "alias", "message": f"the output shares memory with input `{k}`"}
                )
                break
        for prev in itertools.chain(kept, _STATE["last_outputs"]):
            if out is prev or _overlaps(orange, _storage_range(prev)):
                problems.append(
                    {
                        "kind": "replay",
                        "message": "the output is the tensor (or storage) returned by an earlier call",
                    }
                )
                break
        if launched == 0 and out.numel() > 0:
            meta["launchless_calls"] += 1
        meta["out_shape"] = [int(d) for d in out.shape]
        meta["out_dtype"] = _dtype_name(out.dtype)
        kept.append(out)
        outputs.append(_to_host(out))
        if problems:
            break
    # keep the last output alive into the next case, so a cached tensor is caught there too
    _STATE["last_outputs"] = kept[-1:]
    return json.dumps(meta), outputs


# ---------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------


# How long the GPU is kept busy before a measurement (seconds). Between measurements an
# experiment spends seconds on host work (inputs, copies, the Rust judge) and the GPU drops
# to its idle clock, where small kernels timed straight after the stages read several times
# slower, at random; do_bench's own warm-up (the kernel itself, mostly host-bound for small
# kernels) does not lift it (docs/benchmarks.md, "Timing that a busy host cannot fool").
_SPIN_UP_S = 0.15


def spin_up():
    """Keeps the GPU fully busy with dense matmuls for `_SPIN_UP_S` so that its clocks are
    at their working level when the timing starts. A no-op on the CPU."""
    if _STATE["device"] != "cuda":
        return
    torch = _P["torch"]
    a = torch.ones(2048, 2048, dtype=torch.float16, device="cuda")
    clock, sync = _P["perf_counter"], _P["cuda_synchronize"]
    t0 = clock()
    while clock() - t0 < _SPIN_UP_S:
        for _ in range(16):
            torch.mm(a, a)
        sync()


# The timed loop itself (flush, slack, events, which calls are checked, the inputs'
# offsets, the samples) is Rust's (`src/worker/timing.rs`), out of reach of Python in this
# process; these are the pieces of it that must be torch's.


def timing_inputs(kind, shape, dtype, seed, layout="contiguous", params_json="{}"):
    """The timing case's inputs, as `run_case` makes them (mode "normal"): a dict by name."""
    return _make(kind, shape, _dtype(dtype), seed, "normal", layout, json.loads(params_json))


def timing_pools(kind, shape, dtype, seed, layout, params_json, inputs):
    """Per input tensor of the timing case's `inputs`, its rotation pool (`_pools`): a dict
    by name."""
    return _pools(kind, shape, _dtype(dtype), seed, layout, json.loads(params_json), inputs)


def timed_call(candidate, kind, params_json="{}"):
    """(kernel_fn, the keyword arguments of the kind's parameters `params_json`): Rust calls
    kernel_fn with the inputs it holds and these, through a `functools.partial` made per
    call, so no frame of the harness is above the candidate and no dict the candidate can
    keep holds the inputs of a later call."""
    return candidate.fn, _kernel_kwargs(candidate, kind, json.loads(params_json))


def timed_ops():
    """A fresh op monitor (`_TimedOps`) for one measurement."""
    return _TimedOps()


def untimed_first_call(candidate, call):
    """The call before the timing: the CONFIG keys it reads (`_config_keys_read`) and its
    peak device memory in MB (null on the CPU), as JSON."""
    torch = _P["torch"]
    on_gpu = _STATE["device"] == "cuda"
    if on_gpu:
        _P["cuda_synchronize"]()
        torch.cuda.reset_peak_memory_stats()
    keys = _config_keys_read(candidate, call)
    peak = None
    if on_gpu:
        _P["cuda_synchronize"]()
        peak = torch.cuda.max_memory_allocated() / 1e6
    return json.dumps({"config_keys_read": keys, "peak_vram_mb": peak})


def _pools(kind, shape, dt, seed, layout, params, inputs):
    """Per input tensor of `inputs` (the case's, made at `seed`), its rotation pool: its own
    values, then those of the inputs made at `seed` + 1, flattened. Before each timed call
    Rust overwrites every input with a window of its pool at an offset it draws (issue 21,
    point 2): values change everywhere and almost never repeat."""
    torch = _P["torch"]
    other = _make(kind, shape, dt, int(seed) + 1, "normal", layout, params)
    return {k: torch.cat([_P["contiguous"](v).reshape(-1), _P["contiguous"](other[k]).reshape(-1)])
            for k, v in inputs.items() if isinstance(v, _P["Tensor"])}


class OffsetsRefused(ValueError):
    """Offsets of a timed call's inputs that the rotation cannot have drawn (another set of
    inputs, or a window past a pool's end): the Rust side makes this a failed check of the
    candidate, not an error of the request."""


def _inputs_at(inputs, pools, offsets):
    """`inputs` as the rotation set them at `offsets` (contiguous views of the pools; the
    values, not the layout, are what a reference depends on). Raises OffsetsRefused for
    offsets no rotation draws."""
    if not isinstance(offsets, dict) or set(offsets) != set(pools):
        raise OffsetsRefused(f"offsets for {sorted(offsets) if isinstance(offsets, dict) else offsets!r}, "
                             f"inputs {sorted(pools)}")
    for k, j in offsets.items():
        n = inputs[k].numel()
        if type(j) is not int or not 0 <= j <= n:
            raise OffsetsRefused(f"offset {j!r} of `{k}` is outside 0..={n}")
    return {k: pools[k][offsets[k]:offsets[k] + v.numel()].view(tuple(v.shape)) if k in pools else v
            for k, v in inputs.items()}


class _ReadRecorder(dict):
    """A kernel's CONFIG that records which keys are read (`read`), and `whole` when it is
    read as a whole (iterated, copied, unpacked): then every key may matter."""

    def __init__(self, config):
        super().__init__(config)
        self.read, self.whole = set(), False

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def _all(self, name, *args):
        self.whole = True
        return getattr(super(), name)(*args)

    def __iter__(self):
        return self._all("__iter__")

    def keys(self):
        return self._all("keys")

    def values(self):
        return self._all("values")

    def items(self):
        return self._all("items")

    def copy(self):
        return self._all("copy")


def _config_keys_read(candidate, call):
    """Runs `call` with the candidate's CONFIG dict recording its reads; returns the keys
    read, sorted, or None when there is no CONFIG dict, it was read as a whole (iterated,
    `{**CONFIG}`, `dict(CONFIG)`, `f(**CONFIG)`) or not at all. The tuner moves these keys
    first: a key the kernel does not read at this shape cannot change it. Reads that happen
    outside the call (at import, in a default argument, cached from an earlier call) and
    `pop`/`setdefault` (dict's own methods) are not seen; the tuner moves the other keys
    after these. The recording changes nothing the kernel sees but CONFIG's type: a call that
    raises under it runs again on the plain dict (and None is returned)."""
    module = candidate.module.__dict__
    config = module.get("CONFIG")
    if type(config) is not dict:
        call()
        return None
    recorder = _ReadRecorder(config)
    done = []

    def restore():
        # the plain dict back, unless the call replaced CONFIG (`global CONFIG`), with what
        # the call wrote into it (a cache, a counter); dict's own methods, which the
        # recorder does not count
        if done:
            return
        done.append(True)
        if module.get("CONFIG") is recorder:
            module["CONFIG"] = config
        written = {k: dict.__getitem__(recorder, k) for k in dict.keys(recorder)}
        config.clear()
        config.update(written)

    module["CONFIG"] = recorder
    try:
        call()
    except Exception:  # noqa: BLE001 - e.g. `type(CONFIG) is dict`; a real failure raises again
        restore()
        call()
        return None
    finally:
        restore()
    return None if recorder.whole or not recorder.read else sorted(map(str, recorder.read))


def reference_output(kind, shape, dtype, seed, mode, layout="contiguous", params_json="{}",
                     offsets_json="null"):
    """The trusted reference worker's side of a check (issue 21, point 1): the reference
    output of the case `run_case` makes from the same arguments, or, with `offsets_json`
    (a JSON object of offsets, as the timed loop drew them), of a timed call's inputs. Returns
    (note, output): the catalogue's likely cause of a mismatch (or None) and the output as
    a contiguous float32 numpy copy."""
    dt = _dtype(dtype)
    params = json.loads(params_json)
    offsets = json.loads(offsets_json)
    if offsets is None:
        inputs = _make(kind, shape, dt, seed, mode, layout, params)
    else:
        # a measurement's timed outputs come one after another: its pools are made once
        key = (kind, tuple(shape), dtype, int(seed), mode, layout, params_json)
        if _STATE.get("pools_key") != key:
            _STATE["pools"] = None  # freed before the next are made
            made = _make(kind, shape, dt, seed, mode, layout, params)
            _STATE["pools"] = (made, _pools(kind, shape, dt, seed, layout, params, made))
            _STATE["pools_key"] = key
        made, pools = _STATE["pools"]
        inputs = _inputs_at(made, pools, offsets)
    out = _to_host(_reference(kind, inputs, params))
    try:
        note = _P["tolerance_note"](kind, dt)
    except Exception:  # noqa: BLE001 - an optional hint
        note = None
    return note, out


def reference_eager(kind, shape, dtype, seed, layout="contiguous", params_json="{}"):
    """The trusted reference worker's eager PyTorch (`_eager`) at the timing case
    (`timing_inputs`'s arguments), as a call taking no arguments."""
    params = json.loads(params_json)
    inputs = _make(kind, shape, _dtype(dtype), seed, "normal", layout, params)
    return _P["partial"](_eager, kind, inputs, params)


def reference_compiled(kind, shape, dtype, seed, layout="contiguous", params_json="{}"):
    """torch.compile of `reference_eager`'s call, compiled by one run: (call, None), or
    (None, the error that stopped it)."""
    torch = _P["torch"]
    params = json.loads(params_json)
    inputs = _make(kind, shape, _dtype(dtype), seed, "normal", layout, params)
    try:
        # this worker lives on: without a reset, Dynamo would count every earlier target's
        # graph against its recompile limit, and fall back to eager
        torch._dynamo.reset()
        cfn = torch.compile(lambda **kw: _eager(kind, kw, params))
        cfn(**inputs)
        return _P["partial"](cfn, **inputs), None
    except Exception as e:  # noqa: BLE001 - torch.compile is optional (no compiler on CPU)
        return None, f"{type(e).__name__}: {e}"[:500]

# ---------------------------------------------------------------------------------------
# Generic scripts (the profiler runs models through this)
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# A problem in KernelBench's format (problems.py; docs/problems.md)
# ---------------------------------------------------------------------------------------


# The OS's randomness as the harness found it, before any candidate ran (the harness's
# names are guarded): where a case's input seed comes from.
_URANDOM = os.urandom


def _fresh_seed():
    """A seed drawn from the OS (31 bits, as torch.manual_seed takes any): a candidate cannot
    know it before it is drawn."""
    return int.from_bytes(_URANDOM(4), "little") & 0x7FFFFFFF


class _HostReads:
    """Counts, while active, the calls of ``Tensor.numpy`` and ``Tensor.tolist`` (``numpy.asarray``
    of a tensor goes through the former): a problem's forward that reads its tensors into
    NumPy or Python computes outside any kernel. The methods are put back on exit, before
    the guards are re-checked."""

    _NAMES = ("numpy", "tolist")

    def __enter__(self):
        tensor = _P["torch"].Tensor
        self.count = 0
        # numpy is TensorBase's (C), tolist too: the counting methods shadow them on Tensor
        self._saved = {name: tensor.__dict__.get(name) for name in self._NAMES}
        for name in self._NAMES:
            setattr(tensor, name, self._counting(getattr(tensor, name)))
        return self

    def _counting(self, original):
        def method(t, *args, **kwargs):
            self.count += 1
            return original(t, *args, **kwargs)
        return method

    def __exit__(self, *exc):
        tensor = _P["torch"].Tensor
        for name, original in self._saved.items():
            if original is None:
                delattr(tensor, name)
            else:
                setattr(tensor, name, original)
        return False


def _without_own_kernels(model, inputs, slot):
    """The outputs of `model(*inputs)` with the launches of the candidate's own kernels (its
    `_LAUNCH_COUNTS` slot) skipped and every fresh tensor of torch.empty & co. filled with
    NaN (torch's deterministic mode, warnings only, for this one call): outputs that are
    still the reference's were made without the kernels. Raises what the forward raises."""
    import warnings

    import problems

    torch = _P["torch"]
    deterministic = torch.utils.deterministic
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    _SKIP_LAUNCHES[0] = slot
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = problems.outputs_of(model(*inputs))
            _P["synchronize"]()
            return outs
    finally:
        _SKIP_LAUNCHES[0] = None
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        deterministic.fill_uninitialized_memory = saved[2]


def _same_slot(a, b):
    """Whether two draws of one input can share its tensor: both tensors of one shape and
    dtype, or equal non-tensors (a size)."""
    tensor = _P["Tensor"]
    if isinstance(a, tensor) and isinstance(b, tensor):
        return a.shape == b.shape and a.dtype == b.dtype
    return not isinstance(a, tensor) and not isinstance(b, tensor) and a == b


def _write_outputs(outs, device, out_dir, prefix):
    """Writes each of a forward's outputs to `out_dir` as `<prefix><j>.f32` (raw float32) and
    returns their ``{shape, dtype, file}``. Raises ValueError for an output that is not a
    plain tensor on `device` (a subclass could compute when it is read, not when timed; a
    meta tensor has no values), and what reading a candidate's tensor raises."""
    torch = _P["torch"]
    written = []
    for j, t in enumerate(outs):
        # the type first, read without touching the object: a subclass runs code on any access
        if type(t) is not torch.Tensor:
            raise ValueError(f"output {j} is a {_type_name(t)}, not a torch.Tensor: a problem's forward "
                             "returns plain torch.Tensors")
        if t.device.type != device or t.layout != torch.strided:
            raise ValueError(f"output {j} is on {t.device} ({t.layout}): a problem's forward returns dense "
                             f"tensors on the inputs' device ({device})")
        name = f"{prefix}{j}.f32"
        _to_host(t).tofile(os.path.join(out_dir, name))
        written.append({"shape": list(t.shape), "dtype": _dtype_name(t.dtype), "file": name})
    return written


def run_problem(problem_path, kernel_path, cases_json, out_dir, trials):
    """Runs the candidate `kernel_path`'s ``ModelNew`` on each case of `cases_json` (a JSON
    list of ``{"seed", "sizes"}``: the weights' seed and the size constants set, {} at the
    problem's own) of the problem `problem_path`, in float32, and writes each output as raw
    float32 (native byte order, row-major) to `out_dir` (made here). Each case's inputs
    come from a seed drawn after ``ModelNew`` is built (``input_seed``). `trials` > 0: also
    times it at the first case (``problems.time_call``) and writes the output of one trial
    picked at random (``timed``) for the trusted side to check.

    Returns JSON: ``ok``, ``sha256``, ``message``/``line`` when the file does not load,
    ``cases`` (per case: ``seed``, ``input_seed``, ``shrunk``, ``sizes`` changed,
    ``outputs`` as ``{shape, dtype, file}``, ``launches`` of the file's own Triton kernels,
    ``ops`` (the aten ops the forward dispatched, nested ones included), ``ops_lost`` (why
    the op check saw only part of the call, or None), ``inputs_changed`` (names of inputs
    it changed), ``reference_calls`` (forwards of the problem's classes while the case was
    built and run), ``problem_changed`` (names of the problem module it rebound),
    ``host_reads`` (``Tensor.numpy``/``tolist`` calls in its forward), ``hooks_removed``,
    ``error``), ``timed`` (``trial``, ``input_seed``, ``outputs``), ``without_kernels``
    (``input_seed``, ``outputs``: the first case's model on a fresh draw with its kernels
    skipped, or None where that raised),
    ``latency_us`` and ``cuda_error``. The
    trusted process compares the outputs (``problems.check``); nothing here judges them.
    """
    import problems

    torch = _P["torch"]
    device = _STATE["device"]
    result = {"ok": False, "sha256": None, "message": None, "line": None, "cases": [], "timed": None,
              "without_kernels": None, "latency_us": None, "cuda_error": False}
    module = _exec_file(kernel_path, result)
    if module is None:
        return json.dumps(result)
    cls = module.__dict__.get("ModelNew")
    if not isinstance(cls, type):
        result["message"] = ("kernel.py defines no `class ModelNew`: a problem's candidate is a class "
                             "`ModelNew(nn.Module)` with the constructor of the problem's `Model` (docs/problems.md)")
        return json.dumps(result)
    result["ok"] = True
    if kernel_path not in _LAUNCHES:
        _LAUNCHES[kernel_path] = len(_LAUNCH_COUNTS)
        _LAUNCH_COUNTS.append(0)
    os.makedirs(out_dir, exist_ok=True)
    problem_file = os.path.realpath(problem_path)
    reference_calls = [0]
    classes = {}

    def is_reference(cls_):
        if cls_ not in classes:
            try:
                classes[cls_] = os.path.realpath(inspect.getsourcefile(cls_) or "") == problem_file
            except TypeError:  # a built-in class
                classes[cls_] = False
        return classes[cls_]

    def hook(mod, args):
        if is_reference(type(mod)):
            reference_calls[0] += 1

    hooks = torch.nn.modules.module._global_forward_pre_hooks
    loaded = {}
    first = None
    # the hook watches the constructor and the input draw too: a ModelNew that runs the
    # reference while it is built is as much TAMPER as one that runs it in forward
    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        for i, case in enumerate(json.loads(cases_json)):
            sizes = case.get("sizes") or {}
            row = {"seed": case["seed"], "input_seed": None, "shrunk": bool(sizes), "sizes": {}, "outputs": [],
                   "launches": 0, "ops": [], "ops_lost": None, "inputs_changed": [], "reference_calls": 0,
                   "problem_changed": [], "host_reads": 0, "hooks_removed": False, "error": None}
            result["cases"].append(row)
            reference_calls[0] = 0
            key = tuple(sorted(sizes.items()))
            try:
                if key not in loaded:
                    problem, changed = problems.load(problem_path, sizes)
                    # the problem's own names, to see that the candidate rebinds none
                    # (get_inputs, or the `torch` its functions look up)
                    loaded[key] = (problem, changed, dict(vars(problem)))
                problem, changed, names = loaded[key]
                row["sizes"] = {k: v[1] for k, v in changed.items()}
                model = problems.build_model(problem, cls, case["seed"], device, "float32")
                row["input_seed"] = _fresh_seed()
                inputs = problems.make_inputs(problem, row["input_seed"], device, "float32")
            except problems.ProblemError as e:
                row["error"] = str(e)
                continue
            except BaseException as e:  # noqa: BLE001 - ModelNew's constructor is the candidate's
                row["error"] = f"ModelNew(*get_init_inputs()) raised {_exception_text(e)}"
                result["cuda_error"] |= _is_cuda_error(e)
                continue
            before = [_P["clone"](x) if isinstance(x, _P["Tensor"]) else None for x in inputs]
            counted = launches(kernel_path)
            try:
                # under the op check, as the kinds' calls: which aten ops the forward dispatched
                with torch.no_grad(), _TimedOps() as monitor, _HostReads() as reads:
                    outs = problems.outputs_of(monitor.call(lambda: model(*inputs)))
                    _P["synchronize"]()
                row["ops"], _, row["ops_lost"] = monitor.ops()
                row["host_reads"] = reads.count
            except BaseException as e:  # noqa: BLE001 - any failure of the candidate is a verdict
                row["error"] = f"ModelNew.forward raised {_exception_text(e)}"
                result["cuda_error"] |= _is_cuda_error(e)
                outs = None
            row["launches"] = launches(kernel_path) - counted
            row["reference_calls"] = reference_calls[0]
            row["inputs_changed"] = [f"input {j}" for j, (x, b) in enumerate(zip(inputs, before))
                                     if b is not None and not _bits_equal(x, b)]
            now = vars(problem)
            # dunder names left out: a warning raised in the problem's code adds
            # `__warningregistry__`
            row["problem_changed"] = sorted(k for k in set(names) | set(now) if not k.startswith("__") and (
                k not in now or k not in names or now[k] is not names[k]))
            if handle.id not in hooks:
                row["hooks_removed"] = True
                handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
            if outs is None:
                continue
            try:
                row["outputs"] = _write_outputs(outs, device, out_dir, f"case{i}_out")
            except BaseException as e:  # noqa: BLE001 - the candidate's outputs are its own
                row["error"] = f"ModelNew.forward's outputs could not be read: {_exception_text(e)}"
                result["cuda_error"] |= _is_cuda_error(e)
                continue
            if first is None and not sizes:
                first = (row, model, inputs, before)
                problem_of_first = problem
        if trials > 0 and first is not None:
            row, model, inputs, before = first
            # the timed trials alternate two input draws, copied into the same tensors
            # before each trial (outside the timing): even trials the second draw, odd ones
            # the first case's. The trial kept and checked is an even one, so an answer kept
            # from the first call (by the tensors' address) is wrong there.
            draws = [before]
            second_seed = _fresh_seed()
            try:
                second = problems.make_inputs(problem_of_first, second_seed, device, "float32")
                if len(second) == len(inputs) and all(_same_slot(a, b) for a, b in zip(inputs, second)):
                    draws.append([_P["clone"](x) if isinstance(x, _P["Tensor"]) else None for x in second])
            except Exception:  # noqa: BLE001 - the problem's own draw: time on the first case's alone
                pass
            seeds = [row["input_seed"], second_seed]
            pick = 2 * (_fresh_seed() % ((trials + 1) // 2)) if len(draws) == 2 else _fresh_seed() % trials
            kept = []

            def refill(trial):
                source = draws[(trial + 1) % len(draws)]
                with torch.no_grad():
                    for x, src in zip(inputs, source):
                        if src is not None:
                            x.copy_(src)

            def keep(trial, out):
                # written at once: a forward may hand back the same tensor every call
                if trial == pick:
                    kept.append(_write_outputs(problems.outputs_of(out), device, out_dir, "timed_out"))

            calls = reference_calls[0]
            try:
                result["latency_us"] = problems.time_call(model, inputs, device, trials, gpu_lease(device == "cuda"),
                                                          keep, refill)
                result["timed"] = {"trial": pick, "input_seed": seeds[(pick + 1) % len(draws)], "outputs": kept[0]}
            except BaseException as e:  # noqa: BLE001 - failing only when timed is still the candidate's
                row["error"] = f"ModelNew.forward raised while timed: {_exception_text(e)}"
                result["cuda_error"] |= _is_cuda_error(e)
            row["reference_calls"] += reference_calls[0] - calls
            last = draws[trials % len(draws)]  # what the last trial was given: (trials - 1 + 1) % len
            row["inputs_changed"] += [f"input {j} (while timed)" for j, (x, b) in enumerate(zip(inputs, last))
                                      if b is not None and not _bits_equal(x, b)]
            if handle.id not in hooks:
                row["hooks_removed"] = True
            with torch.no_grad():
                for x, src in zip(inputs, before):
                    if src is not None:
                        x.copy_(src)
        if first is not None:
            # last, the first case's model once more with its kernels skipped, on a fresh
            # draw (an output buffer it reuses holds another draw's answer): are they needed
            # at all? Where that fails (even with a CUDA error: its kernels' outputs were
            # left unwritten) it says nothing against the candidate
            row, model, inputs, before = first
            bare_seed = _fresh_seed()
            try:
                bare = problems.make_inputs(problem_of_first, bare_seed, device, "float32")
                outs = _without_own_kernels(model, bare, _LAUNCHES[kernel_path])
                result["without_kernels"] = {"input_seed": bare_seed,
                                             "outputs": _write_outputs(outs, device, out_dir, "without_kernels_out")}
            except BaseException:  # noqa: BLE001 - failing without its kernels is fair
                pass
    finally:
        handle.remove()
    return json.dumps(result)


def call_script(path, function, kwargs_json):
    """Loads `path` under a fresh module name and returns json.dumps(function(**kwargs))."""
    name = f"autokernel_script_{os.getpid()}_{next(_STATE['counter'])}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load `{path}` as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        fn = getattr(module, function)
        result = fn(**json.loads(kwargs_json))
        return json.dumps(result)
    finally:
        sys.modules.pop(name, None)


def describe_exception(exc):
    """(message, traceback, cuda_error) of an exception, for Rust."""
    return _exception_text(exc), _format_tb(exc), _is_cuda_error(exc)


__all__ = [
    "init", "status", "load", "unload", "run_case", "call_script", "run_problem", "reference_output",
    "timing_inputs", "timing_pools", "timed_call", "untimed_first_call", "timed_ops", "spin_up",
    "reference_eager", "reference_compiled", "launch_slot",
    "guarded_names", "guarded_namespaces", "guarded_tables", "describe_exception",
]
