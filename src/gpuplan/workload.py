"""The workload: what one step of the user's program does (mode, shapes, precision, techniques).

Strings from the command line or the Python API are converted here, once, so a bad value fails
before any tracing starts, with a one-line message naming the value and what is allowed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from gpuplan.errors import ConfigError, require_choice

Mode = Literal["train", "infer", "generate"]
Precision = Literal["fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16"]
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "none"]
Checkpointing = Literal["none", "full", "selective"]
Attention = Literal["auto", "eager", "sdpa-math", "sdpa-efficient", "flash"]
OptimizerImpl = Literal["auto", "foreach", "fused", "for-loop"]
ZeroGrad = Literal["set-to-none", "zeros"]
Loss = Literal["auto", "cross-entropy", "mean"]
WeightQuant = Literal["none", "int8", "fp8", "int4"]
"""Weight-only quantization of inference weights (layout: gpuplan.memory.weight_quant)."""
ModuleLoading = Literal["lazy", "eager"]
"""CUDA module loading: lazy (CUDA >= 11.7, the default) or eager (older stacks)."""

MODES: tuple[str, ...] = ("train", "infer", "generate")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "none")
CHECKPOINTING: tuple[str, ...] = ("none", "full", "selective")
ATTENTIONS: tuple[str, ...] = ("auto", "eager", "sdpa-math", "sdpa-efficient", "flash")
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "foreach", "fused", "for-loop")
ZERO_GRADS: tuple[str, ...] = ("set-to-none", "zeros")
LOSSES: tuple[str, ...] = ("auto", "cross-entropy", "mean")
WEIGHT_QUANTS: tuple[str, ...] = ("none", "int8", "fp8", "int4")
MODULE_LOADINGS: tuple[str, ...] = ("lazy", "eager")

# Upper bounds that no real workload reaches: they turn typos (an extra 000) into clear errors
# instead of a trace that allocates symbolic exabytes or runs for hours.
MAX_BATCH_SIZE = 1 << 20
MAX_SEQ_LEN = 1 << 24  # 16M tokens
MAX_IMAGE_SIZE = 16384
MAX_NEW_TOKENS = 1 << 20
MAX_GRAD_ACCUM = 1 << 16


def _check_range(name: str, value: int, low: int, high: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} {value} is out of range: allowed {low}..{high}; {hint}")
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """One step of a training or inference program.

    ``batch_size`` is the micro-batch that one forward sees; with ``grad_accum`` k the optimizer
    steps once every k micro-batches (effective batch k·batch_size).
    """

    mode: Mode = "train"
    batch_size: int = 1
    seq_len: int | None = None
    """Tokens per sample (prompt length for generate); None: the model's default."""
    image_size: int | None = None
    """Image side in pixels for vision models; None: the model's default."""
    new_tokens: int = 128
    """Decode steps after the prompt in generate mode."""
    precision: Precision = "fp32"
    optimizer: Optimizer = "adamw"
    checkpointing: Checkpointing = "none"
    grad_accum: int = 1
    attention: Attention = "auto"
    optimizer_impl: OptimizerImpl = "auto"
    zero_grad: ZeroGrad = "set-to-none"
    loss: Loss = "auto"

    def __post_init__(self) -> None:
        require_choice("mode", self.mode, MODES)
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("checkpointing mode", self.checkpointing, CHECKPOINTING)
        require_choice("attention implementation", self.attention, ATTENTIONS)
        require_choice("optimizer implementation", self.optimizer_impl, OPTIMIZER_IMPLS)
        require_choice("zero_grad mode", self.zero_grad, ZERO_GRADS)
        require_choice("loss", self.loss, LOSSES)
        _check_range("batch size", self.batch_size, 1, MAX_BATCH_SIZE, "use a batch size of at least 1")
        if self.seq_len is not None:
            _check_range("sequence length", self.seq_len, 1, MAX_SEQ_LEN, "pass tokens per sample")
        if self.image_size is not None:
            _check_range("image size", self.image_size, 8, MAX_IMAGE_SIZE, "pass the image side in pixels")
        _check_range("new tokens", self.new_tokens, 0 if self.mode != "generate" else 1, MAX_NEW_TOKENS,
                     "pass how many tokens to generate")
        _check_range("grad accumulation", self.grad_accum, 1, MAX_GRAD_ACCUM, "use 1 for no accumulation")
        if self.mode != "train" and self.grad_accum != 1:
            raise ConfigError(f"--grad-accum {self.grad_accum} applies to --mode train only, not {self.mode}")

    @property
    def trains(self) -> bool:
        return self.mode == "train"

    @property
    def autocast_dtype(self) -> str | None:
        """'bfloat16' / 'float16' under AMP, else None."""
        return {"amp-bf16": "bfloat16", "amp-fp16": "float16"}.get(self.precision)

    @property
    def param_dtype(self) -> str:
        """dtype of the parameters as the model holds them."""
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.precision, "float32")

    def with_(self, **changes: Any) -> Workload:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_workload(**fields: Any) -> Workload:
    """A Workload from keyword fields; an unknown field is a one-line ConfigError."""
    known = set(Workload.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown workload field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(known))})")
    return Workload(**fields)
