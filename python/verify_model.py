"""End-to-end verification of a workspace: the model with the kept kernels plugged in,
compared with the unmodified model, and both timed.

Run inside the bench worker (``Worker::call_script(.., "verify", kwargs)``), which has already
chosen the device (and set ``TRITON_INTERPRET=1`` on the CPU). The model is loaded by the
profiler's loader (``profile_model.py``, written beside this file), so a model that profiles
also verifies.

The kernels are plugged in by ``plugs.py`` (how each kind is, and which calls a plug
takes), for the duration of the check only.

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
import json
import os
import statistics
import sys
import time

import torch

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


# Rounds of the interleaved model timing. A host shared with other work (another run, a
# compile) drifts over seconds; timing every variant of the model once per round and taking
# each one's median over the rounds puts that drift on all of them alike, as the keep rule
# does for kernels. Measured on the H200 (docs/benchmarks.md, 2026-11-30): timed one after
# the other while a second GPU of the host ran torch.compile, a LLaMA example with one
# kernel plugged in that had made it faster alone read 0.70x of eager. On the CPU timings are
# not representative, so one round.
TIMING_ROUNDS = 5
# Least gain (a share of eager's time) a kernel alone must bring to the model to be plugged
# in, as the keep rule asks 1% of a kernel. Below it the medians of a host-paced model's
# forward swap places from run to run: on the H200 (2026-11-30) the LLaMA example's rmsnorm
# read 5% faster in one verification and 1% slower in the next.
MODEL_GAIN_MIN = 0.01
# The ratios of a variant's time to the baseline's that a decision reads: a kernel alone
# must bring the model below 1 - MODEL_GAIN_MIN (`_gainers`); the modes table's speedups
# are read against 1 (`_slower_together`, `deploy._contexts`).
DECISION_RATIOS = (1.0 - MODEL_GAIN_MIN, 1.0)

# The modes a verification times by default besides the one deployed: eager, whose row
# gives verify.json its `eager_ms` and `speedup`. The others (`--all-modes`) cost the most:
# torch.compile compiles every variant of the model anew (minutes for a large model), and a
# verification of all four modes ran past 8 minutes after a 50 s budget on an H100 (#36).
DEFAULT_EXTRA_MODES = ("eager",)


def _decided(times, rounds):
    """Whether the rounds timed so far decide every variant against the baseline, so that
    the rest of the `rounds` need not be timed. `times`: per variant, the times of the
    rounds taken (ms), ``times[0]`` the baseline's.

    The rule: each variant's time is the median of its rounds, and once more than half of
    them are in (3 of 5), the median of all of them lies between the least and the greatest
    of those taken, whatever the others measure (of n values with k > n/2 known, the middle
    one is at least the least known and at most the greatest). So where, for every variant
    and every ratio r a decision reads (``DECISION_RATIOS``), the variant's greatest time is
    below r times the baseline's least, or its least at or above r times the baseline's
    greatest, no later round can turn a decision: the ordering is decided beyond the
    spread. On a quiet GPU a forward's spread over rounds is far below the 1% of the
    decision (docs/benchmarks.md), so a mode usually stops after 3 of 5 rounds; a noisy
    host, or a variant within 1% of the baseline, still gets all 5."""
    if not times or any(2 * len(t) <= rounds for t in times):
        return False
    lo0, hi0 = min(times[0]), max(times[0])
    for t in times[1:]:
        lo, hi = min(t), max(t)
        for r in DECISION_RATIOS:
            if not (hi < r * lo0 or lo >= r * hi0):
                return False
    return True


class _DeadlineReached(Exception):
    """The verification's deadline passed: the message says what was running."""


