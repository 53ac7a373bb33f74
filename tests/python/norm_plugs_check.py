"""verify_model.verify on tiny random-weight Hugging Face models with the norm starters
plugged in by the target's params (run by tests/it/hf_norms.rs).

argv: CHECK OPS_DIR ROOT. OPS_DIR holds catalogue.py and catalogue.json as autokernel
writes them; ROOT is the repository. CHECK is `plugged` (each model's norm plugged in at
the params its config gives, the output within tolerance) or `wrong_eps` (a kernel that
computes another eps is left out by the plug check, with the error), or `constant_rows` (the
judge's constant rows at a tiny eps leave a correct kernel's rounding within tolerance).
Prints `ok`.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, OPS_DIR)  # its kernel_ops.py beside catalogue.py, before the repository's
import kernel_ops  # noqa: E402

sys.modules["catalogue"] = kernel_ops.catalogue_module()
import verify_model as vm  # noqa: E402

STARTERS = os.path.join(ROOT, "autokernel-bench", "python", "starters")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")

# (class, config, target kind, params the config and the class's forward give, rows x cols)
MODELS = [
    ("LlamaForCausalLM",
     {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5},
     "rmsnorm", {"eps": 1e-5, "weight_offset": 0, "cast_order": "llama"}, [16, 64]),
    ("BertModel",
     {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
      "vocab_size": 128},
     "layernorm", {"eps": 1e-12, "has_bias": True}, [16, 32]),
    ("T5EncoderModel",
     {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 1, "num_heads": 4, "vocab_size": 128,
      "layer_norm_epsilon": 1e-6},
     "rmsnorm", {"eps": 1e-6, "weight_offset": 0, "cast_order": "t5"}, [16, 32]),
]


def run(cls, config, kind, params, shape, path):
    target = {"id": f"01-{kind}", "kind": kind, "path": path, "shapes": [shape], "params": params}
    return vm.verify({"source": "import", "module": "transformers", "class": cls}, [target], "float32", "cpu",
                     model_kwargs=config, input_shape=[1, 16], loader_dir=LOADER)


if CHECK == "plugged":
    for cls, config, kind, params, shape in MODELS:
        r = run(cls, config, kind, params, shape, os.path.join(STARTERS, f"{kind}.py"))
        assert r["passed"] and r["included"] == [f"01-{kind}"], (cls, r)
        # the model's output with the kernel in place of its norms, against the model alone
        assert r["max_abs_error"] < 1e-3, (cls, r)
    # the same Llama norm planned at another eps than the model's: no module computes it
    cls, config, kind, params, shape = MODELS[0]
    r = run(cls, config, kind, dict(params, eps=1e-6), shape, os.path.join(STARTERS, "rmsnorm.py"))
    assert r["included"] == [] and r["passed"], r
    assert r["excluded"][0]["reason"].startswith("no rmsnorm module of the model computes"), r
elif CHECK == "wrong_eps":
    import tempfile

    # the starter, but computing eps 0.1 whatever the target asks: on unit-variance rows
    # x/sqrt(1 + 0.1) differs from x/sqrt(1 + 1e-5) by ~5%, far beyond rmsnorm's tolerance
    wrong = (f"import importlib.util\n"
             f"_s = importlib.util.spec_from_file_location('_starter', {os.path.join(STARTERS, 'rmsnorm.py')!r})\n"
             f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
             f"def kernel_fn(x, weight, eps=1e-6, **kw):\n    return _m.kernel_fn(x, weight, eps=0.1, **kw)\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.py")
        with open(path, "w") as f:
            f.write(wrong)
        cls, config, kind, params, shape = MODELS[0]
        r = run(cls, config, kind, params, shape, path)
    assert not r["passed"] and r["included"] == [], r
    (entry,) = r["excluded"]
    assert entry["broken"] and entry["reason"].startswith(
        "plug check failed: differs from LlamaRMSNorm's own forward by"), entry
elif CHECK == "constant_rows":
    import torch

    cat = sys.modules["catalogue"]
    # the judge's constant rows at BERT's eps: a layernorm whose mean is one float32 rounding
    # off (a correct kernel's worst) must stay within the float32 tolerance (atol 1e-4 at
    # outputs ~1), though (x − mean)·rsqrt(eps) magnifies that rounding 10⁶× at eps 1e-12
    for eps in (1e-5, 1e-12):
        t = cat.make_inputs("layernorm", [8, 128], torch.float32, "cpu", 7, mode="constant",
                            params={"eps": eps, "has_bias": True})
        x, w, b = t["x"].double(), t["weight"].double(), t["bias"].double()
        mean = x.mean(-1, keepdim=True)
        off = mean * (1 + 2.0 ** -23)  # one float32 rounding of the mean
        exact = (x - mean) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * w + b
        rounded = (x - off) * torch.rsqrt(((x - off) ** 2).mean(-1, keepdim=True) + eps) * w + b
        worst = (rounded - exact).abs().max().item()
        assert worst < 1e-5, (eps, worst)
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
