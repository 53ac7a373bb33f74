"""Wrong: forward raises SystemExit (a verdict, FAIL; the files after it are still judged)."""
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        raise SystemExit(0)