class Budget:
    """The verification's deadline, its progress lines and its partial result.

    `seconds`: how long the verification may still take (None: no deadline); the deadline is
    taken on this process's monotonic clock when the call starts, so no clock is shared with
    the parent. Every stage checks it between rounds, variants and modes, and stops cleanly
    (:class:`_DeadlineReached`) when it has passed.

    `progress_path`: a file that gets one JSON object per line as the verification moves on
    (``{"stage", "mode", "variant", "round", "rounds", "left_s"}``), which `autokernel` tails
    and shows. A file, not the worker's stderr: the worker's stderr is its log (Python's
    warnings, Triton's and torch's own lines, kept for a crash's reason), read by the bench
    worker's client, which has no channel for a script's progress; a file in the workspace
    needs no protocol, survives a worker that is killed or restarted (the culprit search
    starts fresh ones), and a line appended and flushed whole is read whole.

    `partial_path`: where the result so far is written (a temporary file renamed over it, so
    that a reader sees the last whole one) each time a decision is reached: a verification
    killed at its hard limit or interrupted still leaves what it measured."""

    def __init__(self, seconds=None, progress_path=None, partial_path=None):
        self.deadline = None if seconds is None else time.monotonic() + max(0.0, float(seconds))
        self.progress_path = progress_path
        self.partial_path = partial_path
        self.stage = "loading the model"

    def left_s(self):
        """Seconds to the deadline (never negative), or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def expired(self):
        return self.deadline is not None and time.monotonic() >= self.deadline

    def check(self):
        """Raises :class:`_DeadlineReached` once the deadline has passed."""
        if self.expired():
            raise _DeadlineReached(self.stage)

    def progress(self, stage, text, mode=None, variant=None, round=None, rounds=None):
        """One progress line: `stage` (``load``, ``alone``, ``deploy``, ``together``,
        ``modes``, ``done``), `text` what runs (also the partial result's word on where it
        stopped), and where a timing is: its mode, its variant (``without kernels``, or the
        target ids with ``+``), its round of `rounds`."""
        self.stage = text
        if not self.progress_path:
            return
        line = {"stage": stage, "text": text, "mode": mode, "variant": variant, "round": round,
                "rounds": rounds, "left_s": self.left_s()}
        with open(self.progress_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()

    def save(self, result):
        """Writes `result` to the partial file, atomically (a temporary file, then a rename)."""
        if not self.partial_path:
            return
        tmp = f"{self.partial_path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.partial_path)


def _variant_name(selected):
    """A variant (a list of plugs) as progress lines name it: its target ids joined by
    ``+``, or ``without kernels`` (a plug without a target id, as tests pass, by its str)."""
    return "+".join(getattr(p, "target_id", str(p)) for p in selected) if selected else "without kernels"


def _variant_text(selected):
    return f"with {_variant_name(selected)}" if selected else "without kernels"


def _time_variants_ms(variants, mode, net, call, installing, on_gpu, ref=None, dtype=None, budget=None,
                      stage="modes", cache=None, launches=None):
    """Median time per forward (ms) of each variant (a list of plugs; [] is the model as it
    is) in `mode`, in the order of ``variants``.

    Eager and CUDA-graph variants are timed in turns, round after round, so that a drifting
    host weighs on all alike; compiled variants one after the other (each holds its plugs
    for its life; each is compiled once, its rounds all run on that one compilation). With
    `ref`, a variant whose first output differs from it beyond the model tolerance of
    `dtype` raises :class:`_VariantError`, as does one that cannot be prepared.

    The rounds stop early once they decide every variant against the first (:func:`_decided`);
    `budget` (:class:`Budget`) gets a progress line per variant and round, and its deadline
    is checked before each: past it, the rounds taken stand if they decide, else
    :class:`_DeadlineReached`. `cache` (a dict): a compiled variant's rounds, by mode and
    target ids, reused by a later call instead of compiling the same variant again.
    `launches` (a list as long as `variants`), on a GPU: each variant's kernel launches per
    forward (:func:`model_modes.kernel_launches`, after its rounds), None where unknown."""
    import model_modes

    budget = budget or Budget()
    rounds = TIMING_ROUNDS if on_gpu else 1
    times = [[] for _ in variants]

    def prepared(i, selected):
        what = "with " + "+".join(p.target_id for p in selected) if selected else "without kernels"
        budget.check()
        budget.progress(stage, f"preparing {mode} {what}", mode=mode, variant=_variant_name(selected))
        try:
            v = model_modes.prepare(mode, net, call, installing(selected), on_gpu)
        except Exception as e:  # noqa: BLE001 - the mode's own error names the cause
            raise _VariantError(f"{mode} {what}: {type(e).__name__}: {e}") from e
        why = _compare(v.out, ref, dtype) if ref is not None else None
        if why:
            v.close()
            raise _VariantError(f"{mode} {what}: output differs from the eager model's: {why}")
        return v

    def line(selected, r):
        budget.progress(stage, f"timing {mode} {_variant_text(selected)}, round {r + 1} of {rounds}", mode=mode,
                        variant=_variant_name(selected), round=r + 1, rounds=rounds)

    def go_on(taken, r):
        """Before round `r` (from 0) over the variants whose rounds are `taken`: False when
        the rounds taken decide them (:func:`_decided`: the rest would change nothing);
        past the deadline, False if they decide, else :class:`_DeadlineReached`."""
        if r > 0 and _decided(taken, rounds):
            return False
        budget.check()
        return True

    def medians():
        return [statistics.median(t) for t in times]

    def count_launches(i, run):
        if launches is not None and on_gpu:
            launches[i] = model_modes.kernel_launches(run)

    if mode in ("compile", "reduce-overhead"):
        for i, selected in enumerate(variants):
            key = (mode, tuple(p.target_id for p in selected))
            if cache is not None and key in cache:
                times[i] = list(cache[key])
                if launches is not None:
                    launches[i] = cache.get(("launches", *key))
                continue
            v = prepared(i, selected)
            try:
                count = model_modes.loop_count(v.run, on_gpu)
                for r in range(rounds):
                    # the baseline (first) gets every round: the others are decided against it
                    if i == 0:
                        budget.check()
                    elif not go_on([times[0], times[i]], r):
                        break
                    line(selected, r)
                    times[i].append(model_modes.loop_ms(v.run, on_gpu, count))
                count_launches(i, v.run)
            finally:
                v.close()
            if cache is not None:
                cache[key] = list(times[i])
                if launches is not None:
                    cache[("launches", *key)] = launches[i]
        return medians()
    if mode == "eager":
        # plugs installed for each timing only: the variants share one model
        def timing(selected, count):
            with installing(selected)():
                return model_modes.loop_ms(lambda: call(net), on_gpu, count)

        for i, selected in enumerate(variants):
            if ref is not None:
                prepared(i, selected).close()
        with installing(variants[-1])():
            # on the CPU three forwards, as a median of three calls used to be
            count = model_modes.loop_count(lambda: call(net), on_gpu) if on_gpu else 3
        run = [lambda selected=selected: timing(selected, count) for selected in variants]
        out = _interleaved(variants, run, rounds, times, go_on, line, budget)
        for i, selected in enumerate(variants):
            with installing(selected)():
                count_launches(i, lambda: call(net))
        return out
    graphs = []
    try:
        for i, selected in enumerate(variants):
            graphs.append(prepared(i, selected))
        count = model_modes.loop_count(graphs[-1].run, on_gpu)
        run = [lambda g=g: model_modes.loop_ms(g.run, on_gpu, count) for g in graphs]
        out = _interleaved(variants, run, rounds, times, go_on, line, budget)
        for i, g in enumerate(graphs):
            count_launches(i, g.run)
        return out
    finally:
        for g in graphs:
            g.close()


def _interleaved(variants, run, rounds, times, go_on, line, budget):
    """Times ``run[i]()`` (ms) for each variant in turn, round after round, into `times`,
    stopping early where `go_on` says; a deadline that passes within a round drops that
    round (the rounds must stay whole to weigh drift alike) and stands on those before it
    if they decide. Returns each variant's median."""
    for r in range(rounds):
        if not go_on(times, r):
            break
        taken = [len(t) for t in times]
        try:
            for i, selected in enumerate(variants):
                if i > 0:
                    budget.check()
                line(selected, r)
                times[i].append(run[i]())
        except _DeadlineReached:
            for t, n in zip(times, taken):
                del t[n:]
            if r > 0 and _decided(times, rounds):
                break
            raise
    return [statistics.median(t) for t in times]


