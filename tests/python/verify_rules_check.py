"""The rules by which verify_model decides what goes into the model, on made-up timings
(run by tests/it/verify.rs). argv: CHECK OPS_DIR ROOT, as the other checks take them.

CHECK `slower_together`: kernels that each made the model faster alone but, timed together
in the mode table, make it slower in the deploy mode are all left out, with the figures;
the same kernels faster together, or slower only in another mode, stay in.

CHECK `contexts`: where an exported package's plugs take calls (`deploy._contexts`), from
the verification's deploy mode and its table: CUDA graphs and torch.compile keep the
model's own ops where a mode of theirs measured it slower with the kernels or failed, unless
deployed there; eager likewise.

CHECK `early_stop`: a mode's rounds stop once they decide every variant against the baseline
(`_decided`: more than half the rounds in, each variant's range clear of the baseline's at
every ratio a decision reads), and run to the end where a variant sits within the spread; a
compiled variant is compiled once for all its rounds, and once for the whole verification
(the cache); past the deadline the rounds taken stand only if they decide, else the timing
stops (`_DeadlineReached`); progress lines name mode, variant and round in order. Made-up
timings through a stand-in for `model_modes`. Prints `ok`.
"""

import os
import sys

CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "autokernel-profiler", "python"))  # call_sites, for deploy
sys.path.insert(0, OPS_DIR)
import kernel_ops  # noqa: E402

sys.modules["catalogue"] = kernel_ops.catalogue_module()
import verify_model as vm  # noqa: E402


def row(mode, baseline_ms, kernels_ms):
    return {"mode": mode, "baseline_ms": baseline_ms, "kernels_ms": kernels_ms,
            "speedup": baseline_ms / kernels_ms if kernels_ms else None, "error": None}


if CHECK == "slower_together":
    # BERT on the H200, 2026-12-02: the layernorm kernel passed alone, then measured 0.99x
    table = [row("eager", 5.818, 10.912), row("cudagraph", 9.730, 9.822), row("reduce-overhead", 4.854, 4.953)]
    why = vm._slower_together(table, "cudagraph")
    assert why is not None and "cudagraph" in why and "9.822 ms with them, 9.730 ms without" in why, why
    # faster in the deciding mode: kept, whatever the other modes say
    assert vm._slower_together([row("eager", 5.8, 10.9), row("cudagraph", 9.8, 9.7)], "cudagraph") is None
    # no kernels (nothing to time) or no row for the mode: nothing to say
    assert vm._slower_together([row("eager", 5.8, None)], "eager") is None
    assert vm._slower_together([row("eager", 5.8, 6.0)], "cudagraph") is None
elif CHECK == "contexts":
    import deploy

    # HF GPT-2 on the H200, 2026-12-02 (cudagraph deciding): eager 0.96x, cudagraph 1.35x,
    # compile 1.69x, reduce-overhead 0.95x -> torch.compile (both its modes) keeps its own ops
    gpt2 = [row("eager", 4.79, 5.0), row("cudagraph", 2.37, 1.76), row("compile", 3.76, 2.23),
            row("reduce-overhead", 0.96, 1.02)]
    # and eager (0.96x) too
    assert deploy._contexts("cudagraph", gpt2) == ["cudagraph"], deploy._contexts("cudagraph", gpt2)
    # deployed compiled: that context keeps them, whatever its other mode measured
    assert deploy._contexts("compile", gpt2) == ["cudagraph", "compile"]
    # BERT-base on the H200, 2026-12-03: eager 0.72x, cudagraph 1.02x, compile and
    # reduce-overhead 0.97x -> the kernels inside CUDA graphs only
    bert = [row("eager", 4.62, 6.42), row("cudagraph", 9.54, 9.35), row("compile", 5.06, 5.22),
            row("reduce-overhead", 4.76, 4.91)]
    assert deploy._contexts("cudagraph", bert) == ["cudagraph"], deploy._contexts("cudagraph", bert)
    # eager faster with them, deployed in a CUDA graph: eager keeps them
    assert deploy._contexts("cudagraph", [row("eager", 2.0, 1.0), row("cudagraph", 2.0, 1.0)]) \
        == ["eager", "cudagraph", "compile"]
    # a CUDA graph slower with them, deployed eager: captures keep the model's own ops
    assert deploy._contexts("eager", [row("eager", 2.0, 1.0), row("cudagraph", 1.0, 2.0)]) == ["eager", "compile"]
    # a mode that failed with the kernels counts as slower; the deploy mode keeps them
    # however it measured
    failed = dict(row("compile", 1.0, None), error="compile with 01-a: TypeError")
    assert deploy._contexts("eager", [row("eager", 1.0, 2.0), failed]) == ["eager", "cudagraph"]
    # nothing measured (the CPU's table has eager only): every context
    assert deploy._contexts("eager", [row("eager", 1.0, 11.0)]) == ["eager", "cudagraph", "compile"]
