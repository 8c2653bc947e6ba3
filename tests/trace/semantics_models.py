"""User-model factories for tests/trace/test_semantics_regressions.py (``file.py:factory`` sources)."""

from __future__ import annotations

import torch
from torch import nn


def tiny_vit() -> nn.Module:
    """torchvision's ViT (``nn.MultiheadAttention`` blocks) at a size a CPU trace takes in seconds."""
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                             num_classes=10)


class _MaskedSelection(nn.Module):
    """Boolean-mask indexing, ``masked_select``, masked assignment and ``nonzero``: data-dependent
    shapes. Every mask selects every element (``y == y``), so a real run meets the worst case."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        everything = y == y
        picked = y[everything]
        selected = torch.masked_select(y, everything)
        z = y.clone()
        z[everything] = 0.0
        return picked.sum() + selected.sum() + z.sum() + torch.nonzero(everything).sum() * 0


def masked_selection() -> nn.Module:
    return _MaskedSelection()


def masked_inputs(batch_size: int = 4) -> torch.Tensor:
    return torch.randn(batch_size, 8)
