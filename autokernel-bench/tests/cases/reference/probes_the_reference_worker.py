"""Tries to reach the trusted reference worker, whose process id the test writes in
(`REFERENCE_PID`): open any of its open files through `/proc/<pid>/fd` (its reply pipe is
one) and open its memory (`/proc/<pid>/mem`). Raises at import with what it found, so the load
stage's reason says whether each was open or refused."""
import os

KERNEL_KIND = "rmsnorm"
CONFIG = {}
TUNABLES = {}
REFERENCE_PID = 0


def _fds(pid):
    """"open" when any of the process's open files (its pipes among them) can be opened."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return "refused"
    opened = 0
    for n in names:
        try:
            os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDONLY | os.O_NONBLOCK))
            opened += 1
        except OSError:
            pass
    return "open" if opened else "refused"


def _mem(pid):
    try:
        open(f"/proc/{pid}/mem", "rb").close()
        return "open"
    except OSError:
        return "refused"


_pid = REFERENCE_PID
raise RuntimeError(
    f"probe of pid {_pid}: alive: {os.path.exists(f'/proc/{_pid}/status')}, "
    f"fd: {_fds(_pid)}, mem: {_mem(_pid)}"
)


def kernel_fn(x, weight, eps=1e-6, weight_offset=0, cast_order="float32"):
    return x