def _gainers(plugs, alone_ms, base_ms, mode="eager"):
    """Splits plugs by the model time with each alone (ms, same order) against the model's
    own in the same `mode`.

    Returns (plugs that make the model at least MODEL_GAIN_MIN faster, exclusion entries
    ``{"target", "reason"}`` for the others).
    """
    kept, excluded = [], []
    base = "eager" if mode == "eager" else f"without kernels ({mode})"
    for p, ms in zip(plugs, alone_ms):
        if ms < base_ms * (1.0 - MODEL_GAIN_MIN):
            kept.append(p)
            continue
        change = "slower" if ms >= base_ms else f"less than {MODEL_GAIN_MIN:.0%} faster"
        excluded.append({"target": p.target_id,
                         "reason": f"makes the model {change}: {ms:.3f} ms with it alone, {base_ms:.3f} ms {base}"})
    return kept, excluded


def verify(model, targets, dtype, device, model_kwargs=None, input_shape=None, loader_dir=None,
           inputs=None, inputs_fn=None, pretrained=None, deploy=None, all_modes=False, budget_s=None,
           progress_path=None, partial_path=None):
    """Checks the model with each target's kernel plugged in against the unmodified model.

    model: the model source as ``profile_model.load_model`` takes it; targets: a list of
    ``{"id", "kind", "path"}`` with, from a plan, ``"shapes"``, ``"params"`` and
    (matmul) ``"layout"``; dtype: a dtype name; device: ``cuda`` or ``cpu``;
    loader_dir: the folder holding ``profile_model.py`` and ``examples/``; input_shape,
    inputs, inputs_fn, pretrained: as ``profile_model.load_for_call`` takes them (the
    profiler's loader, so the model verified is the model profiled, on the same inputs);
    deploy: the mode whose timings decide which kernels go in (``model_modes.MODES``;
    default ``cudagraph`` on a GPU, ``eager`` on the CPU); all_modes: time every mode the
    device has, not only the deploy mode and eager; budget_s, progress_path, partial_path:
    the seconds the verification may take, and its progress and partial-result files
    (:class:`Budget`). Returns a JSON-able dict matching the Rust ``Verification`` struct;
    one cut short by the deadline has ``cut_short`` true, the decisions reached, and the
    kernels not yet decided left out, each saying so.
    """
    if loader_dir and loader_dir not in sys.path:
        sys.path.insert(0, loader_dir)

    import kernel_ops
    import plugs as plugs_module
    import profile_model

    budget = Budget(budget_s, progress_path, partial_path)
    budget.progress("load", "loading the model")
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
    with contextlib.ExitStack() as scope:
        if not on_gpu:
            # the operators' CPU implementation is the reference: the kernels themselves
            # run here, under Triton's interpreter
            scope.enter_context(kernel_ops.force_kernel())
        return _verify_plugs(net, call, ref, targets, torch_dtype, on_gpu, deploy or ("cudagraph" if on_gpu else "eager"),
                             kernel_ops, plugs_module, all_modes=all_modes, budget=budget)


