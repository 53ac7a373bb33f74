"""The fused add-norm plugs (``plugs.Plug`` of kinds add_rmsnorm and add_layernorm) on the
CPU, with the starters (run by tests/it/hf_chains.rs).

argv: CHECK OPS_DIR ROOT, as norm_plugs_check.py. CHECK is `plugged` (verify_model.verify
plugs each tiny random-weight HF model's chain in: included, the output within tolerance),
`fused` (a model whose code reads the sum before the norm, in Python or TorchScript, or
adds to it in place, gets the model's own result; the kernel runs once per chain and
forward where the sum reaches the norm unchanged, the first forward learning, the later
ones fusing at the add), `two_norms` (two chain plugs at one shape each take their own
norm's chain), `compiled` (under
torch.compile the graph pass gives the kernel the add's operands where it may, and the
output is the model's own), or `wrong_sum` (a kernel
whose sum is off is left out by the plug check, naming the sum). Prints `ok`.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
CHECK, OPS_DIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, OPS_DIR)  # its kernel_ops.py beside catalogue.py, before the repository's
import kernel_ops  # noqa: E402

sys.modules["catalogue"] = kernel_ops.catalogue_module()
sys.path.append(os.path.join(ROOT, "autokernel-profiler", "python"))  # call_sites.py, which plugs imports
import torch  # noqa: E402

import plugs  # noqa: E402
import verify_model as vm  # noqa: E402

STARTERS = os.path.join(ROOT, "autokernel-bench", "python", "starters")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")

# (class, config, fused kind, the norm's params, rows x cols at 1x16 tokens)
MODELS = [
    ("LlamaForCausalLM",
     {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5},
     "add_rmsnorm", {"eps": 1e-5, "weight_offset": 0, "cast_order": "llama"}, [16, 64]),
    ("GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 2, "vocab_size": 128, "n_positions": 64},
     "add_layernorm", {"eps": 1e-5, "has_bias": True}, [16, 32]),
    ("BertModel",
     {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
      "vocab_size": 128},
     "add_layernorm", {"eps": 1e-12, "has_bias": True}, [16, 32]),
]


def run(cls, config, kind, params, shape, path):
    target = {"id": f"01-{kind}", "kind": kind, "path": path, "shapes": [shape], "params": params}
    return vm.verify({"source": "import", "module": "transformers", "class": cls}, [target], "float32", "cpu",
                     model_kwargs=config, input_shape=[1, 16], loader_dir=LOADER)


@torch.jit.script
def _scripted_twice(h):
    return h * 2


class Block(torch.nn.Module):
    """``h = x + r`` then, by `code`: ``norm(h)`` returned with ``h`` (the chain), or the sum
    read first (``h * 2`` before the norm; by TorchScript with ``script``), or added to in
    place (``h += r``) before it; the norm called by keyword (``keyword``); or (``product``)
    the norm of ``x * r``, no add."""

    def __init__(self, code):
        super().__init__()
        self.code = code
        self.norm = torch.nn.LayerNorm(32)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x, r):
        if self.code == "product":
            return self.norm(x * r) + x
        h = x + r
        if self.code == "read_first":
            twice = h * 2
            return self.norm(h) + twice
        if self.code == "in_place":
            h += r
        if self.code == "keyword":
            # a call the plug does not take (its forward takes one positional input)
            return self.norm(input=h) + h
        if self.code == "script":
            # TorchScript reads the sum outside any torch function mode
            twice = _scripted_twice(h)
            return self.norm(h) + twice
        return self.norm(h) + h


def plug_for(model, kind, params, shape, path):
    op = kernel_ops.register(path, name=f"chain_{model.code}", params=params)
    plug = plugs.Plug("01-" + kind, kind, op, [shape], params, torch.float32)
    plug.modules = [model.norm]
    return plug


if CHECK == "plugged":
    for cls, config, kind, params, shape in MODELS:
        r = run(cls, config, kind, params, shape, os.path.join(STARTERS, f"{kind}.py"))
        # included means the plug took calls (one that takes none is left out as unused)
        assert r["passed"] and r["included"] == [f"01-{kind}"], (cls, r)
        assert r["max_abs_error"] < 1e-3, (cls, r)
elif CHECK == "fused":
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g)
    params = {"eps": 1e-5, "has_bias": True}
    # the sum read before the norm is still the chain (the kernel's sum is filled at the
    # add); an in-place change of it between is not (the norm computes its own)
    for code, fused in (("chain", 1), ("read_first", 1), ("in_place", 0), ("script", 1), ("keyword", 0)):
        model = Block(code).eval()
        with torch.no_grad():
            want = model(x, r)
        plug = plug_for(model, "add_layernorm", params, [8, 32], os.path.join(STARTERS, "add_layernorm.py"))
        with torch.no_grad(), plug.installed(model):
            got = model(x, r)
            # through the Triton kernel (the operator's CPU implementation is the reference,
            # itself an add)
            with kernel_ops.force_kernel(), \
                    torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                again = model(x, r)
        assert plug.calls == 2 * fused, (code, plug.calls)
        # the second forward fused at the add: PyTorch made one add fewer than the model's own
        adds = sum(1 for e in prof.events() if e.name == "aten::add")
        own = {"chain": 2, "read_first": 2, "in_place": 2, "script": 2, "keyword": 2}[code]
        assert adds == own - fused, (code, adds)
        for out in (got, again):
            err = (out - want).abs().max().item()
            assert err < 1e-4, (code, err)
        # out of the plug, the model is its own again
        with torch.no_grad():
            assert torch.equal(model(x, r), want), code
elif CHECK == "two_norms":
    class Mixed(torch.nn.Module):
        """Two chains at one shape: an RMS norm's, then a layer norm's."""

        def __init__(self):
            super().__init__()
            self.rms, self.ln = torch.nn.RMSNorm(32, eps=1e-6), torch.nn.LayerNorm(32)

        def forward(self, x, r):
            h1 = x + r
            h2 = self.rms(h1) + h1
            return self.ln(h2) + h2

    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g)
    model = Mixed().eval()
    with torch.no_grad():
        want = model(x, r)
    rms = kernel_ops.register(os.path.join(STARTERS, "add_rmsnorm.py"), name="chain_mixed_rms",
                              params={"eps": 1e-6, "weight_offset": 0, "cast_order": "float32"})
    ln = kernel_ops.register(os.path.join(STARTERS, "add_layernorm.py"), name="chain_mixed_ln",
                             params={"eps": 1e-5, "has_bias": True})
    a = plugs.Plug("01-add_rmsnorm", "add_rmsnorm", rms, [[8, 32]], {"eps": 1e-6}, torch.float32)
    b = plugs.Plug("02-add_layernorm", "add_layernorm", ln, [[8, 32]], {"eps": 1e-5}, torch.float32)
    a.modules, b.modules = [model.rms], [model.ln]
    with torch.no_grad(), a.installed(model), b.installed(model):
        outs = [model(x, r) for _ in range(3)]
    # every forward runs each kernel once (the first learning, the later fusing at the add)
    assert (a.calls, b.calls) == (3, 3), (a.calls, b.calls)
    for out in outs:
        err = (out - want).abs().max().item()
        assert err < 1e-4, err
elif CHECK == "compiled":
    # under torch.compile the graph pass hands the kernel the add's operands: one rewrite
    # for the chain, also where the code reads the sum first (a functional graph: the
    # kernel's sum is the same value); none where the norm's input is no add (the kernel
    # then runs on (h, 0), still right); the output is the model's own every time
    rewrites = []
    rewrite = plugs.ChainPass.rewrite

    def counting(graph):
        rewrites.append(rewrite(graph))
        return rewrites[-1]

    plugs.ChainPass.rewrite = counting
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(2, 4, 32, generator=g), torch.randn(2, 4, 32, generator=g)
    params = {"eps": 1e-5, "has_bias": True}
    import torch._inductor.config as inductor_config

    for code, want_rewrites in (("chain", [1]), ("read_first", [1]), ("product", [0])):
        model = Block(code).eval()
        with torch.no_grad():
            want = model(x, r)
        plug = plug_for(model, "add_layernorm", params, [8, 32], os.path.join(STARTERS, "add_layernorm.py"))
        rewrites.clear()
        torch._dynamo.reset()
        # Inductor's FX graph cache would hand an earlier run's compiled graph back without
        # running the pass (keyed by its uuid): compiled afresh, so that it runs here
        with torch.no_grad(), plug.installed(model), inductor_config.patch(fx_graph_cache=False):
            assert inductor_config.post_grad_custom_post_pass is not None
            got = torch.compile(model)(x, r)
        assert rewrites == want_rewrites, (code, rewrites)
        err = (got - want).abs().max().item()
        assert err < 1e-4, (code, err)
        # undone: Inductor's config as it was
        assert inductor_config.post_grad_custom_post_pass is None and not plugs.ChainPass.ops
elif CHECK == "wrong_sum":
    import tempfile

    # the starter, its sum off by 1 where the norm (of the right sum's shape) stays plausible
    wrong = (f"import importlib.util\n"
             f"_s = importlib.util.spec_from_file_location('_starter', "
             f"{os.path.join(STARTERS, 'add_rmsnorm.py')!r})\n"
             f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
             f"KERNEL_KIND = 'add_rmsnorm'\n"
             f"def kernel_fn(x, residual, weight, **kw):\n"
             f"    out = _m.kernel_fn(x, residual, weight, **kw)\n"
             f"    out[0] += 1\n"
             f"    return out\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.py")
        with open(path, "w") as f:
            f.write(wrong)
        cls, config, kind, params, shape = MODELS[0]
        r = run(cls, config, kind, params, shape, path)
    assert not r["passed"] and r["included"] == [], r
    (entry,) = r["excluded"]
    assert entry["broken"] and entry["reason"].startswith("plug check failed: differs from the sum by"), entry
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
