"""Mean squared error mean((pred - target)^2) of two [batch_size, dim] tensors, a scalar."""
import torch
import torch.nn as nn

batch_size = 64
dim = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return torch.mean((pred - target) ** 2)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
