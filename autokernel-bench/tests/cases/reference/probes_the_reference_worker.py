"""Tries to reach the trusted reference worker, whose process id the test writes in
(`REFERENCE_PID`): open any of its open files through `/proc/<pid>/fd` (its reply pipe and
payload area are among them) and open its memory (`/proc/<pid>/mem`); and the parent's
handle on the reference's payload area, through the parent's `/proc/<pid>/fd` (`PARENT_PID`,
the process that runs the judge). Raises at import with what it found, so the load stage's
reason says whether each was open or refused, and whether writing outside the scratch
folder was refused (Landlock in force)."""
import os

KERNEL_KIND = "rmsnorm"
CONFIG = {}
TUNABLES = {}
REFERENCE_PID = 0
PARENT_PID = 0


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


def _payload_areas(pid):
    """"open" when a payload area of the process (a memfd) can be opened for reading and
    writing (a candidate could then rewrite the reference the parent reads)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return "refused"
    found, opened, refused = 0, 0, 0
    for n in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError:
            refused += 1
            continue
        if "autokernel-payload" not in target:
            continue
        found += 1
        try:
            os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDWR))
            opened += 1
        except OSError:
            pass
    if opened:
        return "open"
    return "refused" if found or refused else "none found"


def _writes_outside():
    path = f"/tmp/autokernel-probe-{os.getpid()}"
    try:
        with open(path, "w"):
            pass
    except OSError:
        return "refused"
    os.remove(path)
    return "allowed"


_pid = REFERENCE_PID
raise RuntimeError(
    f"probe of pid {_pid}: alive: {os.path.exists(f'/proc/{_pid}/status')}, "
    f"fd: {_fds(_pid)}, mem: {_mem(_pid)}; "
    f"the parent's payload areas: {_payload_areas(PARENT_PID)}; "
    f"writes outside: {_writes_outside()}"
)


def kernel_fn(x, weight, eps=1e-6, weight_offset=0, cast_order="float32"):
    return x
