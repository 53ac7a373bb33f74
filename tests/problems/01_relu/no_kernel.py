"""Gaming candidate for 01_relu: the right answer from PyTorch's torch.clamp (another op than the reference's relu), no Triton kernel at all."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, min=0)