def _table_modes(deploy, on_gpu, all_modes):
    """The modes the table times, the deploy mode first (it decides, so it is timed while
    the budget is fullest), then eager (``DEFAULT_EXTRA_MODES``), then with `all_modes` the
    others the device has (compile on the CPU only when deployed so or asked: inductor's
    C++ build costs minutes there)."""
    import model_modes

    wanted = [deploy, *DEFAULT_EXTRA_MODES]
    if all_modes:
        wanted += [m for m in model_modes.MODES if on_gpu or m not in model_modes.GPU_ONLY]
    out = []
    for m in wanted:
        if m not in out and (on_gpu or m not in model_modes.GPU_ONLY):
            out.append(m)
    return out


def _verify_plugs(net, call, ref, targets, torch_dtype, on_gpu, deploy, kernel_ops, plugs_module, all_modes=False,
                  budget=None):
    import deploy as deploy_module
    import model_modes

    budget = budget or Budget()
    if deploy not in model_modes.MODES:
        raise ValueError(f"unknown deploy mode {deploy!r}; expected one of {', '.join(model_modes.MODES)}")
    if deploy in model_modes.GPU_ONLY and not on_gpu:
        raise ValueError(f"--deploy {deploy} needs a GPU (CUDA graphs); on the CPU use eager or compile")

    def forward():
        with torch.no_grad():
            return call(net)

    def no_grad_call(model):
        with torch.no_grad():
            return call(model)

    excluded = []
    result = {
        # a wrong kernel fails the verification even though it was left out of the model
        "passed": True,
        "included": [],
        "excluded": excluded,
        "max_abs_error": 0.0,
        "eager_ms": None,
        "optimized_ms": None,
        "speedup": None,
        "device": f"cuda {torch.cuda.get_device_name()}" if on_gpu else "cpu",
        "timing_representative": on_gpu,
        "torch_version": torch.__version__,
        "triton_version": _triton_version(),
        "deploy": deploy,
        "modes": [],
        "contexts": None,
        "cut_short": False,
        "cut_short_reason": None,
    }
    # where the decisions stand, for a result cut short: the kernels still in the running
    # (`good`), whether they were checked together yet, the table's modes not timed yet
    state = {"good": [], "together": True, "modes_left": _table_modes(deploy, on_gpu, all_modes)}
    undecided = [t["id"] for t in targets]

    def snapshot(reason):
        """The result as it stands, cut short for `reason`: every kernel not decided yet left
        out saying so (not ``broken``: nothing is known against it), the kernels decided in
        kept only once checked together (one kernel alone is its own check)."""
        out = dict(result, excluded=list(excluded), modes=list(result["modes"]), cut_short=True,
                   cut_short_reason=reason)
        decided_in = list(state["good"])
        if len(decided_in) > 1 and not state["together"]:
            out["excluded"] += [{"target": p.target_id, "reason": "cut short before the kernels that passed alone "
                                 "were checked together: not plugged in", "undecided": True} for p in decided_in]
            decided_in = []
        pending = [i for i in undecided if not any(p.target_id == i for p in decided_in)]
        out["excluded"] += [{"target": i, "reason": f"not decided: the verification was cut short ({reason})",
                             "undecided": True} for i in pending]
        out["included"] = [p.target_id for p in decided_in]
        out["passed"] = not any(e.get("broken") for e in out["excluded"]) and result["passed"]
        out["modes"] += [{"mode": m, "baseline_ms": None, "kernels_ms": None, "speedup": None,
                          "error": f"not timed: the verification was cut short ({reason})"}
                         for m in state["modes_left"]]
        # the modes not timed count as lost: an exported package runs the kernels in the
        # deploy mode's context, and in no other its table should have measured
        if decided_in:
            out["contexts"] = deploy_module._contexts(deploy, out["modes"])
        eager = next((r for r in out["modes"] if r["mode"] == "eager" and r["error"] is None), None)
        if eager:
            out["eager_ms"] = eager["baseline_ms"]
            if decided_in and eager["kernels_ms"]:
                out["optimized_ms"] = eager["kernels_ms"]
                out["speedup"] = eager["baseline_ms"] / eager["kernels_ms"]
        return out

    def save():
        """The partial result, should the worker be stopped before the next decision."""
        budget.save(snapshot(f"stopped while {budget.stage}"))

    def decided(target_id):
        if target_id in undecided:
            undecided.remove(target_id)

    try:
        return _decide(net, ref, targets, torch_dtype, on_gpu, deploy, kernel_ops, plugs_module, all_modes, budget,
                       forward, no_grad_call, result, excluded, state, decided, save, deploy_module)
    except _DeadlineReached as e:
        reason = f"its budget ran out while {e}"
        good = state["good"]
        if len(good) > 1 and not state["together"]:
            # the kernels decided in, checked together (one forward): what an export takes
            # must have been checked as it will run
            _together(good, net, forward, ref, torch_dtype, result, excluded, state)
        out = snapshot(reason)
        budget.progress("done", f"cut short: {reason}")
        budget.save(out)
        return out


