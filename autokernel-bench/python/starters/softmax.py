"""Row-wise softmax over the last dim of x [rows, cols].

Starter kernel of autokernel (kind `softmax`). Memory-bound: one read, one write. Each
program handles BLOCK_ROWS rows. A row of up to MAX_ROW_BLOCK columns is held in
registers (max, exp, sum, scale: one read). A wider row (a vocabulary, 50257) is read in
chunks of LOOP_BLOCK with an online softmax (running row max and sum, rescaled when the
max grows; Milakov & Gimelshein 2018), then read again to write the output, by programs of
LOOP_WARPS warps (the one-pass rows keep num_warps: a tuner that changes one path's warps
leaves the other's alone). Wide rows may run on a persistent grid of LOOP_PROGRAMS_PER_SM
programs per SM (0: one program per LOOP_ROWS rows); at 4096×50257 one program of 16
warps per row was faster than the persistent grid. LOOP_BLOCK 16384 suits rows that start
on a 16-byte boundary and not the others: the tuner chooses per shape (docs/benchmarks.md,
"What the session-5 comparisons changed"). All arithmetic in float32.

The wide rows' two passes tell the L2 what to keep: the first pass's loads are
`evict_last` (the second pass reads the row again), the second pass's loads `evict_first`
and its stores streaming (`.cs`: y is not read again here). That pays on rows that start
on a 16-byte boundary and leaves the others, whose loads are 2 bytes wide, level. Walking
the second pass last chunk first (the shortest reuse distance) helps the aligned rows
further and slows the others (docs/benchmarks.md, "Session 7").

Exponentials are exp2 of (x − max)·log2 e, which compiles to one multiply and one
`ex2.approx.ftz` (PTX ISA, "ex2"): `tl.exp` compiles to `ex2.approx` without flush-to-zero,
whose subnormal fix-up costs four more instructions per element on sm_90 (SASS of this
file). The wide rows' loop issues about one instruction per element less with each
instruction saved, and at 50257 columns the H200 ran it at the pace of its instruction
count (docs/benchmarks.md, "Instructions per element"). Flushing drops only results below
2⁻¹²⁶.

On the GPU (sm_80 and later) a wide row that fits in shared memory skips that loop: one
program of SMEM_WARPS warps copies the whole row into shared memory with `cp.async`, every
copy in flight at once and each 16 bytes wide from the 16-byte boundary at or below the
row's start (so odd widths are vectorised too), then makes three passes over shared memory
(a per-lane max, the sum of exponentials, the output), storing whole 16-byte vectors. x is
read from DRAM once and nothing counts on L2; two programs fit on an SM at 4096×50257
float16 (104 KiB each), one loading while the other writes. This brings wide rows, odd
widths included, near the copy bandwidth, where the loop above reads each row twice
(docs/benchmarks.md, "Session 8"). It is written in Gluon (Triton's explicit-layout
dialect), which Triton's CPU interpreter does not run: there, and for rows too wide for
shared memory or SMEM_CHUNK 0, the loop above runs instead.
"""

import os

import torch
import triton
import triton.language as tl

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    HAVE_GLUON = True
except ImportError:  # a Triton without Gluon's cp.async: wide rows take the loop
    HAVE_GLUON = False

KERNEL_KIND = "softmax"
# The shared-memory keys (SMEM_*) as measured at 4096x50257 float16; the loop keys (LOOP_*)
# as `autokernel tune` found them there, for rows that skip shared memory; the one-pass keys
# as measured at 8192x8192 (docs/benchmarks.md, "Session 8" and the session-5 comparisons).
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "LOOP_ROWS": 1, "LOOP_PROGRAMS_PER_SM": 0, "LOOP_WARPS": 16, "SMEM_CHUNK": 4096, "SMEM_WARPS": 16, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4],
    "LOOP_BLOCK": [4096, 8192, 16384],
    "LOOP_ROWS": [1, 2],
    "LOOP_PROGRAMS_PER_SM": [0, 3],
    "LOOP_WARPS": [8, 16, 32],
    "SMEM_CHUNK": [0, 2048, 4096, 8192],
    "SMEM_WARPS": [8, 16],
    "num_warps": [4, 8, 16],
    "num_stages": [1],
}

# Widest row (in elements, a power of two) held in registers by one program.
MAX_ROW_BLOCK = 16384
# Most float32 values one program holds at once (BLOCK_ROWS · block width).
MAX_TILE = 32768
_SM_COUNT = {}
_SMEM_BYTES = {}
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(v) = exp2(v · log2 e)


