"""The rules by which verify_model decides what goes into the model, on made-up timings
(run by tests/it/verify.rs). argv: CHECK OPS_DIR ROOT, as the other checks take them.

CHECK `slower_together`: kernels that each made the model faster alone but, timed together
in the mode table, make it slower in the deploy mode are all left out, with the figures;
the same kernels faster together, or slower only in another mode, stay in. Prints `ok`.
"""

import os
import sys

CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
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
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