def _together(good, net, forward, ref, torch_dtype, result, excluded, state):
    """The model with every kernel of `good` plugged in, checked against `ref`."""
    with contextlib.ExitStack() as stack:
        for p in good:
            stack.enter_context(p.installed(net))
        out = _first_tensor(forward())
    why = _compare(out, ref, torch_dtype)
    result["passed"] = result["passed"] and why is None
    result["max_abs_error"] = _max_abs(out, ref)
    if why:
        excluded.append({"target": "+".join(p.target_id for p in good), "reason": f"together: {why}",
                         "broken": True})
    state["together"] = True


def _decide(net, ref, targets, torch_dtype, on_gpu, deploy, kernel_ops, plugs_module, all_modes, budget, forward,
            no_grad_call, result, excluded, state, decided, save, deploy_module):
    """The verification's stages, each decision recorded in `result` / `state` as it is
    reached and saved (`save`); raises :class:`_DeadlineReached` past the deadline."""
    import model_modes

    plugs = []
    for i, t in enumerate(targets):
        try:
            module = _load_kernel(t["path"], f"_ak_verify_{i}_{t['id'].replace('-', '_')}")
        except Exception as e:  # noqa: BLE001 - any failure to load is a reason to leave it out
            excluded.append({"target": t["id"], "reason": f"cannot load {t['path']}: {e}", "broken": True})
            decided(t["id"])
            continue
        declared = getattr(module, "KERNEL_KIND", None)
        if declared is not None and declared != t["kind"]:
            excluded.append({"target": t["id"], "reason": f"{t['path']} declares KERNEL_KIND {declared!r}, the target "
                             f"is {t['kind']}", "broken": True})
            decided(t["id"])
            continue
        module.KERNEL_KIND = t["kind"]  # the target's kind names the operator's schema
        try:
            kernel_ops.bind(module.kernel_fn, t["kind"], t.get("params"))
        except ValueError as e:  # the kernel cannot compute the model's parameters
            excluded.append({"target": t["id"], "reason": f"plug check failed: {e}", "broken": True})
            decided(t["id"])
            continue
        try:
            # the kernel as an operator, as an exported package runs it (and as
            # torch.compile needs it: no graph break)
            op = kernel_ops.register(module, name=f"_verify_{i}_{t['id']}", params=t.get("params"))
        except Exception as e:  # noqa: BLE001 - a kind or params the catalogue refuses
            excluded.append({"target": t["id"], "reason": f"cannot register as an operator: {e}", "broken": True})
            decided(t["id"])
            continue
        plugs.append(plugs_module.Plug(t["id"], t["kind"], op, t.get("shapes") or (), t.get("params"),
                                       torch_dtype, t.get("layout")))

    # module and attention plugs: matched by the target's params, checked against the
    # model's own code on inputs captured from it
    budget.progress("alone", "checking the plugs against the model's own code")
    plugs_module.check_all(plugs, excluded, net, forward)
    for e in excluded:
        decided(e["target"])
    plugs = [p for p in plugs if not any(e["target"] == p.target_id for e in excluded)]
    save()

    def installing(selected):
        """A context manager factory installing `selected` on the model."""
        @contextlib.contextmanager
        def install():
            with contextlib.ExitStack() as stack:
                for p in selected:
                    stack.enter_context(p.installed(net))
                yield
        return install

    def run_with(selected):
        with installing(selected)():
            return _first_tensor(forward())

    # each kernel alone first, so a kernel that breaks the model is named; where the mode
    # deployed in must also take it (below), it is decided only then
    deploy_stage = on_gpu or deploy != "eager"
    good = []
    for p in plugs:
        budget.check()
        budget.progress("alone", f"checking {p.target_id} alone in the model", mode="eager", variant=p.target_id)
        # the decisions so far, saying where it is: a kernel that hangs here leaves them
        save()
        try:
            p.calls = 0
            out = run_with([p])
        except NotImplementedError as e:
            excluded.append({"target": p.target_id, "reason": f"not pluggable: {e}"})
            decided(p.target_id)
            continue
        except Exception as e:  # noqa: BLE001 - a crashing kernel is left out and named
            excluded.append({"target": p.target_id, "reason": f"raised {type(e).__name__}: {e}", "broken": True})
            decided(p.target_id)
            continue
        if p.calls == 0:
            excluded.append({"target": p.target_id, "reason": plugs_module.unused_reason(p)})
            decided(p.target_id)
            continue
        why = _compare(out, ref, torch_dtype)
        if why:
            excluded.append({"target": p.target_id, "reason": f"breaks the model: {why}", "broken": True})
            decided(p.target_id)
            continue
        good.append(p)
        if not deploy_stage:
            # decided in: nothing but the check together (and the table) comes after
            decided(p.target_id)
            state["good"] = list(good)
            state["together"] = len(good) <= 1

    # timings of compiled variants, by mode and kernels: each variant is compiled once
    cache = {}
    if good and deploy_stage:
        # in the mode the model is deployed in, each kernel alone must work (a kernel that
        # breaks capture or compilation, or whose output differs there, is left out) and, on
        # a GPU, make the model faster: a kernel faster than PyTorch's op on the benchmark's
        # inputs can still lose inside the model (another memory layout, a shape it was not
        # tuned for, the host's pace)
        good, dropped = _alone_in_mode(deploy, good, net, no_grad_call, installing, ref, torch_dtype, on_gpu,
                                       budget=budget, cache=cache, decided=decided)
        excluded.extend(dropped)
        for e in dropped:
            decided(e["target"])
    for p in good:
        decided(p.target_id)
    state["good"] = good
    state["together"] = len(good) <= 1
    save()

    if good:
        budget.progress("together", "checking the kernels together in the model")
        _together(good, net, forward, ref, torch_dtype, result, excluded, state)
    modes = list(state["modes_left"])
    save()
    rows = {}
    for mode in modes:
        budget.check()
        rows[mode] = _mode_row(mode, net, no_grad_call, installing, good, ref, torch_dtype, on_gpu, budget, cache)
        state["modes_left"].remove(mode)
        # the table in the order of model_modes.MODES, as reports list it
        result["modes"] = [rows[m] for m in model_modes.MODES if m in rows]
        if mode == deploy:
            slower = _slower_together([rows[mode]], deploy) if on_gpu else None
            if slower:
                # each kernel alone made the model faster, yet all of them, timed again in
                # the mode the model is deployed in, did not: the model keeps its own ops
                excluded.extend({"target": p.target_id, "reason": slower} for p in good)
                good = []
                state["good"] = good
        save()
    result["passed"] = result["passed"] and not any(e.get("broken") for e in excluded)
    result["included"] = [p.target_id for p in good]
    # where an exported package's plugs will take calls, by the table just measured
    result["contexts"] = deploy_module._contexts(deploy, result["modes"]) if good else None
    eager = next(r for r in result["modes"] if r["mode"] == "eager")
    result["eager_ms"] = eager["baseline_ms"]
    if good:
        result["optimized_ms"] = eager["kernels_ms"]
        if eager["baseline_ms"] and eager["kernels_ms"]:
            result["speedup"] = eager["baseline_ms"] / eager["kernels_ms"]
    budget.progress("done", "done")
    budget.save(result)
    return result


