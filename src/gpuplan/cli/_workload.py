"""Workload flags shared by estimate, fit, plan, recommend and measure (one definition)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

from gpuplan.extras import require_workload
from gpuplan.workload import (
    ATTENTIONS,
    CHECKPOINTING,
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
MAX_FLAG_INT = 2**63 - 1


def _shown(text: str, limit: int = 40) -> str:
    """A user's value quoted for a message, cut so that a pasted novel stays one readable line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def _int(text: str) -> int:
    """Whole numbers, also written 1e3 or 1_000; range checks happen in Workload.

    Every way a text can fail to be a whole number (1e400, nan, 2.5, a 5,000-digit number) is an
    ``ArgumentTypeError``, which argparse turns into one usage line with exit code 2.
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
        raise argparse.ArgumentTypeError(f"expected a whole number, got {_shown(text)}") from None
    if abs(value) > MAX_FLAG_INT:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is too large (at most {MAX_FLAG_INT:.3g})")
    return value


def _float(text: str) -> float:
    """A finite number (nan, inf and 1e400 are typos, never a setting)."""
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {_shown(text)}")
    return value


def positive_float(what: str) -> Callable[[str], float]:
    """argparse type: a finite number above 0 — ``what`` says what it measures (a bandwidth, a budget);
    nan, inf, 0 and negatives are refused in one line."""

    def parse(text: str) -> float:
        try:
            value = _float(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive, finite number ({what}), got {_shown(text)}")
        return value

    return parse


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="catalog name (gpt2, llama-3.1-8b, resnet50, ...), Hub id ORG/NAME[@REV], timm:NAME, "
                             "config.json, .safetensors, .gguf, or path/to/file.py:factory[,inputs_factory] "
                             "(gpuplan models --help)")


def _default(field: str) -> Any:
    """Workload's own default for a field: the one copy, shown in --help."""
    return next(f.default for f in dataclasses.fields(Workload) if f.name == field)


# Flags that only some modes read, and those modes. Given with another mode, the flag cannot change
# the answer (nothing in that step reads it): the answer stands, and a note on stderr says the flag
# was ignored. A flag whose absence would silently change what the answer means is an error instead,
# raised by Workload (``--grad-accum`` outside training: the user thinks of an effective batch).
# These flags default to None so that "given" is known; Workload fills in its defaults.
MODE_ONLY_FLAGS: dict[str, tuple[str, ...]] = {
    "new_tokens": ("generate",),
    "optimizer": ("train",),
    "optimizer_impl": ("train",),
    "zero_grad": ("train",),
    "loss": ("train",),
    "checkpointing": ("train",),
    "high_precision_blocks": ("train",),
}


def add_workload_arguments(parser: argparse.ArgumentParser, *, default_mode: str = "train",
                           pipelines: bool = True) -> None:
    """The workload flags; ``pipelines=False`` leaves out the diffusion-pipeline group (measure runs real steps
    of one model, and its ``--steps`` counts timed steps)."""
    g = parser.add_argument_group("workload")
    g.add_argument("--mode", default=default_mode, choices=MODES)
    g.add_argument("--batch-size", type=_int, default=1, metavar="N", help="micro-batch per forward (default 1)")
    g.add_argument("--seq-len", type=_int, default=None, metavar="N", help="tokens per sample (default: model's)")
    g.add_argument("--image-size", type=_image_size, default=None, metavar="H[xW]",
                   help="image side in pixels, or height x width (pipelines: 1024x768)")
    g.add_argument("--new-tokens", type=_int, default=None, metavar="N",
                   help=f"tokens to generate (generate mode; default {_default('new_tokens')})")
    g.add_argument("--precision", default=None, metavar="P",
                   help="|".join(PRECISIONS) + " (default: what people run on the GPU: amp-bf16 for training, bf16 "
                        "weights for inference where it has bf16; amp-fp16 / fp16 on Volta and Turing; fp32 "
                        "without fast 16-bit math)")
    g.add_argument("--optimizer", default=None, metavar="O",
                   help="|".join(OPTIMIZERS) + f" (train mode; default {_default('optimizer')})")
    g.add_argument("--checkpointing", default=None, metavar="C",
                   help="|".join(CHECKPOINTING) + f" (train mode; default {_default('checkpointing')})")
    g.add_argument("--grad-accum", type=_int, default=1, metavar="K", help="micro-batches per optimizer step")
    g.add_argument("--attention", default="auto", metavar="A", help="|".join(ATTENTIONS))
    g.add_argument("--optimizer-impl", default=None, metavar="I",
                   help="|".join(OPTIMIZER_IMPLS) + f" (train mode; default {_default('optimizer_impl')})")
    g.add_argument("--zero-grad", default=None, metavar="Z",
                   help="|".join(ZERO_GRADS) + f" (train mode; default {_default('zero_grad')})")
    g.add_argument("--loss", default=None, metavar="L",
                   help="|".join(LOSSES) + f" (train mode; default {_default('loss')}; chunked-ce: torchtune's "
                        "chunked LM head + fp32 cross entropy one chunk at a time; fused-linear-ce: Liger's fused "
                        "linear cross entropy, no full-vocabulary logits; causal LMs)")
    g.add_argument("--tiled-mlp", type=_tiles, nargs="?", const="auto", default=None, metavar="TILES",
                   help="train mode: each block's MLP over sequence tiles, recomputed in backward (DeepSpeed/ALST "
                        "TiledMLP); TILES default ceil(seq-len / hidden size)")
    g.add_argument("--high-precision-blocks", type=_int, default=None, metavar="N",
                   help="--precision fp8|mxfp8|nvfp4: the last N blocks keep bf16 linear layers (default: none "
                        "for fp8 and mxfp8, the last 15%% for nvfp4 as NVIDIA's NVFP4 recipe does)")
    add_peft_arguments(g)
    if pipelines:
        add_pipeline_arguments(parser)
    load = g.add_mutually_exclusive_group()
    load.add_argument("--load-in-4bit", dest="load_in", action="store_const", const="4bit", default="none",
                      help="base weights in bitsandbytes NF4 with double quantization (as QLoRA loads them)")
    load.add_argument("--load-in-8bit", dest="load_in", action="store_const", const="8bit",
                      help="base weights in bitsandbytes LLM.int8 (int8 + fp32 scale per row)")


