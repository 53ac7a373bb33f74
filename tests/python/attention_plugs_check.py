"""verify_model.verify on tiny random-weight Hugging Face models with the flash_attention
starter plugged in by the target's params (run by tests/it/hf_attention.rs).

argv: CHECK OPS_DIR ROOT. OPS_DIR holds catalogue.py and catalogue.json as autokernel
writes them; ROOT is the repository. CHECK is `plugged` (Llama's grouped-query causal
attention and BERT's padded non-causal attention plugged in at the params their configs
give, the output within tolerance) or `wrong_scale` (a kernel that computes another scale
is left out by the plug check, with the error) or `compiled` (an exported package's
`deploy.optimize` on HF Llama: under torch.compile the traced graph has no break and calls
the kernel's operator, its output the model's own; transformers materializes the causal mask
while tracing unless the plug's mask function keeps SDPA's `is_causal`). Prints `ok`.
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

# the flash_attention starter cannot run under this Triton's interpreter (attention_kernel.py
# says why): a plain PyTorch kernel_fn takes its place
STARTER = os.path.join(ROOT, "tests", "python", "attention_kernel.py")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")
PADDED = os.path.join(ROOT, "tests", "python", "padded_inputs.py")

LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256}
BERT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "vocab_size": 128}
# head_dim = hidden / heads = 16: the default scale 1/4 is left unset (null)
GQA = {"causal": True, "scale": None, "kv_heads": 2, "has_mask": False}
PADDED_BERT = {"causal": False, "scale": None, "kv_heads": None, "has_mask": True}


def run(cls, config, params, shape, path, **load):
    target = {"id": "01-flash_attention", "kind": "flash_attention", "path": path, "shapes": [shape],
              "params": params}
    return vm.verify({"source": "import", "module": "transformers", "class": cls}, [target], "float32", "cpu",
                     model_kwargs=config, loader_dir=LOADER, **load)


def llama(params, path):
    return run("LlamaForCausalLM", LLAMA, params, [1, 4, 16, 16], path, input_shape=[1, 16])


if CHECK == "plugged":
    r = llama(GQA, STARTER)
    assert r["passed"] and r["included"] == ["01-flash_attention"], r
    assert r["max_abs_error"] < 1e-3, r
    # BERT on a batch of two, the second padded after 12 tokens: a [2,1,16,16] boolean
    # mask, constant along the query, handed to the kernel as the [batch, seq] mask
    r = run("BertModel", BERT, PADDED_BERT, [2, 2, 16, 16], STARTER,
            inputs_fn={"path": PADDED, "function": "bert"})
    assert r["passed"] and r["included"] == ["01-flash_attention"], r
    assert r["max_abs_error"] < 1e-3, r
    # Llama's attention planned as if it were not grouped-query: no call computes that
    r = llama(dict(GQA, kv_heads=None), STARTER)
    assert r["included"] == [] and r["passed"], r
    assert r["excluded"][0]["reason"].startswith("no attention call of the model computes"), r
elif CHECK == "wrong_scale":
    import tempfile

    # the starter, but scaling Q·Kᵀ by 0.5 whatever the target asks (Llama's is 1/4): on
    # random-weight activations the attention weights, and so the output, change far
    # beyond flash_attention's tolerance
    wrong = (f"import importlib.util\n"
             f"_s = importlib.util.spec_from_file_location('_starter', {STARTER!r})\n"
             f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
             f"def kernel_fn(Q, K, V, mask=None, scale=None, **kw):\n"
             f"    return _m.kernel_fn(Q, K, V, mask=mask, scale=0.5, **kw)\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.py")
        with open(path, "w") as f:
            f.write(wrong)
        r = llama(GQA, path)
    assert not r["passed"] and r["included"] == [], r
    (entry,) = r["excluded"]
    assert entry["broken"] and entry["reason"].startswith(
        "plug check failed: differs from LlamaAttention's own attention by"), entry
elif CHECK == "compiled":
    import json
    import tempfile

    import torch
    import transformers

    sys.path.insert(0, LOADER)  # call_sites.py, which plugs.py imports
    import deploy

    torch.manual_seed(0)
    net = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        ref = net(ids).logits
    with tempfile.TemporaryDirectory() as d:
        target = {"id": "01-flash_attention", "kind": "flash_attention", "path": STARTER, "kernel": STARTER,
                  "shapes": [[1, 4, 16, 16]], "params": GQA, "dtype": "float32"}
        path = os.path.join(d, "manifest.json")
        with open(path, "w") as f:
            json.dump({"package": "attn", "targets": [target], "verified_on": {}}, f)
        report = deploy.optimize(net, path, verbose=False)
        assert [r["target"] for r in report.replaced] == ["01-flash_attention"], report
        with torch.no_grad():
            explained = torch._dynamo.explain(net)(ids)
            assert explained.graph_break_count == 0, explained.break_reasons
            called = [str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
            assert sum("autokernel" in t for t in called) == 1, called  # the one layer's attention
            torch._dynamo.reset()
            out = torch.compile(net, fullgraph=True)(ids).logits
        assert float((out - ref).abs().max()) < 1e-3
        report.undo()
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