def _slower_together(modes, deploy):
    """Why the included kernels stay out after all: the mode table's row of `deploy` (the
    mode that decides) measured the model slower with them than without, or None."""
    row = next((r for r in modes if r["mode"] == deploy), None)
    if row is None or row["speedup"] is None or row["speedup"] >= 1.0:
        return None
    return (f"the included kernels together made the model slower under {deploy} "
            f"({row['kernels_ms']:.3f} ms with them, {row['baseline_ms']:.3f} ms without): none is plugged in")


def _alone_in_mode(mode, plugs, net, call, installing, ref, dtype, on_gpu, budget=None, cache=None, decided=None):
    """Each plug alone in the model in `mode`: prepared (a kernel that breaks capture or
    compilation is left out, with the mode's error), its output checked against the eager
    model's (a difference is ``broken``), and on a GPU timed against the model without
    kernels in the same mode (:func:`_gainers`). Returns (the plugs kept, exclusions).
    `budget`, `cache`: as :func:`_time_variants_ms` takes them; `decided(target_id)` hears
    each kernel whose fate is sealed before the others' (a compiled variant is timed alone)."""
    import model_modes

    budget = budget or Budget()
    decided = decided or (lambda _id: None)
    excluded, working, alone_ms = [], [], []
    compiled = mode in ("compile", "reduce-overhead")
    rounds = TIMING_ROUNDS if on_gpu else 1
    base_ms = None
    if compiled and on_gpu:
        # each compiled variant holds its plugs for its life: prepared, checked and timed
        # one after the other, never recompiled (the baseline's rounds are kept for the table)
        try:
            base_ms = _time_variants_ms([[]], mode, net, call, installing, on_gpu, ref=ref, dtype=dtype,
                                        budget=budget, stage="deploy", cache=cache)[0]
        except _VariantError as e:
            why = f"the model without kernels fails under {mode}, so no kernel can be judged there: {e}"
            return [], [{"target": p.target_id, "reason": why} for p in plugs]
        base_rounds = cache[(mode, ())] if cache is not None else [base_ms]
    for p in plugs:
        if mode == "eager":
            working.append(p)
            continue
        budget.check()
        budget.progress("deploy", f"preparing {mode} with {p.target_id}", mode=mode, variant=p.target_id)
        try:
            v = model_modes.prepare(mode, net, call, installing([p]), on_gpu)
        except Exception as e:  # noqa: BLE001 - the mode's own error names the cause
            excluded.append({"target": p.target_id, "reason": f"breaks {mode}: {type(e).__name__}: {e}"})
            decided(p.target_id)
            continue
        try:
            why = _compare(v.out, ref, dtype)
            if why:
                excluded.append({"target": p.target_id, "reason": f"breaks the model under {mode}: {why}",
                                 "broken": True})
                decided(p.target_id)
                continue
            working.append(p)
            if compiled and on_gpu:
                count = model_modes.loop_count(v.run, on_gpu)
                taken = []
                for r in range(rounds):
                    # the rounds stop once they decide it against the baseline (_decided);
                    # past the deadline, those taken stand only if they decide
                    if r > 0 and _decided([base_rounds, taken], rounds):
                        break
                    budget.check()
                    budget.progress("deploy", f"timing {mode} with {p.target_id}, round {r + 1} of {rounds}", mode=mode,
                                    variant=p.target_id, round=r + 1, rounds=rounds)
                    taken.append(model_modes.loop_ms(v.run, on_gpu, count))
                if cache is not None:
                    cache[(mode, (p.target_id,))] = list(taken)
                alone_ms.append(statistics.median(taken))
        finally:
            v.close()
    if not on_gpu or not working:
        return working, excluded
    if not compiled:
        base_ms, *alone_ms = _time_variants_ms([[]] + [[p] for p in working], mode, net, call, installing, on_gpu,
                                               budget=budget, stage="deploy")
    kept, slow = _gainers(working, alone_ms, base_ms, mode)
    return kept, excluded + slow


