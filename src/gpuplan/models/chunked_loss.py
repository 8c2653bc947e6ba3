"""Losses that project the LM head themselves: torchtune's chunked output loss (``--loss chunked-ce``)
and Liger's fused linear cross entropy (``--loss fused-linear-ce``).

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

``--loss fused-linear-ce`` runs Liger-Kernel's ``LigerFusedLinearCrossEntropyFunction`` on the same
tap (linkedin/Liger-Kernel ``src/liger_kernel/ops/fused_linear_cross_entropy.py`` @ 00eba634,
``fused_linear_cross_entropy_forward``): no full-vocabulary logits exist. The tokens (B·T rows of the
hidden state) are cut into chunks of ``next_power_of_2(ceil(BT / ceil(V / H)))`` rows, so one chunk's
logits hold about BT·H elements; per chunk the logits are projected (into one reused buffer when the
matmul needs no autocast cast), Liger's Triton kernel overwrites them in place with the loss and the
gradient of the logits, and the gradients of the hidden state (``grad_input``, a BT×H buffer made up
front) and of the head's weight (``grad_weight``, accumulated with ``addmm(out=...)`` when the
gradient is 16-bit, else through an fp32 product) are computed right there, in the forward; backward
only hands them on (scaled in place). The Triton kernel is modelled as one in-place op
(``gpuplan::liger_cross_entropy_``: its fake kernel allocates nothing, its CPU kernel computes the
values); so is the fp32-accumulating ``addmm(out_dtype=float32)`` (``gpuplan::accumulate_mm_``).
"""

from __future__ import annotations

import contextlib
import functools
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


FUSED_ASSUMPTION = ("loss: Liger's fused linear cross entropy (no full-vocabulary logits; tokens in chunks of "
                    "next_power_of_2(ceil(BT / ceil(V / H))) rows, the gradients of the hidden state and of the LM "
                    "head computed chunk by chunk in the forward; Liger's kernels as on sm_80 or newer)")

HEAD_LOSSES: tuple[str, ...] = ("chunked-ce", "fused-linear-ce")
"""Losses that take the LM head's projection out of the model's forward (:func:`install`)."""


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


def install(model: nn.Module, model_name: str, loss: str = "chunked-ce") -> None:
    """Make ``model``'s forward leave its LM head's projection to :func:`chunked_ce_loss`."""
    head = _output_head(model)
    if head is None:
        raise ConfigError(f"--loss {loss}: {model_name} has no LM output head (get_output_embeddings) to "
                          "project in chunks; use --loss auto")
    if head not in _TAPS:
        _TAPS[head] = _HeadTap(head)


def shifted_labels(input_ids: torch.Tensor) -> torch.Tensor:
    """The recipe's targets: each position predicts the next token; the last one is ignored."""
    import torch

    pad = torch.full((input_ids.shape[0], 1), IGNORE_INDEX, dtype=input_ids.dtype)
    return torch.cat([input_ids[:, 1:], pad], dim=1)


def _tapped(model: nn.Module, model_name: str, loss: str) -> tuple[nn.Module, _HeadTap, torch.Tensor]:
    """The LM head, its tap and the hidden state the forward left at it."""
    head = _output_head(model)
    tap = _TAPS.get(head) if head is not None else None
    hidden = tap.take() if tap is not None else None
    if head is None or tap is None or hidden is None:
        raise ConfigError(f"--loss {loss}: the forward of {model_name} never reached its LM head; use --loss auto")
    return head, tap, hidden


def chunked_ce_loss(model: nn.Module, labels: torch.Tensor, model_name: str) -> torch.Tensor:
    """``CEWithChunkedOutputLoss(chunked_output(h), labels)`` on the hidden state the forward left."""
    import torch.nn.functional as F

    head, tap, hidden = _tapped(model, model_name, "chunked-ce")
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


