"""torchtune's chunked output loss for causal LMs (``--loss chunked-ce``).

torchtune's fine-tuning recipes never form the full-vocabulary logits in fp32. The decoder returns
its output projection in ``num_output_chunks`` pieces (``TransformerDecoder.chunked_output``:
``[self.output(chunk) for chunk in h.chunk(num_output_chunks, dim=1)]``, all chunks alive at once,
in the model's dtype) and ``CEWithChunkedOutputLoss`` upcasts one chunk at a time to fp32 for a
summed cross entropy, divided by the count of labels that are not ``ignore_index``. The recipe
shifts the labels left by one and pads the last position with ``ignore_index``. Sources (pytorch/
torchtune): ``torchtune/modules/transformer.py`` ``chunked_output`` and
``torchtune/modules/loss/ce_chunked_output_loss.py`` (read at commit 10ff7cd; unchanged in what
is modelled here since the README's measurements at 0031bfb), ``recipes/lora_finetune_single_device.py``.

transformers' causal LMs apply their LM head inside ``forward``; to run torchtune's program on the
same model, a forward pre-hook on the head (installed once the model is wrapped, e.g. by PEFT) takes
the final hidden state and hands the head an empty slice, so the forward's own logits hold no
bytes; the loss then projects the hidden state chunk by chunk through the same head module (its
adapters included). Eager semantics: ``torch.compile`` of the chunk's cross entropy is not
modelled (see the assumptions the estimate states).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import nn

NUM_OUTPUT_CHUNKS = 8
"""torchtune's default (``CEWithChunkedOutputLoss(num_output_chunks=8)``), used by its recipes."""

IGNORE_INDEX = -100
"""torchtune's (and PyTorch's) label value that the loss skips."""

ASSUMPTION = (f"loss: torchtune's chunked output loss (the LM head in {NUM_OUTPUT_CHUNKS} chunks, all kept in the "
              "model's dtype; cross entropy upcast to fp32 one chunk at a time), run eager: each chunk's fp32 "
              "log-probabilities stay saved for backward (torchtune's torch.compile of the loss saves the chunk in the "
              "model's dtype and two fp32 values per token instead)")


class _HeadTap:
    """Catches the LM head's input during the model's forward and gives the head an empty slice
    of it instead; while :meth:`projecting`, calls pass through untouched."""

    def __init__(self, head: nn.Module) -> None:
        self.hidden: torch.Tensor | None = None
        self._passthrough = False
        head.register_forward_pre_hook(self._catch)

    def _catch(self, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if self._passthrough or not args:
            return None
        hidden = args[0]
        self.hidden = hidden
        return (hidden[..., :0, :], *args[1:])  # (batch, 0, hidden): the forward's logits are empty

    def take(self) -> torch.Tensor | None:
        hidden, self.hidden = self.hidden, None
        return hidden

    @contextlib.contextmanager
    def projecting(self) -> Iterator[None]:
        self._passthrough = True
        try:
            yield
        finally:
            self._passthrough = False


_TAPS: weakref.WeakKeyDictionary[nn.Module, _HeadTap] = weakref.WeakKeyDictionary()


def _output_head(model: nn.Module) -> nn.Module | None:
    """The model's LM head, through wrappers (PEFT forwards attributes; DDP-style wrappers hold ``.module``)."""
    from torch import nn

    inner: Any = model
    while getattr(inner, "get_output_embeddings", None) is None and isinstance(getattr(inner, "module", None),
                                                                                nn.Module):
        inner = inner.module
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, nn.Module) else None


def install(model: nn.Module, model_name: str) -> None:
    """Make ``model``'s forward leave its LM head's projection to :func:`chunked_ce_loss`."""
    head = _output_head(model)
    if head is None:
        raise ConfigError(f"--loss chunked-ce: {model_name} has no LM output head (get_output_embeddings) to "
                          "project in chunks; use --loss auto")
    if head not in _TAPS:
        _TAPS[head] = _HeadTap(head)


def shifted_labels(input_ids: torch.Tensor) -> torch.Tensor:
    """The recipe's targets: each position predicts the next token; the last one is ignored."""
    import torch

    pad = torch.full((input_ids.shape[0], 1), IGNORE_INDEX, dtype=input_ids.dtype)
    return torch.cat([input_ids[:, 1:], pad], dim=1)


def chunked_ce_loss(model: nn.Module, labels: torch.Tensor, model_name: str) -> torch.Tensor:
    """``CEWithChunkedOutputLoss(chunked_output(h), labels)`` on the hidden state the forward left."""
    import torch.nn.functional as F

    head = _output_head(model)
    tap = _TAPS.get(head) if head is not None else None
    hidden = tap.take() if tap is not None else None
    if head is None or tap is None or hidden is None:
        raise ConfigError(f"--loss chunked-ce: the forward of {model_name} never reached its LM head; "
                          "use --loss auto")
    with tap.projecting():
        # chunked_output: every chunk's logits, in the model's dtype, alive until the loss returns
        logits = [head(chunk) for chunk in hidden.tensor_split(NUM_OUTPUT_CHUNKS, dim=1)]
    del hidden
    total_elements = (labels != IGNORE_INDEX).sum()
    targets = [chunk.reshape(-1) for chunk in labels.tensor_split(NUM_OUTPUT_CHUNKS, dim=1)]
    flat = [chunk.reshape(-1, chunk.size(-1)) for chunk in logits]
    total: torch.Tensor | None = None
    for logits_chunk, targets_chunk in zip(flat, targets, strict=True):
        # compute_cross_entropy: one chunk upcast to fp32 at a time
        term = F.cross_entropy(logits_chunk.float(), targets_chunk, ignore_index=IGNORE_INDEX, reduction="sum")
        total = term if total is None else total + term
    assert total is not None  # NUM_OUTPUT_CHUNKS >= 1
    return total / total_elements


__all__ = ["ASSUMPTION", "IGNORE_INDEX", "NUM_OUTPUT_CHUNKS", "chunked_ce_loss", "install", "shifted_labels"]
