"""Gaming candidate for 01_relu: right answer from PyTorch's own torch.relu, no Triton kernel at all."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
