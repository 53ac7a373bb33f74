"""Throughput of a pipe between two processes, as the judge's payloads cross it (a
candidate's outputs and the trusted reference, float32, up to 800 MB a case): 512 MB
written by a forked child in 8 MB writes and read by the parent, with Linux's default pipe
buffer and with 1 MiB (`F_SETPIPE_SZ`); and through shared memory as the judge now sends
them (the child copies into a memfd it mapped, the parent `pread`s it into its own
buffer, one after the other). Usage: `python3 benches/gpu/pipe_throughput.py`;
the figures are in docs/benchmarks.md ("the trusted reference worker")."""
import fcntl
import mmap
import os
import time

TOTAL = 512 * 1024 * 1024
CHUNK = 8 << 20
F_SETPIPE_SZ = 1031  # linux/fcntl.h; not in Python's fcntl module before 3.10 on every build


def rate_gb_s(pipe_bytes):
    data = bytearray(TOTAL)
    r, w = os.pipe()
    if pipe_bytes:
        fcntl.fcntl(r, F_SETPIPE_SZ, pipe_bytes)
    pid = os.fork()
    if pid == 0:
        os.close(r)
        view, sent = memoryview(data), 0
        while sent < TOTAL:
            sent += os.write(w, view[sent:sent + CHUNK])
        os._exit(0)
    os.close(w)
    buf = bytearray(TOTAL)
    view, got = memoryview(buf), 0
    t0 = time.perf_counter()
    while got < TOTAL:
        n = os.readv(r, [view[got:got + CHUNK]])
        if n == 0:
            break
        got += n
    elapsed = time.perf_counter() - t0
    os.waitpid(pid, 0)
    os.close(r)
    return got / elapsed / 1e9


def shared_rate_gb_s(rounds=3):
    """The best of `rounds` hand-overs through one memfd (its pages kept between rounds,
    as a worker's are between cases): the child's copy in plus the parent's copy out."""
    data = bytearray(TOTAL)
    fd = os.memfd_create("payload")
    os.ftruncate(fd, TOTAL)
    buf = bytearray(TOTAL)
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            with mmap.mmap(fd, TOTAL) as m:
                m[:] = data
            os._exit(0)
        os.waitpid(pid, 0)
        view, got = memoryview(buf), 0
        while got < TOTAL:
            got += os.preadv(fd, [view[got:got + CHUNK]], got)
        best = max(best, TOTAL / (time.perf_counter() - t0) / 1e9)
    os.close(fd)
    return best


if __name__ == "__main__":
    for size, label in ((None, "pipe, default buffer"), (1 << 20, "pipe, 1 MiB buffer")):
        print(f"{label}: {rate_gb_s(size):.2f} GB/s")
    print(f"memfd, copy in then pread: {shared_rate_gb_s():.2f} GB/s")
