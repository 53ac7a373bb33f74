"""verify_model.verify on tiny random-weight Hugging Face models with the fused_mlp starter
plugged into their gated MLPs by the target's activation (run by tests/it/hf_mlp.rs).

argv: CHECK OPS_DIR ROOT. OPS_DIR holds catalogue.py and catalogue.json as autokernel
writes them; ROOT is the repository. CHECK is `plugged` (LlamaMLP, SwiGLU, and GemmaMLP,
GeGLU with the tanh GELU, each plugged in at the activation its forward computes, the
output within tolerance) or `wrong_activation` (a kernel that computes SiLU whatever the
target asks is left out of Gemma by the plug check, with the error). Prints `ok`.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, OPS_DIR)  # its kernel_ops.py beside catalogue.py, before the repository's
import kernel_ops  # noqa: E402

sys.modules["catalogue"] = kernel_ops.catalogue_module()
sys.modules["catalogue"].patch_triton_interpreter()  # tl.dot under numpy >= 2.4, as the worker does
import verify_model as vm  # noqa: E402

STARTER = os.path.join(ROOT, "autokernel-bench", "python", "starters", "fused_mlp.py")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256}
# Gemma's default hidden_activation is gelu_pytorch_tanh, the tanh GELU. Weights of σ 0.5
# (not 0.02) make the gate's pre-activations O(1), where SiLU and the tanh GELU differ by
# ~0.1: at σ 0.02 they are ~0.1 and the two activations agree within fused_mlp's tolerance
GEMMA = dict(TINY, head_dim=16, initializer_range=0.5)
# 16 tokens, hidden 64, intermediate 128
SHAPE = [16, 64, 128]


def run(cls, config, activation, path):
    target = {"id": "01-fused_mlp", "kind": "fused_mlp", "path": path, "shapes": [SHAPE],
              "params": {"activation": activation}}
    return vm.verify({"source": "import", "module": "transformers", "class": cls}, [target], "float32", "cpu",
                     model_kwargs=config, input_shape=[1, 16], loader_dir=LOADER)


if CHECK == "plugged":
    for cls, config, activation in (("LlamaForCausalLM", TINY, "silu"), ("GemmaForCausalLM", GEMMA, "gelu_tanh")):
        r = run(cls, config, activation, STARTER)
        assert r["passed"] and r["included"] == ["01-fused_mlp"], (cls, r)
        assert r["max_abs_error"] < 1e-3, (cls, r)
    # Llama's MLP planned as a GeGLU: no module computes that
    r = run("LlamaForCausalLM", TINY, "gelu_tanh", STARTER)
    assert r["included"] == [] and r["passed"], r
    assert r["excluded"][0]["reason"].startswith("no gated MLP module of the model computes"), r
elif CHECK == "wrong_activation":
    import tempfile

    # the starter, but with SiLU whatever the target asks: silu(g) and the tanh GELU differ
    # by up to ~0.2 near g = -1.5 (silu -0.27, gelu -0.10), far beyond fused_mlp's tolerance
    wrong = (f"import importlib.util\n"
             f"_s = importlib.util.spec_from_file_location('_starter', {STARTER!r})\n"
             f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
             f"def kernel_fn(x, w_gate, w_up, w_down, activation='silu'):\n"
             f"    return _m.kernel_fn(x, w_gate, w_up, w_down, activation='silu')\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.py")
        with open(path, "w") as f:
            f.write(wrong)
        r = run("GemmaForCausalLM", GEMMA, "gelu_tanh", path)
    assert not r["passed"] and r["included"] == [], r
    (entry,) = r["excluded"]
    assert entry["broken"] and entry["reason"].startswith(
        "plug check failed: differs from GemmaMLP's own forward by"), entry
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
