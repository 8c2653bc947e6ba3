"""User-model factories for the advise tests (``tests/advise/models.py:factory``): cheap to trace."""

from __future__ import annotations

import torch
from torch import nn


def wide_mlp() -> nn.Module:
    """~67M parameters: fp32 AdamW model state ≈ 1 GiB, activations tiny (ZeRO sharding matters)."""
    return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)])


def wide_mlp_inputs(batch_size: int = 1) -> torch.Tensor:
    return torch.randn(batch_size, 4096)
