"""Variant of the cross_entropy starter for rows that start off a 16-byte boundary (an odd
vocabulary, 50257): each row is read in chunks from the 16-byte boundary at or below its
start (softmax_aligned_exp2.py's layout: the chunks inside the row unmasked, so that their
loads are 16-byte vectors; the first and last masked), with the starter's exp2
exponentials. One program per row. Its inner loop issues 7.9 SASS instructions per element
at 50257 columns against the starter's 12.1 (benches/gpu/sass_probe.py style count, Triton
3.6, sm_90). On the H200 125.5 µs against the starter's 137.6 at 4096×50257: the starter
now uses this kernel for such rows (docs/benchmarks.md, "Timed on the GPU").
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "cross_entropy"
CONFIG = {"BLOCK_N": 4096, "num_warps": 4, "num_stages": 2}
TUNABLES = {"BLOCK_N": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16], "num_stages": [1, 2]}
MEAN_BLOCK = 1024
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(v) = exp2(v · log2 e)


@triton.jit
def _exp(v):
    """exp(v) as exp2(v · log2 e): one ex2.approx.ftz (the starter's docstring says why)."""
    return tl.math.exp2(v * LOG2E)


@triton.jit
def _chunk(x_ptr, base, j, head, end, n_total, EDGE: tl.constexpr):
    """The row's lanes j (relative to the aligned base) in float32; lanes outside the row -inf."""
    idx = base + j
    if EDGE:
        x = tl.load(x_ptr + idx, mask=idx < n_total, other=float("-inf")).to(tl.float32)
        return tl.where((j >= head) & (j < end), x, float("-inf"))
    else:
        return tl.load(x_ptr + idx).to(tl.float32)


@triton.jit
def _row_loss_kernel(x_ptr, t_ptr, loss_ptr, n_cols, n_total, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    row = tl.program_id(0)
    row_start = row.to(tl.int64) * n_cols  # int64: rows · cols may pass 2³¹
    base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
    head = (row_start - base).to(tl.int32)
    end = head + n_cols
    last = (end - 1) // BLOCK_N  # the last chunk; chunks 1 .. last-1 lie inside the row
    cols = tl.arange(0, BLOCK_N)
    x = _chunk(x_ptr, base, cols, head, end, n_total, True)
    m = tl.max(x, axis=0)
    s = tl.sum(_exp(x - m), axis=0)
    for k in range(1, last):
        x = _chunk(x_ptr, base, k * BLOCK_N + cols, head, end, n_total, False)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new), axis=0)
        m = m_new
    if last > 0:
        x = _chunk(x_ptr, base, last * BLOCK_N + cols, head, end, n_total, True)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new), axis=0)
        m = m_new
    target = tl.load(t_ptr + row)
    x_t = tl.load(x_ptr + row_start + target).to(tl.float32)
    tl.store(loss_ptr + row, m + tl.log(s) - x_t)


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
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    # + 16: the first chunk starts up to 7 lanes before the row
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols + 16))
    _row_loss_kernel[(n_rows,)](logits, targets.contiguous(), losses, n_cols, logits.numel(),
                                BLOCK_N=block_n, ALIGN=max(1, 16 // logits.element_size()),
                                num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    _mean_kernel[(1,)](losses, out, n_rows, BLOCK=MEAN_BLOCK, num_warps=4)
    return out