def _mode_row(mode, net, call, installing, good, ref, torch_dtype, on_gpu, budget, cache):
    """One row of the modes table: the model's time per forward in `mode` without
    (``baseline_ms``) and with the included kernels (``kernels_ms``, None when there are
    none), ``speedup``, the kernel launches per forward of each (``baseline_launches``,
    ``kernels_launches``: on a GPU, else None), and ``error``: why a variant could not run
    or differs from the eager
    model's output. Eager and CUDA-graph variants are timed in turns over ``TIMING_ROUNDS``
    rounds (one on the CPU); a compiled variant holds its plugs for its whole life, so the
    compiled variants are timed one after the other, each compiled once (`cache`)."""
    row = {"mode": mode, "baseline_ms": None, "kernels_ms": None, "speedup": None, "error": None,
           "baseline_launches": None, "kernels_launches": None}
    variants = [[]] + ([good] if good else [])
    launches = [None] * len(variants)
    try:
        times = _time_variants_ms(variants, mode, net, call, installing, on_gpu, ref=ref, dtype=torch_dtype,
                                  budget=budget, stage="modes", cache=cache, launches=launches)
    except _VariantError as e:
        row["error"] = str(e)
        return row
    row["baseline_ms"], row["baseline_launches"] = times[0], launches[0]
    if good:
        row["kernels_ms"], row["kernels_launches"] = times[1], launches[1]
        row["speedup"] = times[0] / times[1] if times[1] else None
    return row


def _mode_table(modes, net, call, installing, good, ref, torch_dtype, on_gpu, budget=None, cache=None):
    """One row per mode of `modes` (:func:`_mode_row`)."""
    return [_mode_row(m, net, call, installing, good, ref, torch_dtype, on_gpu, budget, cache) for m in modes]


class _VariantError(Exception):
    """A variant of the model that could not be prepared in a mode, or whose output differs
    from the eager model's: the message says which and why."""


def _triton_version():
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def device_info(requested):
    """The device a request for ``requested`` (auto/cuda/cpu) resolves to, and the GPU's name."""
    if requested != "cpu" and torch.cuda.is_available():
        return {"device": "cuda", "gpu_name": torch.cuda.get_device_name()}
    if requested == "cuda":
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return {"device": "cpu", "gpu_name": None}
