"""nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1) on x [batch_size, in_channels, height, width]."""
import torch
import torch.nn as nn

batch_size = 16
in_channels = 16
out_channels = 16
height = 16
width = 16
kernel_size = 3
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
