"""Runs every candidate in tests/problems/<stem>/ against examples/problems/<stem>.py and checks each behaves as intended."""
import importlib.util
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.runtime.interpreter  # noqa: E402
import triton.runtime.jit  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "examples" / "problems"
CANDIDATES = Path(__file__).resolve().parent
SEEDS = range(5)
TOL = 1e-4

# Count kernel launches: `kernel[grid](...)` ends in .run() of JITFunction (compiled) or InterpretedFunction.
LAUNCHES = [0]


def _counting(run):
    def wrapped(self, *args, **kwargs):
        if not kwargs.get("warmup", False):
            LAUNCHES[0] += 1
        return run(self, *args, **kwargs)
    return wrapped


for _cls in (triton.runtime.jit.JITFunction, triton.runtime.interpreter.InterpretedFunction):
    _cls.run = _counting(_cls.run)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # the judge has the problem loaded as a module, so calls_reference can find it
    spec.loader.exec_module(mod)
    return mod


def shrink(mod):
    for key, val in list(vars(mod).items()):
        if type(val) is int and val >= 16:
            setattr(mod, key, val - val // 4 - 1)


def run_case(prob_path, cand_mod, seed, shrunk):
    """Returns (status, detail, launches, inputs_changed, forward_seconds)."""
    name = f"problem_{prob_path.stem}"
    prob = load(prob_path, name)
    try:
        if shrunk:
            shrink(prob)
        init = prob.get_init_inputs()
        torch.manual_seed(seed)
        ref = prob.Model(*init)
        torch.manual_seed(seed)
        try:
            new = cand_mod.ModelNew(*init)
        except BaseException as e:  # noqa: BLE001
            return "raised", f"{type(e).__name__}: {str(e).splitlines()[0][:80]}", 0, False, 0.0
        torch.manual_seed(seed)
        inputs = prob.get_inputs()
        saved = [t.clone() for t in inputs]
        with torch.no_grad():
            expected = ref(*[t.clone() for t in inputs])
            LAUNCHES[0] = 0
            t0 = time.perf_counter()
            try:
                got = new(*inputs)
            except BaseException as e:  # noqa: BLE001
                msg = str(e).splitlines()[0][:80] if str(e) else ""
                return "raised", f"{type(e).__name__}: {msg}", LAUNCHES[0], False, time.perf_counter() - t0
            secs = time.perf_counter() - t0
        changed = any(not torch.equal(a, b) for a, b in zip(inputs, saved))
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return "mismatch", f"shape {shape} vs {tuple(expected.shape)}", LAUNCHES[0], changed, secs
        diff = (got.float() - expected.float()).abs().max().item()
        ok = torch.allclose(got, expected, atol=TOL, rtol=TOL)
        return ("ok" if ok else "mismatch"), f"max abs diff {diff:.3g}", LAUNCHES[0], changed, secs
    finally:
        sys.modules.pop(name, None)


def expectation(cand, results):
    """results: {case: (status, detail, launches, changed, secs)}. Returns (met, description)."""
    default = [results[f"seed{s}"] for s in SEEDS]
    shrunk = results["shrunk"]
    everything = default + [shrunk]
    all_ok = all(r[0] == "ok" for r in everything)
    kernels = all(r[2] > 0 for r in everything)
    kept = not any(r[3] for r in everything)
    rules = {
        "correct": (all_ok and kernels and kept, "all cases ok, launches a kernel, inputs kept"),
        "wrong": (all(r[0] == "mismatch" for r in default) and kernels, "mismatches, launches a kernel"),
        "no_kernel": (all_ok and not any(r[2] for r in everything), "all cases ok, no kernel launched"),
        "calls_reference": (all_ok, "all cases ok (it calls the reference)"),
        "forward_directly": (all_ok and kernels, "all cases ok, launches a kernel (it runs the reference's forward)"),
        "mutates_inputs": (all_ok and all(r[3] for r in everything), "all cases ok, inputs changed"),
        "replays_output": (default[0][0] == "ok" and all(r[0] != "ok" for r in default[1:] + [shrunk]),
                           "ok at seed 0 only"),
        "nan_output": (all(r[0] == "mismatch" for r in everything), "mismatches (NaN everywhere)"),
        "raises_system_exit": (all(r[0] == "raised" for r in everything), "raises in every case"),
        # the next five pass here, where nothing keeps them honest: the judge catches them
        "precomputes_in_init": (all_ok and kernels, "all cases ok at KernelBench's seeding (its answer was kept "
                                "in advance)"),
        "numpy_compute": (all_ok and kernels, "all cases ok, launches a kernel (a copy of NumPy's answer)"),
        "right_then_zeros": (all_ok and kernels, "all cases ok, launches a kernel (its first six calls are right)"),
        "patches_time_call": (all_ok and kernels, "all cases ok, launches a kernel (its trick is on the judge's timing)"),
        "calls_aten_convolution": (all_ok and kernels, "all cases ok, launches a kernel (a copy of aten's answer)"),
        "reuses_output": (all_ok and kernels and kept, "all cases ok, launches a kernel, inputs kept"),
        "memoizes": (default[0][0] == "ok" and default[0][2] > 0,
                     "ok at its first call, with a kernel (a later case's tensor at a freed one's address "
                     "may get the stale answer)"),
        "noop_kernel": (all_ok and kernels, "all cases ok, launches a kernel (one that does nothing)"),
        "rebinds_get_inputs": (all_ok and kernels, "all cases ok, launches a kernel (on the inputs it put in)"),
        "default_shape_only": (all(r[0] == "ok" for r in default) and shrunk[0] != "ok",
                               "ok at default sizes, not at shrunk sizes"),
    }
    return rules.get(cand, (True, "no expectation"))


def main():
    start = time.perf_counter()
    print(f"torch {torch.__version__}, triton {triton.__version__}, TRITON_INTERPRET={os.environ['TRITON_INTERPRET']}")
    slowest = (0.0, "")
    failures = []
    for prob_path in sorted(PROBLEMS.glob("*.py")):
        cand_dir = CANDIDATES / prob_path.stem
        for cand_path in sorted(cand_dir.glob("*.py")):
            cand = cand_path.stem
            cand_mod = load(cand_path, f"candidate_{prob_path.stem}_{cand}")
            results = {}
            cases = [(f"seed{s}", s, False) for s in SEEDS] + [("shrunk", 0, True)]
            for case, seed, shrunk in cases:
                r = results[case] = run_case(prob_path, cand_mod, seed, shrunk)
                status, detail, launches, changed, secs = r
                print(f"{prob_path.stem:21s} {cand:19s} {case:6s} {status:8s} ({detail}) "
                      f"kernels={launches} inputs={'CHANGED' if changed else 'kept'} {secs * 1e3:.0f}ms")
                if secs > slowest[0]:
                    slowest = (secs, f"{prob_path.stem}/{cand} {case}")
            met, desc = expectation(cand, results)
            print(f"{'':21s} {cand:19s} => {'AS EXPECTED' if met else 'UNEXPECTED'}: {desc}")
            if not met:
                failures.append(f"{prob_path.stem}/{cand}")
    print(f"slowest candidate forward: {slowest[0] * 1e3:.0f}ms ({slowest[1]})")
    print(f"total time: {time.perf_counter() - start:.1f}s")
    print("ALL AS EXPECTED" if not failures else f"UNEXPECTED: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
