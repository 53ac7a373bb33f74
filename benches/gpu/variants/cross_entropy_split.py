"""Variant of the cross_entropy starter, measured and not adopted (docs/benchmarks.md).

Each row is split over programs of BLOCK_N columns: each loads its chunk once, writes the
chunk's max, its sum of exp(x - max) and the target logit if the target falls in it; a
second kernel combines a row's chunks (logsumexp of partial sums) into its loss and a third
takes the mean in a fixed order. More programs than rows, no online rescaling. On the H200
at 4096x50257 float16: 259.7 us against the starter's 148.1 us (223.7-434.6 over CONFIGs).
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "cross_entropy"
CONFIG = {"BLOCK_N": 8192, "num_warps": 8, "num_stages": 1, "FINISH_ROWS": 128}
TUNABLES = {"BLOCK_N": [2048, 4096, 8192, 16384], "num_warps": [4, 8, 16], "num_stages": [1]}


@triton.jit
def _partial_kernel(x_ptr, t_ptr, m_ptr, s_ptr, xt_ptr, n_cols, n_chunks, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // n_chunks
    chunk = pid % n_chunks
    c = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * n_cols + c, mask=c < n_cols, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)  # finite: every chunk holds at least one column
    s = tl.sum(tl.exp(x - m), axis=0)
    t = tl.load(t_ptr + row)
    tl.store(m_ptr + pid, m)
    tl.store(s_ptr + pid, s)
    tl.store(xt_ptr + pid, tl.sum(tl.where(c == t, x, 0.0), axis=0))


@triton.jit
def _row_loss_kernel(m_ptr, s_ptr, xt_ptr, loss_ptr, n_rows, n_chunks, ROWS: tl.constexpr, CHUNKS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    ch = tl.arange(0, CHUNKS)
    ok = (rows < n_rows)[:, None] & (ch < n_chunks)[None, :]
    idx = rows[:, None] * n_chunks + ch[None, :]
    m = tl.load(m_ptr + idx, mask=ok, other=float("-inf"))
    s = tl.load(s_ptr + idx, mask=ok, other=0.0)
    xt = tl.load(xt_ptr + idx, mask=ok, other=0.0)
    big = tl.max(m, axis=1)
    big = tl.where(big == float("-inf"), 0.0, big)  # rows past the end: not stored
    lse = big + tl.log(tl.sum(s * tl.exp(m - big[:, None]), axis=1))
    tl.store(loss_ptr + rows, lse - tl.sum(xt, axis=1), mask=rows < n_rows)


@triton.jit
def _mean_kernel(loss_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_rows, BLOCK):
        acc += tl.load(loss_ptr + start + offs, mask=start + offs < n_rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n_rows)


def kernel_fn(logits, targets):
    """logits [rows, vocab] (float), targets [rows] int64 → mean loss, 0-dim float32."""
    logits = logits.contiguous()
    n_cols = logits.shape[-1]
    n_rows = logits.numel() // n_cols
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols))
    n_chunks = triton.cdiv(n_cols, block_n)
    part = torch.empty((3, n_rows * n_chunks), dtype=torch.float32, device=logits.device)
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    _partial_kernel[(n_rows * n_chunks,)](logits, targets.contiguous(), part[0], part[1], part[2], n_cols, n_chunks,
                                          BLOCK_N=block_n, num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    rows = CONFIG["FINISH_ROWS"]
    _row_loss_kernel[(triton.cdiv(n_rows, rows),)](part[0], part[1], part[2], losses, n_rows, n_chunks,
                                                   ROWS=rows, CHUNKS=triton.next_power_of_2(n_chunks), num_warps=4)
    _mean_kernel[(1,)](losses, out, n_rows, BLOCK=1024, num_warps=4)
    return out
