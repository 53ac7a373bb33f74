"""The `cpu` and `edge` shape sets of KernelKind::shapes (autokernel-core/src/kernel.rs),
copied; check_starters.py verifies they still match that file."""

# KernelKind::shapes(Cpu) and (Edge).
CPU = {
    "matmul": [[64, 64, 64], [128, 64, 32]],
    "softmax": [[8, 128], [16, 256]],
    "layernorm": [[8, 128], [16, 256]],
    "rmsnorm": [[8, 128], [16, 256]],
    "flash_attention": [[1, 2, 32, 16], [2, 2, 64, 32]],
    "fused_mlp": [[16, 32, 64], [32, 64, 96]],
    "cross_entropy": [[8, 128], [16, 500]],
    "rotary_embedding": [[1, 2, 16, 32], [2, 2, 32, 64]],
    "reduce": [[8, 128], [16, 256]],
}
EDGE = {
    "matmul": [[67, 45, 93], [1, 33, 17]],
    "softmax": [[7, 1000], [33, 77]],
    "layernorm": [[7, 1000], [33, 77]],
    "rmsnorm": [[7, 1000], [33, 77]],
    "flash_attention": [[1, 3, 37, 64]],
    "fused_mlp": [[13, 40, 72]],
    "cross_entropy": [[7, 1000], [33, 77]],
    "rotary_embedding": [[1, 3, 37, 48]],
    "reduce": [[7, 1000], [33, 77]],
}
