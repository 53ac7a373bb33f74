"""verify_model.verify with the rotary_embedding starter plugged into a tiny random-weight
Hugging Face `LlamaForCausalLM` (HF's `apply_rotary_pos_emb`, half-split, Q and K
together) and the bundled `tiny` example (its `RotaryEmbedding` module, interleaved, one
tensor a call), each at the pairing its own code computes (run by tests/it/hf_rotary.rs).

argv: CHECK OPS_DIR ROOT. OPS_DIR holds catalogue.py and catalogue.json as autokernel
writes them; ROOT is the repository. CHECK is:
- `plugged`: Llama's Q [1,4,16,16] and K [1,2,16,16] (grouped-query) targets and tiny's
  [1,2,32,32] target plugged in (each took calls), the output within tolerance; Llama's
  `apply_rotary_pos_emb` is its own again after, and another Llama instance running while
  the plug is installed is not taken;
- `wrong_pairing`: a kernel that rotates interleaved pairs whatever the target asks is
  left out of Llama by the plug check, with the error; one that rotates half-split pairs
  is left out of tiny;
- `unplanned_pairing`: Llama's rotary planned as interleaved takes no call, with the reason;
- `deployed`: `deploy.optimize` (an exported package's, no model inputs) installs tiny's
  target on its rotary modules (no graph break under torch.compile) and Llama's two on its
  `apply_rotary_pos_emb` for that instance only (another Llama's output unchanged; no graph
  break under torch.compile either), each
  taking calls, the output within tolerance, the function restored by `undo`; a target at
  the other pairing is left out.
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
sys.modules["catalogue"].patch_triton_interpreter()
import verify_model as vm  # noqa: E402

STARTER = os.path.join(ROOT, "autokernel-bench", "python", "starters", "rotary_embedding.py")
LOADER = os.path.join(ROOT, "autokernel-profiler", "python")
TINY_PY = os.path.join(ROOT, "examples", "models", "tiny.py")

LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256}
# Q: 4 heads, K/V: 2 heads; 16 tokens, head_dim 16
LLAMA_SHAPES = ([1, 4, 16, 16], [1, 2, 16, 16])
# tiny: 2 heads of 32, 32 tokens
TINY_SHAPE = [1, 2, 32, 32]


def targets(path, shapes, pairing):
    return [{"id": f"{i + 1:02}-rotary_embedding", "kind": "rotary_embedding", "path": path, "shapes": [s],
             "params": {"pairing": pairing}} for i, s in enumerate(shapes)]


def llama(path, pairing):
    return vm.verify({"source": "import", "module": "transformers", "class": "LlamaForCausalLM"},
                     targets(path, LLAMA_SHAPES, pairing), "float32", "cpu", model_kwargs=LLAMA,
                     input_shape=[1, 16], loader_dir=LOADER)


def tiny(path, pairing):
    return vm.verify({"source": "file", "path": TINY_PY, "class": "Tiny"}, targets(path, [TINY_SHAPE], pairing),
                     "float32", "cpu", input_shape=[1, 32], loader_dir=LOADER)


def wrong(pairing):
    """The starter, but rotating `pairing`'s pairs whatever the target asks."""
    return (f"import importlib.util\n"
            f"_s = importlib.util.spec_from_file_location('_starter', {STARTER!r})\n"
            f"_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
            f"def kernel_fn(x, cos, sin, pairing='interleaved'):\n"
            f"    return _m.kernel_fn(x, cos, sin, pairing={pairing!r})\n")


if CHECK == "plugged":
    import torch
    import transformers
    import transformers.models.llama.modeling_llama as modeling

    own = modeling.apply_rotary_pos_emb
    r = llama(STARTER, "half_split")
    assert r["passed"] and r["included"] == ["01-rotary_embedding", "02-rotary_embedding"], r
    assert r["max_abs_error"] < 1e-3, r
    assert modeling.apply_rotary_pos_emb is own, "apply_rotary_pos_emb not restored"
    r = tiny(STARTER, "interleaved")
    assert r["passed"] and r["included"] == ["01-rotary_embedding"], r
    assert r["max_abs_error"] < 1e-3, r

    # the plug takes the calls of the instance it is installed on, not another model's
    import call_sites
    import plugs

    torch.manual_seed(0)
    mine, other = (transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval() for _ in range(2))
    ids = torch.randint(0, 256, (1, 16))
    fn = kernel_ops.bind(kernel_ops.load_kernel(STARTER).kernel_fn, "rotary_embedding", {"pairing": "half_split"})
    plug = plugs.Plug("01", "rotary_embedding", fn, [LLAMA_SHAPES[0]], {"pairing": "half_split"}, torch.float32,
                      process_wide=False)
    assert plugs.check_rotary(plug, call_sites.capture_rotary_calls(mine, lambda: mine(ids))) is None
    assert plug.function_modules == [modeling], plug.function_modules
    with torch.no_grad():
        want_other = other(ids).logits
        with plug.installed(mine):
            assert modeling.apply_rotary_pos_emb is not own
            got_other = other(ids).logits
            assert plug.calls == 0, plug.calls
            mine(ids)
            assert plug.calls == 1, plug.calls  # Q only: K [1,2,16,16] is not this plug's shape
        assert modeling.apply_rotary_pos_emb is own, "apply_rotary_pos_emb not restored"
    assert torch.equal(want_other, got_other)