elif CHECK == "early_stop":
    import json
    import tempfile

    import model_modes

    # the rule on made-up rounds (ms): 5 rounds, so 3 must be in
    assert not vm._decided([[10.0, 10.1], [5.0, 5.1]], 5), "2 of 5 rounds decide nothing"
    assert vm._decided([[10.0, 10.1, 10.2], [5.0, 5.1, 5.2]], 5), "clearly faster"
    assert vm._decided([[10.0, 10.1, 10.2], [20.0, 20.1, 20.2]], 5), "clearly slower"
    # 0.5% faster in every round: decided (faster, and not 1% faster)
    assert vm._decided([[10.0, 10.0, 10.0], [9.95, 9.95, 9.95]], 5)
    # rounds on both sides of the gain rule's 1% (9.9 ms of 10): the rounds go on
    assert not vm._decided([[10.0, 10.0, 10.0], [9.88, 9.92, 9.89]], 5)
    # ranges that overlap: the rounds go on
    assert not vm._decided([[10.0, 9.0, 11.0], [9.5, 10.5, 9.8]], 5)
    # one variant decided, another not: the mode goes on
    assert not vm._decided([[10.0, 10.1, 10.2], [5.0, 5.1, 5.2], [10.0, 10.1, 9.9]], 5)
    # one round of one (the CPU) is all there is
    assert vm._decided([[10.0], [12.0]], 1)

    class Plug:
        def __init__(self, target_id):
            self.target_id = target_id

    class Variant:
        def __init__(self, name):
            self.name, self.out = name, None

        def run(self):
            return None

        def close(self):
            pass

    # each variant's time per round (ms), by name; `prepared` counts compilations
    script, prepared, timed = {}, [], []

    def prepare(mode, net, call, install, on_gpu):
        v = Variant(install.name)
        prepared.append((mode, v.name))
        return v

    def loop_ms(run, on_gpu, count):
        name = run.__self__.name
        timed.append(name)
        return script[name][sum(1 for n in timed if n == name) - 1]

    model_modes.prepare = prepare
    model_modes.loop_ms = loop_ms
    model_modes.loop_count = lambda run, on_gpu: 3

    def installing(selected):
        install = object.__new__(type("Install", (), {}))
        install.name = vm._variant_name(selected)
        return install

    a, b = Plug("01-a"), Plug("02-b")

    def time_variants(mode, variants, budget=None, cache=None):
        prepared.clear()
        timed.clear()
        return vm._time_variants_ms(variants, mode, None, None, installing, True, budget=budget, cache=cache)

    # a cudagraph table whose kernels win clearly: 3 rounds, not 5
    script.update({"without kernels": [10.0, 10.1, 10.2, 10.0, 10.0], "01-a": [5.0, 5.1, 5.0, 5.0, 5.0]})
    ms = time_variants("cudagraph", [[], [a]])
    assert timed.count("without kernels") == 3 and timed.count("01-a") == 3, timed
    assert ms == [10.1, 5.0], ms
    # within the spread: all 5 rounds
    script["01-a"] = [10.0, 9.9, 10.2, 10.05, 10.1]
    time_variants("cudagraph", [[], [a]])
    assert timed.count("01-a") == 5, timed
    # compiled: each variant compiled once for its rounds; the baseline gets all of them,
    # a decided variant stops at 3; a second call with the cache compiles nothing again
    script.update({"01-a": [5.0, 5.1, 5.0, 5.0, 5.0], "01-a+02-b": [20.0, 20.0, 20.0, 20.0, 20.0]})
    cache = {}
    time_variants("compile", [[], [a], [a, b]], cache=cache)
    assert prepared == [("compile", "without kernels"), ("compile", "01-a"), ("compile", "01-a+02-b")], prepared
    assert timed.count("without kernels") == 5 and timed.count("01-a") == 3 and timed.count("01-a+02-b") == 3, timed
    ms = time_variants("compile", [[], [a]], cache=cache)
    assert prepared == [] and timed == [] and ms == [10.0, 5.0], (prepared, timed, ms)

    # the deadline: past it before any round, the timing stops; progress lines in order
    with tempfile.TemporaryDirectory() as tmp:
        progress = os.path.join(tmp, "progress.jsonl")
        try:
            time_variants("cudagraph", [[], [a]], budget=vm.Budget(0, progress))
            raise AssertionError("no _DeadlineReached past the deadline")
        except vm._DeadlineReached:
            pass
        script["01-a"] = [5.0, 5.1, 5.0, 5.0, 5.0]
        budget = vm.Budget(None, progress)
        time_variants("cudagraph", [[], [a]], budget=budget)
        lines = [json.loads(line) for line in open(progress)]
        steps = [(p["mode"], p["variant"], p["round"]) for p in lines if p["round"]]
        assert steps == [("cudagraph", v, r) for r in (1, 2, 3) for v in ("without kernels", "01-a")], steps

        # past the deadline after 3 rounds that decide: they stand
        class Expiring(vm.Budget):
            def __init__(self, path, after):
                super().__init__(None, path)
                self.after = after

            def expired(self):
                return len(timed) >= self.after

        ms = time_variants("cudagraph", [[], [a]], budget=Expiring(progress, 6))
        assert ms == [10.1, 5.0] and len(timed) == 6, (ms, timed)
        # past it within the third round, undecided by the two before: no timing stands
        script["01-a"] = [10.0, 9.9, 10.2, 10.05, 10.1]
        try:
            time_variants("cudagraph", [[], [a]], budget=Expiring(progress, 5))
            raise AssertionError("no _DeadlineReached")
        except vm._DeadlineReached:
            pass
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
