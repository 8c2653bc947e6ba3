"""Each verb's options, described once (issue 19 item 1, issue 18 item 6).

An :class:`Option` is one flag: its name (the argparse ``dest``, the web API parameter and, for the
workload flags, the :class:`~gpuplan.workload.Workload` field), its kind, choices, default, help and
form label; this module has the option type, the value parsers and the workload's options (shared by
estimate, fit, recommend, plan and measure), ``report/verb_options.py`` each verb's own. ``cli/`` makes its
argparse flags from these descriptions (``cli/_workload.add_options``) and
``ui/`` its API parameters and form fields (``ui/query.py``, ``ui/page.py``), so a flag added here is
offered by both front ends, read by the same parser and refused in the same one line.
:func:`workload_fields` turns the values given into Workload fields, one mapping for both.

Flags only the command line can honour (files, ``--emit``, ``--plot``) say ``web=False``; parameters only
the form needs (a checkbox for a CLI flag whose value is optional) say ``cli=False``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpuplan.models.gguf_mix import GGUF_TYPES
from gpuplan.workload import (
    ATTENTIONS,
    CHECKPOINTING,
    COMPONENT_QUANTS,
    LOAD_INS,
    LOSSES,
    MODES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PEFT_SETTINGS,
    PEFTS,
    PIPELINE_OFFLOADS,
    PRECISIONS,
    TRAINING_OFFLOADS,
    ZERO_GRADS,
    Workload,
    check_peft_settings,
)

# The largest whole number any flag accepts: past 64 bits a count is a typo, and each consumer's own
# range check (Workload, Options, plan) then names the real limit.
MAX_FLAG_INT: Final = 2**63 - 1

# --- value parsers: one per kind of value; each failure is an ArgumentTypeError with one line ---------


def shown(text: str, limit: int = 40) -> str:
    """A user's value quoted for a message, cut so that a pasted novel stays one readable line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def whole_number(text: str) -> int:
    """Whole numbers, also written 1e3 or 1_000; range checks happen in Workload / the library.

    Every way a text can fail to be a whole number (1e400, nan, 2.5, a 5,000-digit number) is an
    ``ArgumentTypeError``, which argparse turns into one usage line with exit code 2 (and the web page
    into one error line naming the parameter).
    """
    cleaned = text.strip().replace("_", "")
    try:
        if any(c in cleaned for c in "eE."):
            number = float(cleaned)
            if not math.isfinite(number) or number != int(number):
                raise ValueError(text)
            value = int(number)
        else:
            value = int(cleaned)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {shown(text)}") from None
    if abs(value) > MAX_FLAG_INT:
        raise argparse.ArgumentTypeError(f"{shown(text)} is too large (at most {MAX_FLAG_INT:.3g})")
    return value


def finite_number(text: str) -> float:
    """A finite number (nan, inf and 1e400 are typos, never a setting)."""
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {shown(text)}")
    return value


