"""Mean cross-entropy of logits [rows, vocab] against class ids targets [rows] (int64).

loss = mean over rows of (logsumexp(logits[r]) − logits[r, targets[r]]), a 0-dim float32.

Starter kernel of autokernel (kind `cross_entropy`). Memory-bound: the logits are read
once. Each program handles BLOCK_ROWS rows, reading them in chunks of up to BLOCK_N
columns with an online logsumexp (running row max and sum of exp, rescaled when the max
grows; Milakov & Gimelshein 2018), then gathers the target logit and writes one float32
loss per row. A second, one-program kernel sums the row losses in a fixed order and
divides by rows (deterministic: no atomics). All arithmetic in float32.

The row kernel's loads are marked `evict_first`: each logit is read once, so its lines
are the first the L2 may drop (docs/benchmarks.md, "Session 7").

Rows whose width in bytes is not a multiple of 16 (an odd vocabulary such as GPT-2's
50257) start off a 16-byte boundary, and the loads of the chunks above could then only be
2 bytes wide. Those rows go to a second kernel, one program per row, that reads each row in
chunks from the 16-byte boundary at or below its start: the chunks inside the row are
loaded without a mask, 16 bytes at a time; the first and the last are masked to the row.
At such widths it is faster than the first kernel (docs/benchmarks.md, "What the session-5
comparisons changed").

Exponentials are exp2 of (x − max)·log2 e, which compiles to one multiply and one
`ex2.approx.ftz` (PTX ISA, "ex2"): `tl.exp` compiles to `ex2.approx` without flush-to-zero,
whose subnormal fix-up costs four more instructions per element on sm_90 (SASS of this
file; docs/benchmarks.md, "Instructions per element"). Flushing drops only terms below
2⁻¹²⁶ from the sum.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "cross_entropy"
# The aligned rows' keys as `autokernel tune` found them at 4096x32000 float16; the odd
# widths' kernel keeps its own (ODD_*), measured at 50257 (docs/benchmarks.md, "Session 7").
CONFIG = {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "ODD_BLOCK_N": 4096, "ODD_STAGES": 2, "num_warps": 4, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2],
    "BLOCK_N": [1024, 2048, 4096, 8192],
    "ODD_BLOCK_N": [2048, 4096, 8192],
    "ODD_STAGES": [1, 2],
    "num_warps": [4, 8, 16],
    "num_stages": [1, 2],
}

# Most float32 values one program holds at once (BLOCK_ROWS · BLOCK_N).
MAX_TILE = 16384
# Chunk of the final mean over rows.
MEAN_BLOCK = 1024
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(v) = exp2(v · log2 e)


@triton.jit
def _exp(v):
    """exp(v) as exp2(v · log2 e): see the module docstring for why."""
    return tl.math.exp2(v * LOG2E)


@triton.jit
def _row_loss_kernel(x_ptr, t_ptr, loss_ptr, n_rows, n_cols,
                     BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    # Rows past the end re-read the last row (no mask on the loads); not stored.
    safe_rows = tl.minimum(rows, n_rows - 1)
    offs_row = safe_rows.to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK_N)
    # Running row max m and sum s of exp(x − m), one chunk at a time (one exp per element:
    # the rescale exp(m_old − m_new) is per row, not per lane).
    m = tl.full([BLOCK_ROWS], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_ROWS], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        x = tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        # A row with nothing finite yet (leading logits masked with -inf) has m_new -inf,
        # and x − m_new would be NaN: shift by 0 there (every term is then 0).
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * _exp(m - shift) + tl.sum(_exp(x - shift[:, None]), axis=1)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(t_ptr + safe_rows)
    x_t = tl.load(x_ptr + safe_rows.to(tl.int64) * n_cols + target).to(tl.float32)
    tl.store(loss_ptr + rows, lse - x_t, mask=row_ok)


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
def _online_lse(m, s, x):
    """The running max m and sum s of exp(· − m) after one more chunk x (1-D, float32). A
    row with nothing finite yet (leading logits masked with -inf) keeps m -inf and s 0
    instead of NaN: the shift is 0 until a finite logit arrives."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s * _exp(m - shift) + tl.sum(_exp(x - shift), axis=0)


@triton.jit
def _aligned_row_loss_kernel(x_ptr, t_ptr, loss_ptr, n_cols, n_total, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    """The row losses of rows that start off a 16-byte boundary (module docstring); ALIGN:
    elements in 16 bytes, n_total: elements in the logits."""
    row = tl.program_id(0)
    row_start = row.to(tl.int64) * n_cols  # int64: rows · cols may pass 2³¹
    base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
    head = (row_start - base).to(tl.int32)
    end = head + n_cols
    last = (end - 1) // BLOCK_N  # the last chunk; chunks 1 .. last-1 lie inside the row
    cols = tl.arange(0, BLOCK_N)
    m, s = _online_lse(float("-inf"), 0.0, _chunk(x_ptr, base, cols, head, end, n_total, True))
    for k in range(1, last):
        m, s = _online_lse(m, s, _chunk(x_ptr, base, k * BLOCK_N + cols, head, end, n_total, False))
    if last > 0:
        m, s = _online_lse(m, s, _chunk(x_ptr, base, last * BLOCK_N + cols, head, end, n_total, True))
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
    align = max(1, 16 // logits.element_size())
    if n_cols % align:
        # Rows off the 16-byte boundary: chunks from the boundary below each row's start, so
        # that the loads inside the row are 16 bytes wide (+ align: the first chunk starts up
        # to align - 1 lanes early).
        block_n = min(CONFIG["ODD_BLOCK_N"], triton.next_power_of_2(n_cols + align))
        _aligned_row_loss_kernel[(n_rows,)](logits, targets.contiguous(), losses, n_cols, logits.numel(),
                                            BLOCK_N=block_n, ALIGN=align,
                                            num_warps=CONFIG["num_warps"], num_stages=CONFIG["ODD_STAGES"])
        _mean_kernel[(1,)](losses, out, n_rows, BLOCK=MEAN_BLOCK, num_warps=4)
        return out
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols))
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    _row_loss_kernel[(triton.cdiv(n_rows, block_rows),)](
        logits, targets.contiguous(), losses, n_rows, n_cols,
        BLOCK_ROWS=block_rows, BLOCK_N=block_n,
        num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    _mean_kernel[(1,)](losses, out, n_rows, BLOCK=MEAN_BLOCK, num_warps=4)
    return out