@triton.jit
def _exp(v):
    """exp(v) as exp2(v · log2 e): see the module docstring for why."""
    return tl.math.exp2(v * LOG2E)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_rows, n_cols,
                    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_ok = rows < n_rows
        # Rows past the end re-read the last row (no NaN, no mask on the loads); not stored.
        offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
        col_ok = cols < n_cols
        x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
        e = _exp(x - tl.max(x, axis=1)[:, None])
        y = e * (1.0 / tl.sum(e, axis=1))[:, None]
        tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    else:
        # Persistent: program pid handles row blocks pid, pid + programs, ...
        for rb in range(pid, tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0)):
            rows = rb * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            row_ok = rows < n_rows
            offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
            # Pass 1: running row max m and sum s of exp(x − m), one chunk at a time (one exp
            # per element: the rescale exp(m_old − m_new) is per row, not per lane).
            m = tl.full([BLOCK_ROWS], float("-inf"), tl.float32)
            s = tl.zeros([BLOCK_ROWS], tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf"), eviction_policy="evict_last").to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=1))
                # A row with nothing finite yet (leading columns masked with -inf) has m_new
                # -inf, and x − m_new would be NaN: shift by 0 there (every term is then 0).
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)
                s = s * _exp(m - shift) + tl.sum(_exp(x - shift[:, None]), axis=1)
                m = m_new
            # Pass 2: normalise and write (these rows were just read: mostly L2 hits, kept
            # there by the first pass's evict_last), with the division by s folded into the
            # exponent: exp(x − m) / s = exp2((x − m)·log2 e − log2 s).
            log2_s = tl.log2(s)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
                y = tl.math.exp2((x - m[:, None]) * LOG2E - log2_s[:, None])
                tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                         mask=row_ok[:, None] & col_ok[None, :], cache_modifier=".cs")


