"""Opens a connection to 127.0.0.1 at import (the test's listener, port @PORT@) and sends a
line; computes a right answer otherwise."""
import socket
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

try:
    with socket.create_connection(("127.0.0.1", @PORT@), timeout=5) as s:
        s.sendall(b"escaped\n")
except OSError:
    pass


def kernel_fn(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
