"""A model's forward timed in the modes people deploy it in, each with and without plugs.

Used by verification (``verify_model.py``). The modes:

- ``eager``: the model called as it is;
- ``cudagraph``: one forward captured into a CUDA graph and replayed (warm-up on a side
  stream first, then capture; the model's inputs are the same tensors at every call, so
  they are the graph's static inputs);
- ``compile``: ``torch.compile(model)``;
- ``reduce-overhead``: ``torch.compile(model, mode="reduce-overhead")`` (inductor's CUDA
  graphs).

Timing, in every mode alike: a plain loop of forwards and one synchronize, divided by the
count (``../shared/GPU.md``: ``triton.testing.do_bench`` misreads a host-paced model,
measured at 12.1 ms for a forward that a loop read at 10.46 ms). Each prepared variant
keeps its own outputs: no mode reuses another mode's.
"""

import contextlib
import time

import torch

MODES = ("eager", "cudagraph", "compile", "reduce-overhead")
"""Every deploy mode, in the order tables list them."""

GPU_ONLY = ("cudagraph", "reduce-overhead")
"""Modes that need a GPU (CUDA graphs)."""

WARMUP = 3
"""Forwards before a capture or a timing: Triton compiles, the launchers record, inductor
autotunes, the allocator settles."""

TARGET_MS = 100.0
"""About how long one timing's loop lasts: long enough that one synchronize and the
host's jitter are small beside it."""


def _sync(on_gpu):
    if on_gpu:
        torch.cuda.synchronize()


class Prepared:
    """One variant of the model in one mode, ready to run: ``run()`` does one forward and
    returns its output (a tensor of this variant's own). ``close()`` releases what it holds
    (a graph, a compiled module, installed plugs)."""

    def __init__(self, run, out, stack):
        self.run, self.out, self._stack = run, out, stack

    def close(self):
        self._stack.close()


def prepare(mode, net, call, install, on_gpu):
    """`net` in `mode`, with what `install()` (a context manager) plugs in for the whole
    life of the variant (eager and compile run it) or for the capture only (a CUDA graph
    holds the kernels it captured). `call(model)` runs one forward. Raises what the mode
    raises (a kernel that breaks capture or compilation): the caller says which."""
    stack = contextlib.ExitStack()
    try:
        if mode == "eager":
            stack.enter_context(install())
            first = call(net)

            def run():
                return call(net)
        elif mode == "cudagraph":
            with install():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(WARMUP):
                        call(net)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = call(net)
            stack.callback(lambda: graph.reset())
            graph.replay()
            first = captured

            def run():
                graph.replay()
                return captured
        elif mode in ("compile", "reduce-overhead"):
            # each compiled variant from scratch: dynamo's cache is per code object, and a
            # graph traced with other plugs installed must not be reused for this variant
            torch._dynamo.reset()
            stack.enter_context(install())
            compiled = torch.compile(net, mode=None if mode == "compile" else "reduce-overhead")
            for _ in range(WARMUP):
                compiled_out = call(compiled)
            first = compiled_out
            stack.callback(torch._dynamo.reset)

            def run():
                return call(compiled)
        else:
            raise ValueError(f"unknown deploy mode {mode!r}; expected one of {', '.join(MODES)}")
        _sync(on_gpu)
        return Prepared(run, _clone(first), stack)
    except BaseException:
        stack.close()
        raise


def _clone(out):
    """The first tensor of `out`, cloned (a CUDA graph's output is overwritten by its next
    replay; the check must see this variant's own)."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, dict) or hasattr(out, "values"):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for item in out:
            t = _clone(item)
            if t is not None:
                return t
    return None


def _gpu_lease():
    """The bench worker's GPU lease (`harness.gpu_lease`: no other worker of autokernel's
    runs GPU work while it is held, docs/bench.md); a no-op outside a worker."""
    try:
        import harness
    except ImportError:
        return contextlib.nullcontext()
    return harness.gpu_lease()


def loop_ms(run, on_gpu, count):
    """Milliseconds per forward of `count` forwards in a plain loop, one synchronize, under
    the GPU lease on the GPU (a spare worker warming up would stretch it otherwise)."""
    with _gpu_lease() if on_gpu else contextlib.nullcontext():
        _sync(on_gpu)
        t0 = time.perf_counter()
        for _ in range(count):
            run()
        _sync(on_gpu)
        return (time.perf_counter() - t0) * 1e3 / count


def kernel_launches(run):
    """The GPU kernels one call of ``run()`` launches (``call_sites.kernel_launches`` of a
    torch.profiler recording of it: a CUDA graph's replay counts the kernels it holds), or
    None where the profiler cannot say (it raised). Taken after a variant's timing rounds,
    so that the recording never overlaps a timing."""
    import call_sites

    try:
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        return call_sites.kernel_launches(prof)
    except Exception:  # noqa: BLE001 - a count is a figure for the table, never a verdict
        return None


def loop_count(run, on_gpu):
    """Forwards per timing so that one lasts about ``TARGET_MS`` (at least 3, at most 1000),
    from one timed forward after a warm-up."""
    for _ in range(WARMUP):
        run()
    one = max(loop_ms(run, on_gpu, 1), 1e-3)
    return int(min(1000, max(3, TARGET_MS / one)))