if HAVE_GLUON:
    GL_LOG2E = gl.constexpr(1.4426950408889634)  # log2(e), for the Gluon kernel

    @gluon.jit
    def _smem_row_kernel(x_ptr, y_ptr, n_cols, n_total,
                         CHUNK: gl.constexpr, N_CHUNKS: gl.constexpr, VEC: gl.constexpr):
        """One row per program, held in shared memory as N_CHUNKS chunks of CHUNK elements
        from the VEC-element (16-byte) boundary at or below the row's start."""
        layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
        smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [N_CHUNKS, CHUNK], smem_layout)
        j = gl.arange(0, CHUNK, layout)
        row_start = gl.program_id(0).to(gl.int64) * n_cols
        base = gl.multiple_of(row_start // VEC * VEC, VEC)
        head = (row_start - base).to(gl.int32)
        end = head + n_cols  # the row is lanes [head, end) counted from base
        # Every copy of the row in flight at once, one commit group per chunk. A chunk wholly
        # inside the tensor is copied unmasked (16-byte copies); the tensor's last one by loads.
        for k in gl.static_range(N_CHUNKS):
            if k * CHUNK < end:
                idx = base + k * CHUNK + j
                if base + (k + 1) * CHUNK <= n_total:
                    async_copy.async_copy_global_to_shared(smem.index(k), x_ptr + idx)
                else:
                    smem.index(k).store(gl.load(x_ptr + idx, mask=idx < n_total, other=0.0))
            async_copy.commit_group()
        # Pass 1, as each chunk lands: lanes outside the row become -inf (in shared memory too,
        # so the later passes need no mask), and a per-lane running max.
        mx = gl.full([CHUNK], float("-inf"), x_ptr.dtype.element_ty, layout)
        for k in gl.static_range(N_CHUNKS):
            async_copy.wait_group(N_CHUNKS - 1 - k)
            if k * CHUNK < end:
                x = smem.index(k).load(layout)
                if (k * CHUNK < head) | ((k + 1) * CHUNK > end):
                    lane = k * CHUNK + j
                    x = gl.where((lane >= head) & (lane < end), x, float("-inf"))
                    smem.index(k).store(x)
                # (bfloat16's maximum comes back as float32: cast back, exactly)
                mx = gl.maximum(mx, x).to(x_ptr.dtype.element_ty)
        m = gl.max(mx.to(gl.float32), axis=0)
        # A row with nothing finite (all -inf) has m -inf: shift by 0 there, not NaN. x − shift
        # is formed before the scaling by log2 e: x·log2 e − shift·log2 e (one FMA) would
        # carry the rounding of shift·log2 e, half an ulp of |m|·log2 e, into every exponent,
        # which at float32's `large` inputs (±1e15) made rows inf, NaN or zero.
        shift = gl.where(m == float("-inf"), 0.0, m)
        # Pass 2: the sum of exp(x − m), per lane, then once across the program.
        acc = gl.zeros([CHUNK], gl.float32, layout)
        for k in gl.static_range(N_CHUNKS):
            if k * CHUNK < end:
                acc += gl.exp2((smem.index(k).load(layout).to(gl.float32) - shift) * GL_LOG2E)
        log2_s = gl.log2(gl.sum(acc, axis=0))
        # Pass 3: normalise and write. Whole 16-byte vectors inside the row are stored 16 bytes
        # at a time (the mask, in whole vectors, keeps the stores vectorised); the row's first
        # and last partial vectors, if any, element by element from x (L2 hits).
        head_up = gl.multiple_of((head + VEC - 1) // VEC * VEC, VEC)
        end_down = gl.multiple_of(end // VEC * VEC, VEC)
        for k in gl.static_range(N_CHUNKS):
            if k * CHUNK < end:
                lane = k * CHUNK + j
                y = gl.exp2((smem.index(k).load(layout).to(gl.float32) - shift) * GL_LOG2E - log2_s).to(y_ptr.dtype.element_ty)
                if (k * CHUNK >= head_up) & ((k + 1) * CHUNK <= end_down):
                    gl.store(y_ptr + base + lane, y, cache_modifier=".cs")
                else:
                    gl.store(y_ptr + base + lane, y, mask=(lane >= head_up) & (lane < end_down), cache_modifier=".cs")
        v_layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
        v = gl.arange(0, 2 * VEC, v_layout)
        # Lanes [head, head_up) and [end_down, end): at most VEC − 1 each.
        lane = gl.where(v < VEC, head + v, end_down + v - VEC)
        edge = gl.where(v < VEC, lane < head_up, lane < end)
        xe = gl.load(x_ptr + base + lane, mask=edge, other=0.0).to(gl.float32)
        gl.store(y_ptr + base + lane, gl.exp2((xe - shift) * GL_LOG2E - log2_s).to(y_ptr.dtype.element_ty), mask=edge)


def _smem_bytes(dev):
    """Shared memory one program may opt in to on CUDA device dev, in bytes."""
    if dev not in _SMEM_BYTES:
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        _SMEM_BYTES[dev] = triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return _SMEM_BYTES[dev]


def _smem_chunks(x, n_cols):
    """Chunks of SMEM_CHUNK elements that `_smem_row_kernel` needs for a row of x, or 0
    where it does not apply: SMEM_CHUNK 0, a Triton without Gluon, off the GPU or before
    sm_80 (`cp.async`), under Triton's interpreter, x not 16-byte aligned (a view at an odd
    offset: the copies are 16 bytes wide), or a row too wide for shared memory."""
    # CONFIG is read only where the path can run: a key read elsewhere would be tuned for nothing
    if (not HAVE_GLUON or x.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
            or x.data_ptr() % 16 != 0 or torch.cuda.get_device_capability(x.device)[0] < 8):
        return 0
    chunk = CONFIG["SMEM_CHUNK"]
    if chunk == 0:
        return 0
    vec = 16 // x.element_size()
    n_chunks = triton.cdiv(n_cols + vec - 1, chunk)  # the row may start vec − 1 past the boundary
    # 1 KiB more for the reductions' scratch
    return n_chunks if n_chunks * chunk * x.element_size() + 1024 <= _smem_bytes(x.device) else 0


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    one_pass = full <= MAX_ROW_BLOCK
    n_chunks = 0 if one_pass else _smem_chunks(x, n_cols)
    if n_chunks:
        _smem_row_kernel[(n_rows,)](x, y, n_cols, x.numel(), CHUNK=CONFIG["SMEM_CHUNK"], N_CHUNKS=n_chunks,
                                    VEC=16 // x.element_size(), num_warps=CONFIG["SMEM_WARPS"])
        return y
    block_n = full if one_pass else min(CONFIG["LOOP_BLOCK"], full)
    rows_per_block = CONFIG["BLOCK_ROWS"] if one_pass else CONFIG["LOOP_ROWS"]
    block_rows = max(1, min(rows_per_block, MAX_TILE // block_n))
    grid = (triton.cdiv(n_rows, block_rows),)
    if not one_pass and CONFIG["LOOP_PROGRAMS_PER_SM"] > 0:
        # Persistent grid (LOOP_PROGRAMS_PER_SM 0: one program per row block): module docstring.
        dev = x.device
        if dev not in _SM_COUNT:
            _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
        grid = (min(grid[0], _SM_COUNT[dev] * CONFIG["LOOP_PROGRAMS_PER_SM"]),)
    _softmax_kernel[grid](x, y, n_rows, n_cols,
                          BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=one_pass,
                          num_warps=CONFIG["num_warps"] if one_pass else CONFIG["LOOP_WARPS"],
                          num_stages=CONFIG["num_stages"])
    return y