def liger_chunk_rows(rows: int, hidden: int, vocab: int) -> int:
    """Liger's tokens per chunk (``chunk_mem_const`` 1): the transient logits of one chunk hold about
    ``rows × hidden`` elements — ``next_power_of_2(ceil(rows / ceil(vocab / hidden)))``, at most ``rows``."""
    inc_factor = -(-vocab // hidden)
    wanted = -(-rows // inc_factor)
    return min(1 << (wanted - 1).bit_length(), rows)


def fused_linear_ce_loss(model: nn.Module, labels: torch.Tensor, model_name: str, *,
                         autocast: bool) -> torch.Tensor:
    """``LigerFusedLinearCrossEntropyFunction(h.view(-1, H), lm_head.weight, labels.view(-1))`` on the
    hidden state the forward left (as Liger's ``LigerForCausalLMLoss`` calls it); ``autocast``: the
    forward runs under mixed precision (Liger then projects each chunk into a fresh tensor)."""
    import torch

    head, _tap, hidden = _tapped(model, model_name, "fused-linear-ce")
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or getattr(head, "bias", None) is not None:
        raise ConfigError(f"--loss fused-linear-ce: the LM head of {model_name} is not one bias-free linear weight "
                          "(Liger projects lm_head.weight alone); use --loss chunked-ce")
    rows = hidden.reshape(-1, hidden.shape[-1])
    del hidden
    loss: torch.Tensor = _fused_function().apply(rows, weight, labels.reshape(-1), autocast)
    return loss


@functools.cache
def _kernels() -> tuple[Any, Any]:
    """Liger's Triton cross-entropy kernel and the fp32-accumulating ``addmm(out=...)`` as in-place custom
    ops: one op each in the trace, allocating nothing (fake kernels); the CPU kernels compute the values."""
    import torch

    # explicit schemas: this module's annotations are strings (``from __future__ import annotations``)
    @torch.library.custom_op("gpuplan::liger_cross_entropy_", mutates_args=("logits", "loss"),
                             schema="(Tensor(a!) logits, Tensor target, Tensor(b!) loss, Tensor n_non_ignore) -> ()")
    def liger_cross_entropy_(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor,
                             n_non_ignore: torch.Tensor) -> None:
        x = logits.float()
        valid = target != IGNORE_INDEX
        safe = target.clamp(min=0).unsqueeze(1)
        count = n_non_ignore.clamp(min=1).to(torch.float32)
        lse = torch.logsumexp(x, dim=-1)
        per_token = (lse - x.gather(1, safe).squeeze(1)) / count  # reduction "mean": over non-ignored tokens
        loss.copy_(torch.where(valid, per_token, torch.zeros_like(per_token)))
        grad = torch.softmax(x, dim=-1).scatter_add_(1, safe, -torch.ones_like(safe, dtype=x.dtype))
        logits.copy_(grad / count * valid.unsqueeze(1))

    @liger_cross_entropy_.register_fake
    def _(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor, n_non_ignore: torch.Tensor) -> None:
        return None

    @torch.library.custom_op("gpuplan::accumulate_mm_", mutates_args=("acc",),
                             schema="(Tensor(a!) acc, Tensor a, Tensor b) -> ()")
    def accumulate_mm_(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        acc.add_(torch.mm(a.float(), b.float()).to(acc.dtype))

    @accumulate_mm_.register_fake
    def _(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        return None

    return liger_cross_entropy_, accumulate_mm_


@functools.cache
def _fused_function() -> Any:
    """``LigerFusedLinearCrossEntropyFunction`` (reduction mean, no bias, no z-loss, ``accum_dtype`` None)."""
    import torch

    ce_kernel, accumulate_mm = _kernels()
    half = (torch.float16, torch.bfloat16)

    class FusedLinearCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, rows: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                    autocast: bool) -> torch.Tensor:
            count, hidden = rows.shape
            chunk = liger_chunk_rows(count, hidden, weight.shape[0])
            grad_input = torch.zeros_like(rows)
            grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
            loss_1d = torch.zeros(count, dtype=torch.float32)
            n_non_ignore = (target != IGNORE_INDEX).sum()  # Liger reads it with .item()
            # _can_use_mm_out: one logits buffer reused when the matmul needs no autocast cast
            use_mm_out = rows.dtype == weight.dtype and not (autocast and rows.dtype == torch.float32)
            storage = torch.empty((chunk, weight.shape[0]), dtype=rows.dtype) if use_mm_out else None
            for start in range(0, count, chunk):
                end = min(start + chunk, count)
                rows_chunk = rows[start:end]
                if storage is not None:
                    logits = storage[: end - start]
                    torch.mm(rows_chunk, weight.t(), out=logits)
                else:
                    logits = rows_chunk @ weight.t()
                ce_kernel(logits, target[start:end], loss_1d[start:end], n_non_ignore)  # logits := their gradient
                if use_mm_out and logits.dtype == grad_input.dtype:
                    torch.mm(logits, weight, out=grad_input[start:end])
                else:
                    grad_input[start:end] = logits @ weight
                if grad_weight is not None:
                    grad_t = logits.t()
                    if grad_t.dtype in half and grad_weight.dtype in (torch.float32, grad_t.dtype):
                        operand = rows_chunk if rows_chunk.dtype == grad_t.dtype else rows_chunk.to(grad_t.dtype)
                        accumulate_mm(grad_weight, grad_t, operand)
                        del operand
                    else:  # Liger's fallback: a weight-sized product, then summed in
                        grad_weight += torch.mm(grad_t, rows_chunk).float()
                    del grad_t
                del logits, rows_chunk
            del storage
            loss = torch.sum(loss_1d)
            if grad_weight is not None:
                grad_weight = grad_weight.to(weight.dtype)
            ctx.save_for_backward(grad_input.detach(), grad_weight.detach() if grad_weight is not None else None)
            return loss

        @staticmethod
        def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
            grad_input, grad_weight = ctx.saved_tensors
            # Liger skips this when grad_output is 1 (a value fake tensors cannot read): in place either way
            grad_input.mul_(grad_output)
            if grad_weight is not None:
                grad_weight.mul_(grad_output)
            return grad_input, grad_weight, None, None

    return FusedLinearCrossEntropy


__all__ = ["ASSUMPTION", "FUSED_ASSUMPTION", "HEAD_LOSSES", "IGNORE_INDEX", "NUM_OUTPUT_CHUNKS", "chunked_ce_loss",
           "fused_linear_ce_loss", "install", "liger_chunk_rows", "shifted_labels"]