elif CHECK == "wrong_pairing":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for run, model, pairing, bad, owner in ((llama, "Llama", "half_split", "interleaved", "apply_rotary_pos_emb"),
                                                (tiny, "tiny", "interleaved", "half_split", "RotaryEmbedding")):
            path = os.path.join(d, f"{model}.py")
            with open(path, "w") as f:
                f.write(wrong(bad))
            r = run(path, pairing)
            assert not r["passed"] and r["included"] == [], r
            assert r["excluded"], r
            for entry in r["excluded"]:
                assert entry["broken"] and entry["reason"].startswith(
                    f"plug check failed: differs from {owner}'s own output by"), entry
elif CHECK == "unplanned_pairing":
    r = llama(STARTER, "interleaved")
    assert r["passed"] and r["included"] == [], r
    for entry in r["excluded"]:
        assert entry["reason"].startswith("no rotary module or apply_rotary_pos_emb call of the model computes"), entry
elif CHECK == "deployed":
    import importlib.util
    import json
    import tempfile

    import torch
    import transformers
    import transformers.models.llama.modeling_llama as modeling

    sys.path.insert(0, LOADER)  # call_sites.py, which plugs.py imports
    import deploy

    own = modeling.apply_rotary_pos_emb

    def manifest(d, shapes, pairing):
        listed = [dict(t, kernel=STARTER, dtype="float32") for t in targets(STARTER, shapes, pairing)]
        path = os.path.join(d, "manifest.json")
        with open(path, "w") as f:
            json.dump({"package": f"rot{manifest.n}", "targets": listed, "verified_on": {}}, f)
        manifest.n += 1
        return path

    manifest.n = 0

    def rel_l2(out, ref):
        return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))

    torch.manual_seed(0)
    spec = importlib.util.spec_from_file_location("tiny_example", TINY_PY)
    tiny_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny_module)
    with tempfile.TemporaryDirectory() as d:
        # the bundled tiny: its RotaryEmbedding modules, by their forward on the instance
        net = tiny_module.Tiny().eval()
        ids = torch.randint(0, 256, (1, 32))
        with torch.no_grad():
            ref = net(ids)
        report = deploy.optimize(net, manifest(d, [TINY_SHAPE], "interleaved"), verbose=False)
        assert [r["target"] for r in report.replaced] == ["01-rotary_embedding"], report
        assert len(report.replaced[0]["modules"]) == 2, report.replaced  # one per layer's attention
        with torch.no_grad():
            assert rel_l2(net(ids), ref) < 1e-3
        assert report.calls()["01-rotary_embedding"] == 4, report.calls()  # Q and K of 2 layers
        explained = torch._dynamo.explain(net)(ids)
        assert explained.graph_break_count == 0, explained.break_reasons
        report.undo()

        # HF Llama: apply_rotary_pos_emb for this instance only, restored by undo
        config = transformers.LlamaConfig(**LLAMA)
        net, other = transformers.LlamaForCausalLM(config).eval(), transformers.LlamaForCausalLM(config).eval()
        ids = torch.randint(0, 256, (1, 16))
        with torch.no_grad():
            ref, ref_other = net(ids).logits, other(ids).logits
        report = deploy.optimize(net, manifest(d, LLAMA_SHAPES, "half_split"), verbose=False)
        assert sorted(r["target"] for r in report.replaced) == ["01-rotary_embedding", "02-rotary_embedding"], \
            report
        with torch.no_grad():
            assert rel_l2(net(ids).logits, ref) < 1e-3
            assert torch.equal(other(ids).logits, ref_other)
        assert report.calls() == {"01-rotary_embedding": 1, "02-rotary_embedding": 1}, report.calls()
        # the per-instance dispatcher of HF's module-level function holds under dynamo too
        with torch.no_grad():
            explained = torch._dynamo.explain(net)(ids)
        assert explained.graph_break_count == 0, explained.break_reasons
        # and the traced graph calls the kernels' operators, not the model's own rotation
        called = [str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
        assert sum("autokernel" in t for t in called) == 2, called  # Q and K
        report.undo()
        assert modeling.apply_rotary_pos_emb is own, "apply_rotary_pos_emb not restored"
        # the wrong pairing: left out by the check, nothing patched
        report = deploy.optimize(net, manifest(d, LLAMA_SHAPES, "interleaved"), verbose=False)
        assert report.replaced == [] and len(report.left) == 2, report
        assert modeling.apply_rotary_pos_emb is own
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