def _tiles(text: str) -> int | str:
    """argparse type of --tiled-mlp: ``auto`` or a whole number of tiles (its range is Workload's)."""
    return "auto" if text.strip().lower() == "auto" else _int(text)


def _tiled_mlp_fields(args: argparse.Namespace) -> dict[str, Any]:
    tiles = getattr(args, "tiled_mlp", None)
    if tiles is None:
        return {}
    return {"tiled_mlp": True, "mlp_tiles": None if tiles == "auto" else tiles}


def _image_size(text: str) -> tuple[int, int | None]:
    """argparse type: ``N`` (a square, or a vision model's side) or ``HxW``; ranges are Workload's."""
    parts = text.lower().replace("×", "x").split("x")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise argparse.ArgumentTypeError(f"expected N or HxW pixels (e.g. 1024 or 720x1280), got {_shown(text)}")
    height = _int(parts[0])
    return height, (_int(parts[1]) if len(parts) == 2 else None)


# Pipeline flags: given for a model that is not a diffusion pipeline they change nothing (a note says so).
PIPELINE_FLAGS: tuple[str, ...] = ("steps", "frames", "offload", "vae_tiling", "vae_slicing", "quantize_components",
                                   "cache_latents", "cache_text_embeddings")


def add_pipeline_arguments(parser: argparse.ArgumentParser, *, training: bool = True) -> None:
    """Flags of diffusion and video pipelines (models/pipeline.py): steps, frames, offload, VAE, components;
    ``training=False`` (serve: generations only) leaves out the training caches."""
    g = parser.add_argument_group("diffusion / video pipelines")
    g.add_argument("--steps", type=_int, default=None, metavar="N",
                   help="denoising steps of one generation (default: the pipeline's)")
    g.add_argument("--frames", type=_int, default=None, metavar="N", help="video frames (default: the pipeline's)")
    g.add_argument("--offload", default=None, metavar="O",
                   help="|".join(PIPELINE_OFFLOADS) + ": diffusers' enable_model_cpu_offload (model), "
                        "enable_sequential_cpu_offload (sequential), block-level group offloading with streams "
                        "(group); training: a comma list of " + ",".join(TRAINING_OFFLOADS) + " (DeepSpeed ZeRO-3 "
                        "offload_param / offload_optimizer in plan; activation-checkpoint CPU offload)")
    g.add_argument("--vae-tiling", action="store_true", default=None,
                   help="VAE decodes tile by tile (vae.enable_tiling)")
    g.add_argument("--vae-slicing", action="store_true", default=None,
                   help="VAE decodes one sample at a time (vae.enable_slicing)")
    g.add_argument("--quantize-components", type=_names, default=None, metavar="NAMES",
                   help="components --load-in-4bit/8bit and --weight-quant int8|fp8-storage apply to "
                        "(default: the denoiser), e.g. transformer,text_encoder_2")
    if not training:
        return
    g.add_argument("--cache-latents", action="store_true", default=None,
                   help="training: latents precomputed (the VAE is not resident)")
    g.add_argument("--cache-text-embeddings", action="store_true", default=None,
                   help="training: prompt embeddings precomputed (the text encoders are not resident)")


def _pipeline_fields(args: argparse.Namespace) -> dict[str, Any]:
    if not hasattr(args, "quantize_components"):  # a verb without the pipeline group (measure's --steps is its own)
        return {}
    return {f: getattr(args, f) for f in PIPELINE_FLAGS if getattr(args, f, None) is not None}


