"""Throughput of a pipe between two processes, as the judge's payloads cross it (a
candidate's outputs and the trusted reference, float32, up to 800 MB a case): 512 MB
written by a forked child in 8 MB writes and read by the parent, with Linux's default pipe
buffer and with 1 MiB (`F_SETPIPE_SZ`); and the two copies through shared memory that
replaced the pipe (a worker copies into its mapped memfd, the parent `pread`s it into its
own buffer; the judge splits each over up to 8 threads). Usage: `python3 benches/gpu/pipe_throughput.py`;
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


def shared_rates_gb_s(rounds=3):
    """The best of `rounds` copies into a mapped memfd and `pread`s out of it, each on one
    thread, the memfd's pages kept between rounds as a worker's are between cases (the
    pages are the same whichever process maps them, so one process measures both sides)."""
    data = bytearray(TOTAL)
    fd = os.memfd_create("payload")
    os.ftruncate(fd, TOTAL)
    buf = bytearray(TOTAL)
    best_in, best_out = 0.0, 0.0
    with mmap.mmap(fd, TOTAL) as m:
        for _ in range(rounds):
            t0 = time.perf_counter()
            m[:] = data
            best_in = max(best_in, TOTAL / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            view, got = memoryview(buf), 0
            while got < TOTAL:
                got += os.preadv(fd, [view[got:got + CHUNK]], got)
            best_out = max(best_out, TOTAL / (time.perf_counter() - t0) / 1e9)
    os.close(fd)
    return best_in, best_out


if __name__ == "__main__":
    for size, label in ((None, "pipe, default buffer"), (1 << 20, "pipe, 1 MiB buffer")):
        print(f"{label}: {rate_gb_s(size):.2f} GB/s")
    copy_in, read_out = shared_rates_gb_s()
    print(f"memfd, one thread: copy in {copy_in:.2f} GB/s, pread out {read_out:.2f} GB/s")
