"""A two-layer LLaMA-style decoder small enough for a CPU profile in seconds: hidden 64,
2 heads, vocab 256, sequence 32. Same modules as `llama.py` (RMSNorm, rotary, SwiGLU,
causal SDPA), random weights."""

import importlib.util
import os


def _load_llama():
    # llama.py sits beside this file; loaded by path so nothing is added to sys.path
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama.py")
    spec = importlib.util.spec_from_file_location("autokernel_example_llama", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Llama = _load_llama().Llama  # the same architecture, smaller

EXAMPLE = {
    "class": "Tiny",
    "input_shape": [1, 32],
    "kwargs": {"vocab": 256, "hidden": 64, "layers": 2, "heads": 2, "intermediate": 128},
}


class Tiny(Llama):
    """Token ids [batch, seq] → logits [batch, seq, 256]."""

    def __init__(self, vocab=256, hidden=64, layers=2, heads=2, intermediate=128):
        super().__init__(vocab, hidden, layers, heads, intermediate)
