"""`--inputs` functions for the attention tests: padded batches."""

import torch


def bert(model):
    """Two sequences of 16 token ids, the second padded after 12 tokens."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return (ids,), {"attention_mask": mask}
