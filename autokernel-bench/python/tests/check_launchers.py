"""Triton builds a kernel's C launcher from its argument type names alone, so a worker can
build it ahead from a signature another worker reported (`harness._build_launchers`,
`worker/launchers.rs`).

For the rmsnorm starter's kernel, takes the constants and signature the way Triton's
`CudaLauncher` passes them to `make_launcher` (from the kernel's source object, at two sets
of constexpr values and two dtypes), and checks that the C source equals the one made from
the argument type names alone, as `harness._build_launchers` makes it: the same source,
hence the same cache entry. No GPU, no compiler: `make_launcher` only writes C source.
Usage: .venv/bin/python autokernel-bench/python/tests/check_launchers.py  → prints "ok"
"""
import os
import sys

from triton.backends.nvidia.driver import make_launcher
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ptx import load  # noqa: E402 - the starters' loader


def launcher_source_as_triton_makes_it(fn, signature, constexprs):
    """`make_launcher`'s C source with the arguments `CudaLauncher.__init__` gives it."""
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    arg_idx = lambda x: (src.fn.arg_names.index(x), ) if isinstance(x, str) else x  # noqa: E731
    constants = {arg_idx(idx): value for idx, value in src.constants.items()}
    return make_launcher(constants, dict(src.signature.items()), None), list(src.signature.values())


def main():
    fn = load("rmsnorm")._rmsnorm_kernel
    sources = set()
    for ptr, block in (("*fp16", 1024), ("*bf16", 8192)):
        signature = {"x_ptr": ptr, "w_ptr": ptr, "y_ptr": ptr, "n_rows": "i32", "n_cols": "i32",
                     "eps": "fp32", "w_offset": "fp32", "BLOCK_ROWS": "constexpr",
                     "BLOCK_N": "constexpr", "ONE_PASS": "constexpr", "ROUND_FIRST": "constexpr"}
        constexprs = {"BLOCK_ROWS": 1, "BLOCK_N": block, "ONE_PASS": True, "ROUND_FIRST": False}
        triton_made, types = launcher_source_as_triton_makes_it(fn, signature, constexprs)
        assert all(type(t) is str for t in types), types
        ahead = make_launcher({}, dict(enumerate(types)), None)
        assert ahead == triton_made, f"the launcher built ahead for {types} differs from Triton's"
        sources.add(ahead)
    # the pointee dtype does not reach the C source either: one launcher serves both dtypes
    assert len(sources) == 1, len(sources)
    print("ok")


if __name__ == "__main__":
    main()