def _names(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated module names (``q_proj,v_proj``), none empty."""
    names = tuple(n.strip() for n in text.split(","))
    if not names or not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated module names, got {_shown(text)}")
    return names


# PEFT flags: given without --peft they would change nothing, which is never what the user meant.
PEFT_FLAGS: tuple[str, ...] = PEFT_SETTINGS


def add_peft_arguments(g: argparse._ArgumentGroup) -> None:
    """--peft and the LoRA settings (trace/peft.py applies them with the real peft library)."""
    g.add_argument("--peft", default=None, metavar="M",
                   help="|".join(PEFTS) + ": adapters on a frozen base (qlora: on an NF4 base); default none")
    g.add_argument("--lora-rank", type=_int, default=None, metavar="R",
                   help=f"LoRA rank (default {_default('lora_rank')})")
    g.add_argument("--lora-alpha", type=_float, default=None, metavar="A",
                   help=f"LoRA alpha (default {_default('lora_alpha'):g}; values only, not memory)")
    g.add_argument("--lora-dropout", type=_float, default=None, metavar="P",
                   help=f"LoRA dropout in [0, 1) (default {_default('lora_dropout'):g})")
    g.add_argument("--lora-targets", type=_names, default=None, metavar="NAMES",
                   help="modules the adapters wrap: NAME[,NAME...] or all-linear (default: PEFT's for the "
                        "architecture)")
    g.add_argument("--train-modules", type=_names, default=None, metavar="NAMES",
                   help="modules trained whole beside the adapters, e.g. embed_tokens,lm_head")


def _peft_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The PEFT flags given, as Workload fields; a LoRA setting without --peft is a usage error."""
    fields: dict[str, Any] = {}
    if getattr(args, "peft", None) is not None:
        fields["peft"] = args.peft
    given = [f for f in PEFT_FLAGS if getattr(args, f, None) is not None]
    check_peft_settings(given, fields.get("peft", "none"), spell=lambda name: "--" + name.replace("_", "-"))
    fields.update({f: getattr(args, f) for f in given})
    return fields


def ignored_flag_notes(args: argparse.Namespace) -> list[str]:
    """One note per flag given that the chosen mode never reads (see MODE_ONLY_FLAGS)."""
    notes = []
    for field, modes in MODE_ONLY_FLAGS.items():
        if getattr(args, field, None) is not None and args.mode not in modes:
            flag = "--" + field.replace("_", "-")
            only = " or ".join(f"--mode {m}" for m in modes)
            notes.append(f"{flag} applies to {only} only; ignored with --mode {args.mode}")
    return notes


def precision_for(args: argparse.Namespace) -> str:
    """--precision left out: what people run on the verb's --gpu (hardware.support.default_precision_on);
    without one (recommend, estimate without --gpu), on the default GPU class, sm_90, as the trace assumes."""
    from gpuplan.hardware.support import default_precision_on

    if getattr(args, "verb", None) == "measure":
        # measure runs the step as written on the device that is present: fp32 unless told otherwise (a
        # CPU gains nothing from autocast, and DeepSpeed's ZeRO layouts take fp32 or bf16, never autocast)
        return "fp32"
    name = getattr(args, "gpu", None)
    return default_precision_on(args.mode, name if isinstance(name, str) else None)


def workload_from_args(args: argparse.Namespace, **overrides: Any) -> Workload:
    """The workload the flags describe. Notes for flags the mode ignores go to ``args.notes`` when main()
    set it (printed after the answer), else straight to stderr; never to stdout."""
    height, width = args.image_size if isinstance(args.image_size, tuple) else (args.image_size, None)
    fields: dict[str, Any] = dict(
        mode=args.mode, batch_size=args.batch_size, seq_len=args.seq_len, image_size=height, image_width=width,
        precision=args.precision if args.precision is not None else precision_for(args),
        grad_accum=args.grad_accum, attention=args.attention,
        load_in=getattr(args, "load_in", "none"),
    )
    for field in MODE_ONLY_FLAGS:  # given ones only: Workload holds the defaults
        if getattr(args, field, None) is not None:
            fields[field] = getattr(args, field)
    fields.update(_peft_fields(args))
    fields.update(_tiled_mlp_fields(args))
    fields.update(_pipeline_fields(args))
    fields.update(overrides)
    workload = Workload(**fields)  # bad values fail first: a note about a flag in error is noise
    notes = ignored_flag_notes(args)
    if notes:  # the workload echoed in --json is the one modelled: an ignored value is not in it
        ignored = {f for f, modes in MODE_ONLY_FLAGS.items() if workload.mode not in modes}
        workload = Workload(**{k: v for k, v in fields.items() if k not in ignored or k in overrides})
    require_workload(workload)  # a missing optional package stops here, before any tracing
    pending = getattr(args, "notes", None)
    if isinstance(pending, list):  # main() prints them once the verb has answered (an error stays one line)
        pending.extend(notes)
    else:
        for note in notes:
            print(f"gpuplan: note: {note}", file=sys.stderr)
    return workload


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-cache``: trace again instead of reading (or writing) the on-disk trace cache."""
    parser.add_argument("--no-cache", action="store_true",
                        help="trace again; don't read or write the trace cache (also: GPUPLAN_CACHE=off)")
