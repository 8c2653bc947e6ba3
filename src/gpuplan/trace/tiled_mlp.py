"""``--tiled-mlp``: Arctic Long Sequence Training's TiledMLP, traced as DeepSpeed runs it.

DeepSpeed's ``TiledMLP`` autograd function (deepspeedai/DeepSpeed
``deepspeed/runtime/sequence_parallel/ulysses_sp.py`` @ 016d2f70, the ALST components; ArcticTraining
patches HF MLPs with it) computes each block's MLP over tiles of the sequence: the forward runs the
MLP under ``no_grad`` on ``torch.chunk(x, shards, dim=-2)`` and concatenates the outputs, keeping only
its input ``x`` for backward; the backward recomputes the MLP tile by tile (over the flattened
``batch·seq`` rows) with grad enabled, accumulating each tile's input gradient in place into one
``zeros_like(x)`` (a tile's ``.grad`` is a narrow view of it) and the weights' gradients across tiles.
So the MLP's intermediates (gate, up, activation: batch·seq·ffn each) exist for one tile at a time.

Tiles: DeepSpeed's example and ArcticTraining use ``ceil(seqlen / hidden_size)`` per call (the tiles'
intermediates then stay near one hidden-state's size); ``--tiled-mlp N`` fixes N.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.workload import Workload

MLP_NAMES: tuple[str, ...] = ("mlp", "feed_forward")
"""Attribute names of a transformer block's MLP in transformers' models (Llama, Qwen, Mistral, GPT-2: ``mlp``;
Llama 4: ``feed_forward``)."""


def default_tiles(seq_len: int, hidden_size: int) -> int:
    """ArcticTraining's tile count: ``ceil(seqlen / hidden_size)`` (at least 1)."""
    return max(1, math.ceil(seq_len / hidden_size))


def tile_mlps(model: nn.Module, workload: Workload, model_name: str) -> int:
    """Route every block MLP of ``model`` through TiledMLP; returns how many were tiled."""
    mlps = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in MLP_NAMES]
    if not mlps:
        raise ConfigError(f"--tiled-mlp: {model_name} has no block MLP (a submodule named "
                          f"{' or '.join(MLP_NAMES)}) to tile; leave --tiled-mlp out")
    tiled = _tiled_function()
    fixed = workload.mlp_tiles
    for mlp in mlps:
        original = mlp.forward

        def forward(x: Any, *args: Any, __orig: Any = original, __mlp: Any = mlp, **kwargs: Any) -> Any:
            if args or kwargs:
                raise ConfigError(f"--tiled-mlp: {type(__mlp).__name__}.forward takes more than the hidden state; "
                                  "TiledMLP tiles single-input MLPs only")
            shards = fixed if fixed is not None else default_tiles(x.shape[-2], x.shape[-1])
            return tiled.apply(lambda _module, tile: _single(__orig(tile)), __mlp, x, shards)

        mlp.forward = forward  # type: ignore[method-assign]
    return len(mlps)


def _single(out: Any) -> Any:
    import torch

    if not isinstance(out, torch.Tensor):
        raise ConfigError("--tiled-mlp: this MLP returns more than one tensor (a mixture of experts with router "
                          "logits); TiledMLP tiles single-output MLPs only")
    return out


@functools.cache
def _tiled_function() -> Any:
    import torch

    class TiledMLP(torch.autograd.Function):
        """DeepSpeed's ``TiledMLP`` (without its ZeRO ``ds_grad_is_ready`` bookkeeping)."""

        @staticmethod
        def forward(ctx: Any, fn: Any, module: Any, x: torch.Tensor, shards: int) -> torch.Tensor:
            ctx.fn, ctx.module, ctx.shards = fn, module, shards
            ctx.save_for_backward(x)
            x_shards = list(torch.chunk(x, chunks=shards, dim=-2))
            with torch.no_grad():
                output_shards = [fn(module, x_shard) for x_shard in x_shards]
            return torch.cat(output_shards, dim=-2)

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
            (x,) = ctx.saved_tensors
            x_requires_grad = x.requires_grad
            x = x.detach()
            x.requires_grad_(x_requires_grad)
            hidden_size = x.shape[-1]
            shape = x.shape
            # flattened rows, as DeepSpeed does (no stride trouble narrowing the sequence with batch > 1)
            x = x.view(-1, hidden_size)
            incoming = grads[0].view(-1, hidden_size)
            x_grad = torch.zeros_like(x)
            x_shards = list(torch.chunk(x, chunks=ctx.shards, dim=0))
            for i, x_shard in enumerate(x_shards):
                x_shard.requires_grad_(x_requires_grad)
                step = x_shard.shape[0]
                offset = i * x_shards[0].shape[0]
                x_shard.grad = x_grad.narrow(0, offset, step).view_as(x_shard)
                incoming_shard = incoming.narrow(0, offset, step).view_as(x_shard)
                with torch.enable_grad():
                    output = ctx.fn(ctx.module, x_shard)
                torch.autograd.backward(output, incoming_shard)
            return None, None, x_grad.view(shape), None

    return TiledMLP


__all__ = ["MLP_NAMES", "default_tiles", "tile_mlps"]
