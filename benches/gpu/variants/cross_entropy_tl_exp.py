"""The cross_entropy starter as it was before exp2 (commit dd7f0f5): `tl.exp`, whose
`ex2.approx.f32` carries a subnormal fix-up (benches/gpu/sass_probe.py), measured on the H200
in docs/benchmarks.md's table. Kept to time the starter against it in one run
(benches/gpu/pending.sh). Its own docstring follows.

Mean cross-entropy of logits [rows, vocab] against class ids targets [rows] (int64).

loss = mean over rows of (logsumexp(logits[r]) − logits[r, targets[r]]), a 0-dim float32.

Starter kernel of autokernel (kind `cross_entropy`). Memory-bound: the logits are read
once. Each program handles BLOCK_ROWS rows, reading them in chunks of up to BLOCK_N
columns with an online logsumexp (running row max and sum of exp, rescaled when the max
grows; Milakov & Gimelshein 2018), then gathers the target logit and writes one float32
loss per row. A second, one-program kernel sums the row losses in a fixed order and
divides by rows (deterministic: no atomics). All arithmetic in float32.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "cross_entropy"
CONFIG = {"BLOCK_ROWS": 1, "BLOCK_N": 4096, "num_warps": 4, "num_stages": 2}
TUNABLES = {
    "BLOCK_ROWS": [1, 2],
    "BLOCK_N": [1024, 2048, 4096, 8192],
    "num_warps": [4, 8, 16],
    "num_stages": [1, 2],
}

# Most float32 values one program holds at once (BLOCK_ROWS · BLOCK_N).
MAX_TILE = 16384
# Chunk of the final mean over rows.
MEAN_BLOCK = 1024


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
        x = tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))  # finite: every chunk has a real column
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(t_ptr + safe_rows)
    x_t = tl.load(x_ptr + safe_rows.to(tl.int64) * n_cols + target).to(tl.float32)
    tl.store(loss_ptr + rows, lse - x_t, mask=row_ok)


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
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols))
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    _row_loss_kernel[(triton.cdiv(n_rows, block_rows),)](
        logits, targets.contiguous(), losses, n_rows, n_cols,
        BLOCK_ROWS=block_rows, BLOCK_N=block_n,
        num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    _mean_kernel[(1,)](losses, out, n_rows, BLOCK=MEAN_BLOCK, num_warps=4)
    return out
