"""Kernels written by ``autokernel export`` for one model, installed with ``optimize(model)``.

    import torch, <this package> as kernels
    report = kernels.optimize(model)       # this model instance: the plugs, the operators
    model = torch.compile(model)           # optional: no graph break at the kernels
    report.undo()                          # the model as it was

``manifest.json`` beside this file lists the kernels (target, kind, parameters, shapes,
dtype), the model they were verified in, and the GPU, torch and triton of that verification.
"""

import os

from ._autokernel.deploy import Report

MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.json")
"""This package's manifest."""


def optimize(model, *, allow_training=False, contexts=None, verbose=True) -> Report:
    """Installs this package's kernels into `model` (this instance only) and returns what it
    replaced and left, with why; ``report.undo()`` restores the model.

    A model in training mode is left as it is (the kernels have no backward) unless
    `allow_training`; calls made while gradients are needed run the model's own code.
    `contexts`: where the kernels take calls, any of ``"eager"``, ``"cudagraph"`` (while a
    CUDA graph captures) and ``"compile"`` (while torch.compile traces); by default every
    one but those where the verification measured the model slower with them.
    Warns when the GPU, torch or triton differ from those the kernels were verified with.
    `verbose` prints the report."""
    from ._autokernel import deploy

    return deploy.optimize(model, MANIFEST, allow_training=allow_training,
                           contexts=contexts, verbose=verbose)


__all__ = ["optimize", "Report", "MANIFEST"]
