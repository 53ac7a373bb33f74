"""Types into a terminal at import: opens `/dev/tty` (its controlling terminal, if it has
one) and the test's pseudo-terminal @TTY@ (standing for the user's), and pushes a line into
each one's input with TIOCSTI, which the user's shell would run once the tool returns.
Raises if a push worked, so that its PASS says every one was refused; raises too unless
TIOCSTI and TIOCLINUX on `/dev/null` are refused with EACCES, the sandbox's answer (the
kernel's own would be ENOTTY: the filter is seen to act even where the kernel would refuse
the push anyway). Computes a right answer otherwise."""
import errno
import fcntl
import os
import termios
import torch
import triton
import triton.language as tl
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

_typed = []
for _path in ("/dev/tty", "@TTY@"):
    try:
        _fd = os.open(_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        continue
    try:
        for _byte in b"touch typed\n":
            fcntl.ioctl(_fd, termios.TIOCSTI, bytes([_byte]))
        _typed.append(_path)
    except OSError:
        pass
    finally:
        os.close(_fd)
if _typed:
    raise RuntimeError(f"typed into {_typed}")
# TIOCLINUX is 0x541C where termios does not name it
_null = os.open("/dev/null", os.O_RDONLY)
try:
    for _cmd in (termios.TIOCSTI, getattr(termios, "TIOCLINUX", 0x541C)):
        try:
            fcntl.ioctl(_null, _cmd, b"\0")
        except OSError as e:
            if e.errno != errno.EACCES:
                raise RuntimeError(f"ioctl {_cmd:#x} reached the kernel ({e.strerror}): no filter refused it")
finally:
    os.close(_null)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def _softmax(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


def kernel_fn(x):
    return _softmax(x)
