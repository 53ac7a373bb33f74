"""verify_model.verify on a tiny GPT-2 with the matmul starter plugged into its Conv1D
modules and its LM head's nn.Linear by each target's layout, params and shape (run by
tests/it/hf_matmul.rs).

argv: CHECK OPS_DIR ROOT. OPS_DIR holds catalogue.py and catalogue.json as autokernel
writes them; ROOT is the repository. The model is a checkpoint saved here with random
biases (GPT-2 initialises them to zero, where a kernel that drops the bias would pass).
CHECK is `plugged` (the starter plugged into Conv1D and the LM head, the output within
tolerance, each plug taking the calls of its own modules only) or `wrong` (a kernel that
ignores the bias, and one that reads W as an nn.Linear's Wᵀ, are left out by the plug check,
with the error). Prints `ok`.
"""

import os
import sys
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, OPS_DIR)  # its kernel_ops.py beside catalogue.py, before the repository's
import kernel_ops  # noqa: E402

sys.modules["catalogue"] = kernel_ops.catalogue_module()
sys.modules["catalogue"].patch_triton_interpreter()  # tl.dot under numpy >= 2.4, as the worker does
STARTER = os.path.join(ROOT, "autokernel-bench", "python", "starters", "matmul.py")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")
sys.path.insert(0, LOADER)  # call_sites.py, which plugs.py imports (verify puts it there too)
import torch  # noqa: E402
import transformers  # noqa: E402

import plugs  # noqa: E402
import verify_model as vm  # noqa: E402

# n_embd 32 on 16 tokens: c_attn [16, 96, 32], attention c_proj [16, 32, 32], c_fc
# [16, 128, 32], MLP c_proj [16, 32, 128]; the LM head (no bias) [16, 128, 32], c_fc's shape
CONFIG = {"n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 128, "n_positions": 64}
CONV = {"has_bias": True}


def checkpoint(folder):
    """A tiny GPT-2 saved in `folder`, its Conv1D biases random (N(0, 0.5²))."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    with torch.no_grad():
        for m in model.modules():
            if type(m).__name__ == "Conv1D":
                m.bias.normal_(0.0, 0.5)
    model.save_pretrained(folder)


def target(i, shape, layout, params, path):
    return {"id": f"0{i}-matmul", "kind": "matmul", "path": path, "shapes": [shape], "params": params,
            "layout": layout}


def run(targets, folder):
    return vm.verify({"source": "import", "module": "transformers", "class": "GPT2LMHeadModel"}, targets,
                     "float32", "cpu", input_shape=[1, 16], loader_dir=LOADER, pretrained=folder)


def wrong_kernel(folder, name, body):
    """A kernel.py in `folder` calling the starter (`_m`) as `body` says."""
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write(f"import importlib.util\n"
                f"_s = importlib.util.spec_from_file_location('_starter', {STARTER!r})\n"
                f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
                f"def kernel_fn(A, B, bias=None, has_bias=False):\n    {body}\n")
    return path


with tempfile.TemporaryDirectory() as d:
    checkpoint(d)
    if CHECK == "plugged":
        targets = [target(1, [16, 96, 32], "contiguous", CONV, STARTER),
                   target(2, [16, 128, 32], "contiguous", CONV, STARTER),
                   target(3, [16, 128, 32], "b_transposed", {"has_bias": False}, STARTER)]
        r = run(targets, d)
        assert r["passed"] and r["included"] == ["01-matmul", "02-matmul", "03-matmul"], r
        assert r["max_abs_error"] < 1e-3, r
        # each plug takes its own module's calls: c_attn, c_fc (a Conv1D at the LM head's
        # shape) and the LM head, once a forward each
        net = transformers.GPT2LMHeadModel.from_pretrained(d)
        ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))

        def forward():
            with torch.no_grad():
                return net(ids).logits

        ref = forward()
        fn = kernel_ops.bind(vm._load_kernel(STARTER, "_starter_plugged").kernel_fn, "matmul", CONV)
        mine = [plugs.Plug(t["id"], "matmul", fn if t["params"]["has_bias"] else
                           kernel_ops.bind(vm._load_kernel(STARTER, "_starter_lm").kernel_fn, "matmul", t["params"]),
                           t["shapes"], t["params"], torch.float32, t["layout"]) for t in targets]
        excluded = []
        plugs.check_all(mine, excluded, net, forward)
        assert excluded == [] and [[type(m).__name__ for m in p.modules] for p in mine] == [
            ["Conv1D"], ["Conv1D"], ["Linear"]], (excluded, [p.modules for p in mine])
        assert mine[1].modules == [net.transformer.h[0].mlp.c_fc], mine[1].modules
        with mine[0].installed(net), mine[1].installed(net), mine[2].installed(net):
            out = forward()
        assert [p.calls for p in mine] == [1, 1, 1], [p.calls for p in mine]
        assert (out - ref).abs().max() < 1e-3
        # and every forward is the model's own again
        assert all("forward" not in m.__dict__ for m in net.modules())
        # a Conv1D target planned without its bias: no module of the model computes that
        r = run([target(1, [16, 96, 32], "contiguous", {"has_bias": False}, STARTER)], d)
        assert r["included"] == [] and r["passed"], r
        assert r["excluded"][0]["reason"].startswith("no nn.Linear or Conv1D module of the model computes"), r
    elif CHECK == "wrong":
        # the starter without the bias: off by the random bias, ~0.5
        no_bias = wrong_kernel(d, "no_bias", "return _m.kernel_fn(A, B)")
        # the starter reading B [K, N] as an nn.Linear's weight [N, K] (square attention
        # c_proj, 32 x 32, so that the shapes fit and only the values are wrong)
        transposed = wrong_kernel(d, "transposed", "return _m.kernel_fn(A, B.t(), bias=bias, has_bias=has_bias)")
        for path, shape in ((no_bias, [16, 96, 32]), (transposed, [16, 32, 32])):
            r = run([target(1, shape, "contiguous", CONV, path)], d)
            assert not r["passed"] and r["included"] == [], r
            (entry,) = r["excluded"]
            assert entry["broken"] and entry["reason"].startswith(
                "plug check failed: differs from Conv1D's own forward by"), entry
    else:
        raise SystemExit(f"unknown check {CHECK}")
print("ok")