def positive_number(what: str) -> Callable[[str], float]:
    """A finite number above 0 — ``what`` says what it measures (a bandwidth, a budget); nan, inf, 0 and
    negatives are refused in one line."""

    def parse(text: str) -> float:
        try:
            value = finite_number(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {shown(text)}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive, finite number ({what}), got {shown(text)}")
        return value

    return parse


def module_names(text: str) -> tuple[str, ...]:
    """Comma-separated module names (``q_proj,v_proj``), none empty."""
    names = tuple(n.strip() for n in text.split(","))
    if not names or not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated module names, got {shown(text)}")
    return names


def image_size(text: str) -> tuple[int, int | None]:
    """``N`` (a square, or a vision model's side) or ``HxW``; ranges are Workload's."""
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise argparse.ArgumentTypeError(f"expected N or HxW pixels (e.g. 1024 or 720x1280), got {shown(text)}")
    height = whole_number(parts[0])
    return height, (whole_number(parts[1]) if len(parts) == 2 else None)


def tiles(text: str) -> int | str:
    """``--tiled-mlp``'s value: ``auto`` or a whole number of tiles (its range is Workload's)."""
    return "auto" if text.strip().lower() == "auto" else whole_number(text)


def shares(text: str) -> tuple[float, ...]:
    """Comma-separated shares, one per GPU (``3,1``): llama.cpp's --tensor-split."""
    try:
        return tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated shares per GPU (e.g. 3,1), got {shown(text)}") \
            from None


def switch(text: str) -> bool:
    """A web checkbox: on, or absent (the command line's store_true flag)."""
    if text.strip().lower() not in ("1", "on", "true"):
        raise argparse.ArgumentTypeError(f"is a checkbox: 'on' or absent, got {shown(text)}")
    return True


Kind = Literal["int", "float", "choice", "names", "switch", "text", "gpu", "model"]
"""What a value is: the parser it takes and the form control it gets. ``gpu``: a catalog GPU name (the web
page keeps its canonical id); ``model``: another model (the web page takes catalog names only)."""

_PARSERS: Final[Mapping[str, Callable[[str], Any]]] = {"int": whole_number, "float": finite_number,
                                                        "names": module_names, "switch": switch}


@dataclass(frozen=True, slots=True)
class Option:
    """One flag of one or more verbs."""

    name: str
    """The argparse ``dest``, the web parameter; a workload option's name is its Workload field."""
    kind: Kind
    help: str = ""
    label: str = ""
    """The form's label; empty keeps it off the form (shown by the command line only)."""
    choices: tuple[str, ...] = ()
    library_checks: bool = False
    """The choices are checked by the library (Workload names the allowed values in its message), so the
    command line shows them in ``--help`` instead of enforcing them; the form still offers them."""
    default: Any = None
    """The command line's default (None: "not given", the library's default applies)."""
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    """A parser other than the kind's own (a positive number, an image size, a whole-number choice)."""
    required: bool = False
    cli: bool = True
    web: bool = True
    flags: tuple[str, ...] = ()
    """Command-line spellings; default ``--`` + the name with dashes."""
    store: Any = None
    """A switch's stored value (``--no-ref`` stores False); None: True."""
    spellings: tuple[tuple[str, str, str], ...] = ()
    """Command-line switches that each set a value instead of one flag taking it: (flag, value, help)."""
    optional_value: Any = None
    """A flag whose value may be left out (``--tiled-mlp [TILES]``): the value it then stands for."""
    repeat: bool = False
    """The flag may be given again, each value added to a list (``-ot A=CPU -ot B=CPU``)."""
    group: str = ""
    """The argparse group it sits in on the command line (the workload's: its fieldset on the form too)."""
    minimum: float | None = None
    maximum: float | None = None
    """The form control's bounds (a hint to the browser; the library checks the range)."""
    unset: str = ""
    """The form's words for "not given" (a select's first entry), e.g. ``default (adamw)``."""
    exclusive: str = ""
    """Options with the same key exclude each other (``--zero`` | ``--fsdp`` | ``--megatron``)."""
    web_name: str = ""
    """The web parameter, where the name would mislead (``no_ref`` for ``--no-ref``, whose dest is ``ref``)."""
    web_choices: tuple[str, ...] = ()
    """The choices the web page offers, where it runs fewer than the command line (serve's paged engines)."""

    @property
    def param(self) -> str:
        return self.web_name or self.name

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def on_form(self) -> bool:
        return self.web and bool(self.label)

    def value(self, text: str) -> Any:
        """The value ``text`` stands for; an ArgumentTypeError (one line) when it stands for none."""
        parse = self.parse or _PARSERS.get(self.kind)
        if self.kind == "switch":
            switch(text)
            return True if self.store is None else self.store
        value = parse(text) if parse is not None else text
        if self.kind == "choice" and not self.library_checks:  # as argparse: the parser first, then the choices
            allowed = [parse(c) if parse is not None else c for c in self.choices]
            if value not in allowed:
                shown_value = shown(value) if isinstance(value, str) else repr(value)
                raise argparse.ArgumentTypeError(
                    f"invalid choice: {shown_value} (choose from {', '.join(map(repr, allowed))})")
        return value

    def text(self, value: Any) -> str:
        """The canonical text of a value (the web page's share link and cache key)."""
        if self.kind == "switch":
            return "on"
        if isinstance(value, tuple) and self.kind == "names":
            return ",".join(value)
        if isinstance(value, tuple):  # an image size (height, width or None)
            return str(value[0]) if value[1] is None else f"{value[0]}x{value[1]}"
        if isinstance(value, float):
            return repr(value)
        return str(value)


def _default(field: str) -> Any:
    """Workload's own default for a field: the one copy, shown in --help."""
    return next(f.default for f in dataclasses.fields(Workload) if f.name == field)


# --- the workload: the flags of estimate, fit, plan, recommend and measure ------------------------------

WORKLOAD: Final = "workload"
PEFT_GROUP: Final = "Fine-tuning adapters and quantized base weights"
PIPELINE: Final = "diffusion / video pipelines"

WORKLOAD_OPTIONS: Final[tuple[Option, ...]] = (
    Option("mode", "choice", choices=MODES, default="train", label="Mode", unset="default (train)", group=WORKLOAD),
    Option("batch_size", "int", default=1, metavar="N", help="micro-batch per forward (default 1)",
           label="Batch size (per forward)", group=WORKLOAD, minimum=1),
    Option("seq_len", "int", metavar="N", help="tokens per sample (default: model's)",
           label="Sequence length (tokens)", group=WORKLOAD, minimum=1),
    Option("decoder_seq_len", "int", metavar="N",
           help="encoder-decoder models (T5, BART): the decoder's tokens per sample, its labels (default: --seq-len)",
           label="Decoder sequence length (encoder-decoder)", group=WORKLOAD, minimum=1),
    Option("image_size", "int", parse=image_size, metavar="H[xW]",
           help="image side in pixels, or height x width (pipelines: 1024x768)",
           label="Image size (pixels, or HxW)", group=WORKLOAD),
    Option("new_tokens", "int", metavar="N",
           help=f"tokens to generate (generate mode; default {_default('new_tokens')})",
           label="New tokens (generate)", group=WORKLOAD, minimum=1),
    Option("precision", "choice", choices=PRECISIONS, library_checks=True, metavar="P",
           help="|".join(PRECISIONS) + " (default: what people run on the GPU: amp-bf16 for training, bf16 "
                "weights for inference where it has bf16; amp-fp16 / fp16 on Volta and Turing; fp32 "
                "without fast 16-bit math)",
           label="Precision", unset="default (what people run on the GPU)", group=WORKLOAD),
    Option("optimizer", "choice", choices=OPTIMIZERS, library_checks=True, metavar="O",
           help="|".join(OPTIMIZERS) + f" (train mode; default {_default('optimizer')})",
           label="Optimizer (train)", unset=f"default ({_default('optimizer')})", group=WORKLOAD),
    Option("checkpointing", "choice", choices=CHECKPOINTING, library_checks=True, metavar="C",
           help="|".join(CHECKPOINTING) + f" (train mode; default {_default('checkpointing')})",
           label="Activation checkpointing", unset=f"default ({_default('checkpointing')})", group=WORKLOAD),
    Option("grad_accum", "int", default=1, metavar="K", help="micro-batches per optimizer step",
           label="Gradient accumulation steps", group=WORKLOAD, minimum=1),
    Option("attention", "choice", choices=ATTENTIONS, library_checks=True, default="auto", metavar="A",
           help="|".join(ATTENTIONS), label="Attention kernel", unset="default (auto)", group=WORKLOAD),
    Option("optimizer_impl", "choice", choices=OPTIMIZER_IMPLS, library_checks=True, metavar="I",
           help="|".join(OPTIMIZER_IMPLS) + f" (train mode; default {_default('optimizer_impl')})",
           label="Optimizer implementation", unset=f"default ({_default('optimizer_impl')})", group=WORKLOAD),
    Option("zero_grad", "choice", choices=ZERO_GRADS, library_checks=True, metavar="Z",
           help="|".join(ZERO_GRADS) + f" (train mode; default {_default('zero_grad')})",
           label="zero_grad", unset=f"default ({_default('zero_grad')})", group=WORKLOAD),
    Option("loss", "choice", choices=LOSSES, library_checks=True, metavar="L",
           help="|".join(LOSSES) + f" (train mode; default {_default('loss')}; chunked-ce: torchtune's "
                "chunked LM head + fp32 cross entropy one chunk at a time; fused-linear-ce: Liger's fused "
                "linear cross entropy, no full-vocabulary logits; causal LMs)",
           label="Loss", unset=f"default ({_default('loss')})", group=WORKLOAD),
    Option("tiled_mlp", "int", parse=tiles, optional_value="auto", metavar="TILES",
           help="train mode: each block's MLP over sequence tiles, recomputed in backward (DeepSpeed/ALST "
                "TiledMLP); TILES default ceil(seq-len / hidden size)", group=WORKLOAD, web=False),
    Option("tiled_mlp", "switch", label="Tiled MLP (train; DeepSpeed/ALST TiledMLP)", group=WORKLOAD, cli=False),
    Option("mlp_tiles", "int", label="MLP tiles (default: seq-len / hidden size)", group=WORKLOAD, cli=False,
           minimum=1),
    Option("high_precision_blocks", "int", metavar="N",
           help="--precision fp8|mxfp8|nvfp4: the last N blocks keep bf16 linear layers (default: none "
                "for fp8 and mxfp8, the last 15%% for nvfp4 as NVIDIA's NVFP4 recipe does)",
           label="Blocks kept in bf16 (fp8 / mxfp8 / nvfp4)", group=WORKLOAD, minimum=0),
)
"""Shared by estimate, fit, plan, recommend and measure (in this order in ``--help`` and on the form)."""

PEFT_OPTIONS: Final[tuple[Option, ...]] = (
    Option("peft", "choice", choices=PEFTS, library_checks=True, metavar="M",
           help="|".join(PEFTS) + ": adapters on a frozen base (qlora: on an NF4 base); default none",
           label="PEFT method", unset="default (none: full fine-tune)", group=PEFT_GROUP),
    Option("lora_rank", "int", metavar="R", help=f"LoRA rank (default {_default('lora_rank')})", label="LoRA rank",
           group=PEFT_GROUP, minimum=1),
    Option("lora_alpha", "float", metavar="A", help=f"LoRA alpha (default {_default('lora_alpha'):g}; values only, "
           "not memory)", label="LoRA alpha", group=PEFT_GROUP, minimum=0),
    Option("lora_dropout", "float", metavar="P", help=f"LoRA dropout in [0, 1) (default {_default('lora_dropout'):g})",
           label="LoRA dropout (0-1)", group=PEFT_GROUP, minimum=0, maximum=1),
    Option("lora_targets", "names", metavar="NAMES",
           help="modules the adapters wrap: NAME[,NAME...] or all-linear (default: PEFT's for the architecture)",
           label="LoRA target modules (comma-separated, or all-linear)", group=PEFT_GROUP),
    Option("train_modules", "names", metavar="NAMES",
           help="modules trained whole beside the adapters, e.g. embed_tokens,lm_head",
           label="Modules trained whole (comma-separated)", group=PEFT_GROUP),
)
"""--peft and the LoRA settings (trace/peft.py applies them with the real peft library); rl takes them too."""

LOAD_IN: Final = Option(
    "load_in", "choice", choices=LOAD_INS, default="none", label="Load the base in (bitsandbytes)",
    unset="default (none)", group=PEFT_GROUP,
    spellings=(("--load-in-4bit", "4bit", "base weights in bitsandbytes NF4 with double quantization (as QLoRA "
                "loads them)"),
               ("--load-in-8bit", "8bit", "base weights in bitsandbytes LLM.int8 (int8 + fp32 scale per row)")))

PIPELINE_OPTIONS: Final[tuple[Option, ...]] = (
    Option("steps", "int", metavar="N", help="denoising steps of one generation (default: the pipeline's)",
           label="Denoising steps", group=PIPELINE, minimum=1),
    Option("frames", "int", metavar="N", help="video frames (default: the pipeline's)", label="Video frames",
           group=PIPELINE, minimum=1),
    Option("image_width", "int", label="Image width (pixels; the size above is the height)", group=PIPELINE,
           cli=False, minimum=8),
    Option("offload", "choice", choices=PIPELINE_OFFLOADS, library_checks=True, metavar="O",
           help="|".join(PIPELINE_OFFLOADS) + ": diffusers' enable_model_cpu_offload (model), "
                "enable_sequential_cpu_offload (sequential), block-level group offloading with streams "
                "(group); training: a comma list of " + ",".join(TRAINING_OFFLOADS) + " (DeepSpeed ZeRO-3 "
                "offload_param / offload_optimizer in plan; activation-checkpoint CPU offload)",
           label="Offload (pipelines: " + ", ".join(PIPELINE_OFFLOADS[1:]) + "; training: "
                 + ",".join(TRAINING_OFFLOADS) + ")", unset="default (none)", group=PIPELINE),
    Option("vae_tiling", "switch", help="VAE decodes tile by tile (vae.enable_tiling)", label="VAE tiling",
           group=PIPELINE),
    Option("vae_slicing", "switch", help="VAE decodes one sample at a time (vae.enable_slicing)",
           label="VAE slicing", group=PIPELINE),
    Option("quantize_components", "names", metavar="NAMES",
           help="components --load-in-4bit/8bit, --weight-quant int8|fp8|fp8-storage and --gguf-type apply to "
                "(default: the denoiser), e.g. transformer,text_encoder_2",
           label="Quantized components (comma-separated)", group=PIPELINE),
    Option("component_quant", "choice", choices=COMPONENT_QUANTS, library_checks=True,
           label="Component weight format", unset="default (none)", group=PIPELINE, cli=False),
    Option("gguf_type", "choice", choices=GGUF_TYPES, metavar="T",
           help="the denoiser loaded from a GGUF file of this llama-quantize type (Q8_0, Q4_K_M, Q2_K...: diffusers "
                "GGUFQuantizationConfig; ggml blocks dequantized to the compute dtype per layer)",
           label="Denoiser GGUF file type", unset="default (not GGUF)", group=PIPELINE),
    Option("cache_latents", "switch", help="training: latents precomputed (the VAE is not resident)",
           label="Training: latents cached", group=PIPELINE),
    Option("cache_text_embeddings", "switch",
           help="training: prompt embeddings precomputed (the text encoders are not resident)",
           label="Training: text embeddings cached", group=PIPELINE),
)
"""Flags of diffusion and video pipelines (models/pipeline.py): steps, frames, offload, VAE, components."""

PIPELINE_TRAINING_ONLY: Final = ("cache_latents", "cache_text_embeddings", "gguf_type")
"""Pipeline flags serve leaves out (it answers generations only; its --gguf-type is llama.cpp's)."""

ALL_WORKLOAD_OPTIONS: Final[tuple[Option, ...]] = (*WORKLOAD_OPTIONS, *PEFT_OPTIONS, LOAD_IN, *PIPELINE_OPTIONS)

# --- how the command line gives the answer (the web page shows the JSON, the text and a picture itself) ---

JSON_OUTPUT: Final = Option("json", "switch", default=False, web=False, help="print one JSON object on stdout")
NO_CACHE: Final = Option("no_cache", "switch", default=False, web=False,
                         help="trace again; don't read or write the trace cache (also: GPUPLAN_CACHE=off)")
PICTURES: Final = "pictures (optional extra: pip install 'gpuplan[plot]')"
PICTURE_OPTIONS: Final[tuple[Option, ...]] = (
    Option("plot", "text", metavar="FILE.png|FILE.svg", web=False, group=PICTURES,
           help="draw the result to this picture"),
    Option("html", "text", metavar="FILE", web=False, group=PICTURES,
           help="write one self-contained HTML report (tables, pictures, assumptions)"),
)
"""``--plot`` / ``--html`` of estimate, fit, plan, recommend and serve (cli/pictures.py writes them)."""

WORKLOAD_PARAMS: Final[tuple[str, ...]] = tuple(dict.fromkeys(o.name for o in ALL_WORKLOAD_OPTIONS if o.web))
"""Every workload parameter the web page takes: tests/ui/test_query.py checks that these are all the
Workload fields, so a new field is offered or refused by name, never dropped silently."""

# Flags that only some modes read, and those modes. Given with another mode, the flag cannot change
# the answer (nothing in that step reads it): the answer stands, and a note says the flag was ignored.
# A flag whose absence would silently change what the answer means is an error instead, raised by
# Workload (``--grad-accum`` outside training: the user thinks of an effective batch).
MODE_ONLY: Final[Mapping[str, tuple[str, ...]]] = {
    "new_tokens": ("generate",),
    "optimizer": ("train",),
    "optimizer_impl": ("train",),
    "zero_grad": ("train",),
    "loss": ("train",),
    "checkpointing": ("train",),
    "high_precision_blocks": ("train",),
}


def mode_ignored(values: Mapping[str, Any], mode: str) -> list[str]:
    """The options given (not None) that ``mode`` never reads (see MODE_ONLY)."""
    return [name for name, modes in MODE_ONLY.items() if values.get(name) is not None and mode not in modes]


def workload_fields(values: Mapping[str, Any], *, spell: Callable[[str], str] = str) -> dict[str, Any]:
    """The Workload fields that the workload options' values stand for (None: not given); the one mapping
    from flags to a workload. A LoRA setting without a PEFT method is a ConfigError naming it as ``spell``
    writes it (``--lora-rank`` on the command line, ``lora_rank`` on the web page)."""
    names = {o.name for o in ALL_WORKLOAD_OPTIONS}
    fields = {k: v for k, v in values.items() if k in names and v is not None and v is not False}
    size = fields.get("image_size")
    if isinstance(size, tuple):  # N or HxW; a width of its own (the web page's field) wins
        fields["image_size"] = size[0]
        if size[1] is not None:
            fields.setdefault("image_width", size[1])
    tiled = fields.pop("tiled_mlp", None)
    if tiled is not None:  # --tiled-mlp [auto|N], or the web page's checkbox
        fields["tiled_mlp"] = True
        if not isinstance(tiled, bool) and tiled != "auto":
            fields["mlp_tiles"] = tiled
    check_peft_settings([f for f in PEFT_SETTINGS if f in fields], str(fields.get("peft", "none")), spell=spell)
    if "checkpointing" not in fields and offloads_activations(fields.get("offload")):
        # activation-checkpoint offload moves the inputs of fully checkpointed blocks: checkpointing left unset
        # is full (an explicit other mode is refused by Workload, naming the fix)
        fields["checkpointing"] = "full"
    return fields


def offloads_activations(offload: object) -> bool:
    """A training ``--offload`` list (e.g. ``params,optimizer,activations``) that includes activations."""
    return isinstance(offload, str) and "activations" in (p.strip() for p in offload.split(","))


def options_named(options: Iterable[Option], names: Iterable[str]) -> tuple[Option, ...]:
    """The options of ``names``, in that order (a verb's description lists shared ones by name)."""
    by_name = {o.name: o for o in options}
    return tuple(by_name[n] for n in names)


__all__ = [
    "ALL_WORKLOAD_OPTIONS", "JSON_OUTPUT", "LOAD_IN", "MAX_FLAG_INT", "MODE_ONLY", "NO_CACHE", "PEFT_OPTIONS",
    "PICTURE_OPTIONS", "PIPELINE_OPTIONS", "WORKLOAD_OPTIONS", "WORKLOAD_PARAMS", "Option", "finite_number",
    "image_size", "mode_ignored", "module_names", "offloads_activations", "options_named", "positive_number", "shares",
    "shown", "switch", "tiles", "whole_number", "workload_fields",
]
