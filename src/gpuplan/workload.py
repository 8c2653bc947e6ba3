"""The workload: what one step of the user's program does (mode, shapes, precision, techniques).

Strings from the command line or the Python API are converted here, once, so a bad value fails
before any tracing starts, with a one-line message naming the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

from gpuplan.errors import ConfigError, require_choice

Mode = Literal["train", "infer", "generate"]
Precision = Literal["fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
"""fp8: torchao float8 training (Float8Linear on bf16 parameters; trace/float8.py); mxfp8 / nvfp4: the
block-scaled Blackwell recipes (torchao MX training, Transformer Engine NVFP4BlockScaling), traced as the
float8 program and re-priced (perf/scaled_formats.py)."""
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "paged-adamw",
                    "paged-adamw-8bit", "none"]
Checkpointing = Literal["none", "full", "selective", "selective-op"]
"""selective: save every matmul/conv/attention output, recompute the rest; selective-op: torchtitan's
op-level SAC (its save list; every second ``aten.mm`` recomputed: trace/runner.py)."""
Attention = Literal["auto", "eager", "sdpa-math", "sdpa-efficient", "flash"]
OptimizerImpl = Literal["auto", "foreach", "fused", "for-loop"]
ZeroGrad = Literal["set-to-none", "zeros"]
Loss = Literal["auto", "cross-entropy", "mean", "chunked-ce", "fused-linear-ce"]
"""chunked-ce: torchtune's chunked output projection + CEWithChunkedOutputLoss; fused-linear-ce: Liger's
LigerFusedLinearCrossEntropyFunction (no full-vocabulary logits; models/chunked_loss.py)."""
WeightQuant = Literal["none", "int8", "fp8", "int4"]
"""Weight-only quantization of inference weights (layout: gpuplan.memory.weight_quant)."""
Peft = Literal["none", "lora", "qlora", "dora"]
"""Parameter-efficient fine-tuning with the real ``peft`` library (trace/peft.py); qlora: LoRA on a
bitsandbytes NF4 base (double quantization, bf16 compute)."""
LoadIn = Literal["none", "4bit", "8bit"]
"""Base weights quantized at load (bitsandbytes): 4bit = NF4 + double quantization, 8bit = LLM.int8."""
PipelineOffload = Literal["none", "model", "sequential", "group"]
"""diffusers' inference offload of a pipeline: none, enable_model_cpu_offload (model),
enable_sequential_cpu_offload (sequential), block-level group offloading with streams (group)."""
ComponentQuant = Literal["none", "int8", "fp8", "fp8-storage"]
"""Weight format of a pipeline's quantized components besides bitsandbytes (--load-in-4bit/8bit): torchao int8 or
float8 weight-only (int8, fp8) or diffusers' layerwise casting (fp8-storage: fp8 weights, upcast to 16 bits layer
by layer)."""
ModuleLoading = Literal["lazy", "eager"]
"""CUDA module loading: lazy (CUDA >= 11.7, the default) or eager (older stacks)."""

MODES: tuple[str, ...] = ("train", "infer", "generate")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
SCALED_PRECISIONS: frozenset[str] = frozenset({"fp8", "mxfp8", "nvfp4"})
"""Training precisions whose linear layers run scaled low-precision GEMMs on bf16 parameters."""
MAX_HIGH_PRECISION_BLOCKS = 1 << 16
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "paged-adamw",
                                "paged-adamw-8bit", "none")
CHECKPOINTING: tuple[str, ...] = ("none", "full", "selective", "selective-op")
ATTENTIONS: tuple[str, ...] = ("auto", "eager", "sdpa-math", "sdpa-efficient", "flash")
OPTIMIZER_IMPLS: tuple[str, ...] = ("auto", "foreach", "fused", "for-loop")
ZERO_GRADS: tuple[str, ...] = ("set-to-none", "zeros")
LOSSES: tuple[str, ...] = ("auto", "cross-entropy", "mean", "chunked-ce", "fused-linear-ce")
WEIGHT_QUANTS: tuple[str, ...] = ("none", "int8", "fp8", "int4")
MODULE_LOADINGS: tuple[str, ...] = ("lazy", "eager")
LOAD_INS: tuple[str, ...] = ("none", "4bit", "8bit")
PEFTS: tuple[str, ...] = ("none", "lora", "qlora", "dora")
PIPELINE_OFFLOADS: tuple[str, ...] = ("none", "model", "sequential", "group")
TRAINING_OFFLOADS: tuple[str, ...] = ("params", "optimizer", "activations")
"""Training offload to the host, combined with commas: DeepSpeed ZeRO-3's offload_param / offload_optimizer
(the planner's layouts) and activation-checkpoint CPU offload (the checkpointed block inputs; trace/runner.py)."""
COMPONENT_QUANTS: tuple[str, ...] = ("none", "int8", "fp8", "fp8-storage")
MAX_STEPS = 10_000
MAX_FRAMES = 4096
ALL_LINEAR = "all-linear"
"""``lora_targets`` value: every linear layer but the output head (PEFT's own shorthand)."""

# Upper bounds that no real workload reaches: they turn typos (an extra 000) into clear errors
# instead of a trace that allocates symbolic exabytes or runs for hours.
MAX_BATCH_SIZE = 1 << 20
MAX_SEQ_LEN = 1 << 24  # 16M tokens
MAX_IMAGE_SIZE = 16384
MAX_NEW_TOKENS = 1 << 20
MAX_GRAD_ACCUM = 1 << 16
MAX_LORA_RANK = 1 << 16


def _check_range(name: str, value: int, low: int, high: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if value < low:
        raise ConfigError(f"{name} {value} is out of range: allowed {low}..{high}; {hint}")
    if value > high:  # the low side's hint ("at least 1") would read as nonsense for a value that is too large
        raise ConfigError(f"{name} {value:,} is out of range: allowed {low}..{high:,}; a larger value is a typo "
                          "(an extra 0?)")
    return value


check_range = _check_range
"""The one whole-number range check (one-line ConfigError naming the value, the range and ``hint``), for
settings outside Workload (gpuplan.rl)."""


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
    decoder_seq_len: int | None = None
    """Encoder-decoder models (T5, BART): tokens per sample on the decoder side (its ids and labels); None: the
    encoder's ``seq_len``, as before this field existed."""
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
    high_precision_blocks: int | None = None
    """Scaled precisions (fp8 / mxfp8 / nvfp4): the last N repeated blocks keep their linear layers in bf16;
    None: the recipe's default (perf/scaled_formats.py: none for fp8 / mxfp8, ~15% for nvfp4)."""
    load_in: LoadIn = "none"
    """Quantize the base weights at load (bitsandbytes; trace/quantized.py): --load-in-4bit / --load-in-8bit."""
    peft: Peft = "none"
    """Adapters on a frozen base (none: every parameter trains as the model holds it)."""
    lora_rank: int = 8
    """LoRA rank r (PEFT's default 8)."""
    lora_alpha: float = 8.0
    """LoRA scaling numerator (PEFT's default 8): changes values, not memory or time."""
    lora_dropout: float = 0.0
    """Dropout on the adapter's input (PEFT's default 0: no dropout module, no mask saved)."""
    lora_targets: tuple[str, ...] = ()
    """Module names the adapters wrap; () is PEFT's default for the architecture, ("all-linear",)
    every linear layer but the output head."""
    train_modules: tuple[str, ...] = ()
    """Modules trained whole beside the adapters (PEFT's modules_to_save, e.g. embed_tokens, lm_head)."""
    tiled_mlp: bool = False
    """Training: each block's MLP runs over sequence tiles with recompute in backward (DeepSpeed/ALST's
    TiledMLP; trace/tiled_mlp.py)."""
    mlp_tiles: int | None = None
    """Tiles of --tiled-mlp; None: ArcticTraining's ceil(seq_len / hidden_size)."""
    # -- diffusion / video pipelines (models/pipeline.py); other models ignore these --
    steps: int | None = None
    """Denoising steps of one generation (None: the pipeline's default)."""
    frames: int | None = None
    """Video frames (None: the pipeline's default; images have none)."""
    image_width: int | None = None
    """Image width in pixels when it differs from ``image_size`` (the height): --image-size HxW."""
    offload: str = "none"
    """A diffusion pipeline's offload (PipelineOffload), or training offload: a comma list of TRAINING_OFFLOADS
    (kept in that order, e.g. ``params,optimizer,activations``)."""
    vae_tiling: bool = False
    """The VAE decodes tile by tile (``vae.enable_tiling()``)."""
    vae_slicing: bool = False
    """The VAE decodes one sample of the batch at a time (``vae.enable_slicing()``)."""
    quantize_components: tuple[str, ...] = ()
    """Pipeline components the quantization flags apply to; () is the denoiser alone."""
    component_quant: ComponentQuant = "none"
    """--weight-quant int8 | fp8 | fp8-storage of a pipeline's quantized components."""
    gguf_type: str | None = None
    """--gguf-type of a pipeline's denoiser: loaded from a GGUF file of this llama-quantize type (diffusers
    GGUFQuantizationConfig); None: not GGUF."""
    cache_latents: bool = False
    """Training: latents were computed beforehand (the VAE is neither run nor resident)."""
    cache_text_embeddings: bool = False
    """Training: prompt embeddings were computed beforehand (the text encoders are neither run nor resident)."""

    def __post_init__(self) -> None:
        require_choice("mode", self.mode, MODES)
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("checkpointing mode", self.checkpointing, CHECKPOINTING)
        require_choice("attention implementation", self.attention, ATTENTIONS)
        require_choice("optimizer implementation", self.optimizer_impl, OPTIMIZER_IMPLS)
        require_choice("zero_grad mode", self.zero_grad, ZERO_GRADS)
        require_choice("loss", self.loss, LOSSES)
        require_choice("load-in quantization", self.load_in, LOAD_INS)
        _check_range("batch size", self.batch_size, 1, MAX_BATCH_SIZE, "use a batch size of at least 1")
        if self.seq_len is not None:
            _check_range("sequence length", self.seq_len, 1, MAX_SEQ_LEN, "pass tokens per sample")
        if self.decoder_seq_len is not None:
            _check_range("decoder sequence length", self.decoder_seq_len, 1, MAX_SEQ_LEN,
                         "pass the decoder's tokens per sample (its labels)")
        if self.image_size is not None:
            _check_range("image size", self.image_size, 8, MAX_IMAGE_SIZE, "pass the image side in pixels")
        _check_range("new tokens", self.new_tokens, 0 if self.mode != "generate" else 1, MAX_NEW_TOKENS,
                     "pass how many tokens to generate")
        _check_range("grad accumulation", self.grad_accum, 1, MAX_GRAD_ACCUM, "use 1 for no accumulation")
        self._check_peft()
        self._check_pipeline()
        self._check_long_context()
        if self.scaled_training and self.mode != "train":
            # torchao's Float8Linear (and its MX / TE's NVFP4 recipes) are training APIs; fp8 inference is a
            # different one (quantize_ with Float8DynamicActivationFloat8WeightConfig: weights stored in fp8)
            raise ConfigError(f"--precision {self.precision} is low-precision training and applies to --mode "
                              f"train only, not {self.mode}; for fp8 inference use --precision bf16 --weight-quant fp8")
        if self.high_precision_blocks is not None:
            _check_range("high-precision blocks", self.high_precision_blocks, 0, MAX_HIGH_PRECISION_BLOCKS,
                         "pass how many of the last blocks keep bf16 linear layers")
            if not self.scaled_training:
                raise ConfigError(f"--high-precision-blocks applies to --precision fp8, mxfp8 or nvfp4, not "
                                  f"{self.precision}; drop it or pick a low-precision training recipe")
        if self.mode != "train" and self.grad_accum != 1:
            raise ConfigError(f"--grad-accum {self.grad_accum} applies to --mode train only, not {self.mode}")

    def _check_peft(self) -> None:
        require_choice("PEFT method", self.peft, PEFTS)
        _check_range("LoRA rank", self.lora_rank, 1, MAX_LORA_RANK, "use a rank of at least 1 (PEFT's default is 8)")
        for name, value in (("LoRA alpha", self.lora_alpha), ("LoRA dropout", self.lora_dropout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if not self.lora_alpha > 0:
            raise ConfigError(f"LoRA alpha {self.lora_alpha} must be above 0 (PEFT's default is 8)")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"LoRA dropout {self.lora_dropout} is out of range: allowed 0 <= p < 1")
        for name, names in (("LoRA targets", self.lora_targets), ("train modules", self.train_modules)):
            if isinstance(names, str) or not all(isinstance(n, str) and n.strip() for n in names):
                raise ConfigError(f"{name} must be a tuple of module names, got {names!r}")
        if ALL_LINEAR in self.lora_targets and len(self.lora_targets) > 1:
            raise ConfigError(f"LoRA targets {','.join(self.lora_targets)}: {ALL_LINEAR!r} stands alone "
                              "(it already names every linear layer)")

    def _check_long_context(self) -> None:
        if not isinstance(self.tiled_mlp, bool):
            raise ConfigError(f"tiled_mlp must be true or false, got {self.tiled_mlp!r}")
        if self.tiled_mlp and self.mode != "train":
            raise ConfigError(f"--tiled-mlp is a training technique (the MLP recomputed tile by tile in backward); "
                              f"it applies to --mode train only, not {self.mode}")
        if self.mlp_tiles is not None:
            _check_range("MLP tiles", self.mlp_tiles, 1, MAX_SEQ_LEN, "use at least 1 tile (or leave the count out)")
            if not self.tiled_mlp:
                raise ConfigError(f"MLP tiles {self.mlp_tiles} configure --tiled-mlp; add --tiled-mlp to use them")

    def _check_pipeline(self) -> None:
        self._check_offload()
        require_choice("component weight quantization", self.component_quant, COMPONENT_QUANTS)
        if self.steps is not None:
            _check_range("steps", self.steps, 1, MAX_STEPS, "pass the denoising steps of one generation")
        if self.frames is not None:
            _check_range("frames", self.frames, 1, MAX_FRAMES, "pass the video's frame count")
        if self.image_width is not None:
            _check_range("image width", self.image_width, 8, MAX_IMAGE_SIZE, "pass the image width in pixels")
        names = self.quantize_components
        if isinstance(names, str) or not all(isinstance(n, str) and n.strip() for n in names):
            raise ConfigError(f"quantize components must be a tuple of component names, got {names!r}")

    def _check_offload(self) -> None:
        if isinstance(self.offload, str) and self.offload in PIPELINE_OFFLOADS:
            return
        parts = [p.strip() for p in self.offload.split(",")] if isinstance(self.offload, str) else []
        if not parts or any(p not in TRAINING_OFFLOADS for p in parts) or len(set(parts)) != len(parts):
            raise ConfigError(f"offload {self.offload!r} is not allowed: {'|'.join(PIPELINE_OFFLOADS)} (diffusion "
                              f"pipelines) or a comma list of {', '.join(TRAINING_OFFLOADS)} (training, e.g. "
                              "params,optimizer,activations)")
        object.__setattr__(self, "offload", ",".join(p for p in TRAINING_OFFLOADS if p in parts))
        if self.mode != "train":
            raise ConfigError(f"--offload {self.offload} offloads training state; it applies to --mode train only, "
                              f"not {self.mode}")
        if "activations" in parts and self.checkpointing != "full":
            raise ConfigError(f"--offload activations keeps the inputs of fully checkpointed blocks on the host (as "
                              f"Arctic Long Sequence Training runs it), not with --checkpointing {self.checkpointing}; "
                              "add --checkpointing full")

    def offloads(self, kind: str) -> bool:
        """Training offload of ``kind`` (one of TRAINING_OFFLOADS) is on."""
        return kind in self.offload.split(",")

    @property
    def scaled_training(self) -> bool:
        """Linear layers train through scaled low-precision GEMMs (fp8, mxfp8, nvfp4)."""
        return self.precision in SCALED_PRECISIONS

    @property
    def uses_peft(self) -> bool:
        return self.peft != "none"

    @property
    def needs_bf16(self) -> bool:
        """The step computes in bfloat16: bf16 parameters or autocast, or QLoRA's bf16 compute dtype."""
        return self.precision in ("amp-bf16", "bf16") or self.peft == "qlora"

    @property
    def trains(self) -> bool:
        return self.mode == "train"

    @property
    def autocast_dtype(self) -> str | None:
        """'bfloat16' / 'float16' under AMP, else None."""
        return {"amp-bf16": "bfloat16", "amp-fp16": "float16"}.get(self.precision)

    @property
    def module_dtype_precision(self) -> Precision | None:
        """The precision of the same step with the model itself held in autocast's 16-bit dtype (None without
        autocast): how FSDP2's ``MixedPrecisionPolicy(param_dtype=...)``, DeepSpeed bf16/fp16 and Megatron-LM's
        Float16Module run an AMP step — residual stream, norms and every saved activation in 16 bits, the fp32
        master weights and optimizer state beside the modules."""
        return {"amp-bf16": "bf16", "amp-fp16": "fp16"}.get(self.precision)  # type: ignore[return-value]

    @property
    def param_dtype(self) -> str:
        """dtype of the parameters as the model holds them."""
        if self.scaled_training:
            return "bfloat16"
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.precision, "float32")

    def with_(self, **changes: Any) -> Workload:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_HALF: Final = "bf16"
"""The 16-bit type of the default GPU class (sm_90, as estimate without --gpu assumes)."""


def default_precision(mode: str, half: str | None = DEFAULT_HALF) -> Precision:
    """The precision people run today on a GPU whose fast 16-bit type is ``half`` (GPU.half_precision):
    training under autocast (``amp-bf16``; ``amp-fp16`` with a gradient scaler before Ampere), as the HF
    Trainer's ``bf16=True`` / ``fp16=True`` and torch.amp do; inference and generation with the weights in that
    type (``torch_dtype=torch.bfloat16``); fp32 where the GPU has no fast 16-bit type. The command line's
    default when --precision is not given (the library's stays fp32: an explicit API)."""
    if half not in ("bf16", "fp16"):
        return "fp32"
    if mode == "train":
        return "amp-bf16" if half == "bf16" else "amp-fp16"
    return "bf16" if half == "bf16" else "fp16"


PEFT_SETTINGS: tuple[str, ...] = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "train_modules")
"""Workload fields that configure PEFT adapters: given without a PEFT method they would change nothing."""


def check_peft_settings(given: Sequence[str], peft: str, *, spell: Callable[[str], str] = str) -> None:
    """A PEFT setting given without a PEFT method is never what the user meant: one rule for the CLI
    (``spell`` writes ``--lora-rank``) and the web page (``the lora_rank field``)."""
    if given and peft == "none":
        raise ConfigError(f"{spell(given[0])} configures PEFT adapters; add {spell('peft')} lora (or qlora, dora) "
                          "to use it")


def make_workload(**fields: Any) -> Workload:
    """A Workload from keyword fields; an unknown field is a one-line ConfigError."""
    known = set(Workload.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown workload field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(known))})")
    return Workload(**fields)
