"""Workload flags shared by estimate, fit, plan, recommend and measure (one definition)."""

from __future__ import annotations

import argparse
from typing import Any

from gpuplan.workload import (
    ATTENTIONS,
    CHECKPOINTING,
    LOSSES,
    MODES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
    ZERO_GRADS,
    Workload,
)


def _int(text: str) -> int:
    """Whole numbers, also written 1e3 or 1_000; range checks happen in Workload."""
    try:
        value = float(text.replace("_", "")) if any(c in text for c in "eE.") else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="catalog name (gpt2, llama-3.1-8b, resnet50, ...), config.json, .safetensors, "
                             "or path/to/file.py:factory[,inputs_factory]")


def add_workload_arguments(parser: argparse.ArgumentParser, *, default_mode: str = "train") -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--mode", default=default_mode, choices=MODES)
    g.add_argument("--batch-size", type=_int, default=1, metavar="N", help="micro-batch per forward (default 1)")
    g.add_argument("--seq-len", type=_int, default=None, metavar="N", help="tokens per sample (default: model's)")
    g.add_argument("--image-size", type=_int, default=None, metavar="N", help="image side in pixels")
    g.add_argument("--new-tokens", type=_int, default=128, metavar="N", help="tokens to generate (generate mode)")
    g.add_argument("--precision", default="fp32", metavar="P", help="|".join(PRECISIONS))
    g.add_argument("--optimizer", default="adamw", metavar="O", help="|".join(OPTIMIZERS))
    g.add_argument("--checkpointing", default="none", metavar="C", help="|".join(CHECKPOINTING))
    g.add_argument("--grad-accum", type=_int, default=1, metavar="K", help="micro-batches per optimizer step")
    g.add_argument("--attention", default="auto", metavar="A", help="|".join(ATTENTIONS))
    g.add_argument("--optimizer-impl", default="auto", metavar="I", help="|".join(OPTIMIZER_IMPLS))
    g.add_argument("--zero-grad", default="set-to-none", metavar="Z", help="|".join(ZERO_GRADS))
    g.add_argument("--loss", default="auto", metavar="L", help="|".join(LOSSES))


def workload_from_args(args: argparse.Namespace, **overrides: Any) -> Workload:
    fields = dict(
        mode=args.mode, batch_size=args.batch_size, seq_len=args.seq_len, image_size=args.image_size,
        new_tokens=args.new_tokens, precision=args.precision, optimizer=args.optimizer,
        checkpointing=args.checkpointing, grad_accum=args.grad_accum, attention=args.attention,
        optimizer_impl=args.optimizer_impl, zero_grad=args.zero_grad, loss=args.loss,
    )
    fields.update(overrides)
    return Workload(**fields)


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
