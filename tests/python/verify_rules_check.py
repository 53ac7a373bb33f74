"""The rules by which verify_model decides what goes into the model, on made-up timings
(run by tests/it/verify.rs). argv: CHECK OPS_DIR ROOT, as the other checks take them.

CHECK `slower_together`: kernels that each made the model faster alone but, timed together
in the mode table, make it slower in the deploy mode are all left out, with the figures;
the same kernels faster together, or slower only in another mode, stay in.

CHECK `contexts`: where an exported package's plugs take calls (`deploy._contexts`), from
the verification's deploy mode and its table: CUDA graphs and torch.compile keep the
model's own ops where a mode of theirs measured it slower with the kernels or failed, unless
deployed there; eager likewise. Prints `ok`.
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
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
