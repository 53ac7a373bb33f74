"""Starts a daemon at import: a grandchild in a session of its own (`setsid`, then a second
fork) running `sleep @MARKER@`, meant to outlive the evaluation; computes a right answer."""
import os
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

_pid = os.fork()
if _pid == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "@MARKER@"])
    finally:
        os._exit(0)
os.waitpid(_pid, 0)


def kernel_fn(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
