"""Workload flags shared by estimate, fit, plan, recommend and measure (one definition)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from gpuplan.extras import require_workload
from gpuplan.report.options import (
    ALL_WORKLOAD_OPTIONS,
    JSON_OUTPUT,
    LOAD_IN,
    MODE_ONLY,
    NO_CACHE,
    PEFT_OPTIONS,
    PIPELINE,
    PIPELINE_OPTIONS,
    PIPELINE_TRAINING_ONLY,
    WORKLOAD_OPTIONS,
    Option,
    finite_number,
    image_size,
    mode_ignored,
    module_names,
    offloads_activations,
    positive_number,
    shown,
    tiles,
    whole_number,
    workload_fields,
)
from gpuplan.workload import PEFT_SETTINGS, Workload

# The value parsers and the flags themselves are described once, in report/options.py (the web page's
# parameters and form fields are made from the same descriptions); these names are the command line's.
_shown = shown
_int = whole_number
_float = finite_number
positive_float = positive_number
_names = module_names
_image_size = image_size
_tiles = tiles


Container = argparse.ArgumentParser | argparse._ArgumentGroup


def add_options(parser: Container, options: Iterable[Option]) -> None:
    """argparse flags for ``options`` (report/options.py), in order, each in its group (on a parser) and
    with the options it excludes in one mutually exclusive group; web-only ones are left out."""
    groups: dict[str, Container] = {}
    exclusive: dict[str, Container] = {}
    for option in options:
        if not option.cli:
            continue
        where: Container = parser
        if option.group and isinstance(parser, argparse.ArgumentParser):
            if option.group not in groups:
                groups[option.group] = _group(parser, option.group)
            where = groups[option.group]
        if option.exclusive:
            if option.exclusive not in exclusive:
                exclusive[option.exclusive] = where.add_mutually_exclusive_group()
            where = exclusive[option.exclusive]
        add_option(where, option)


def _group(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The parser's argument group of that title, made when it has none yet."""
    found = next((g for g in parser._action_groups if g.title == title), None)  # argparse has no public lookup
    return found if found is not None else parser.add_argument_group(title)


def add_option(parser: Container, option: Option) -> None:
    """One described option as an argparse flag: the same name, parser, choices, default and help."""
    if option.spellings:  # --load-in-4bit | --load-in-8bit: one value, several switches
        group = parser.add_mutually_exclusive_group()
        for i, (flag, value, text) in enumerate(option.spellings):
            extra = {"default": option.default} if i == 0 else {}
            group.add_argument(flag, dest=option.name, action="store_const", const=value, help=text, **extra)
        return
    kwargs: dict[str, Any] = {"dest": option.name, "default": option.default, "help": option.help or None}
    if option.required:
        kwargs["required"] = True
    if option.kind == "switch":
        kwargs["action"] = "store_true" if option.store is None else "store_const"
        if option.store is not None:
            kwargs["const"] = option.store
        parser.add_argument(*option.cli_flags, **kwargs)
        return
    parse = option.parse or {"int": _int, "float": _float, "names": _names}.get(option.kind)
    if parse is not None:
        kwargs["type"] = parse
    if option.kind == "choice" and not option.library_checks:
        kwargs["choices"] = tuple(parse(c) for c in option.choices) if parse is not None else option.choices
    if option.metavar is not None:
        kwargs["metavar"] = option.metavar
    if option.optional_value is not None:
        kwargs.update(nargs="?", const=option.optional_value)
    if option.repeat:
        kwargs["action"] = "append"
    parser.add_argument(*option.cli_flags, **kwargs)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="catalog name (gpt2, llama-3.1-8b, resnet50, ...), Hub id ORG/NAME[@REV], timm:NAME, "
                             "config.json, .safetensors, .gguf, or path/to/file.py:factory[,inputs_factory] "
                             "(gpuplan models --help)")


# Flags that only some modes read (report/options.MODE_ONLY): given with another mode they cannot change
# the answer, which stands, and a note on stderr says the flag was ignored. They default to None so that
# "given" is known; Workload fills in its defaults.
MODE_ONLY_FLAGS: Mapping[str, tuple[str, ...]] = MODE_ONLY


def add_workload_arguments(parser: argparse.ArgumentParser, *, default_mode: str = "train",
                           pipelines: bool = True) -> None:
    """The workload flags (report/options.py); ``pipelines=False`` leaves out the diffusion-pipeline group
    (measure runs real steps of one model, and its ``--steps`` counts timed steps)."""
    g = parser.add_argument_group("workload")
    add_options(g, WORKLOAD_OPTIONS)
    add_peft_arguments(g)
    if pipelines:
        add_pipeline_arguments(parser)
    add_option(g, LOAD_IN)
    parser.set_defaults(mode=default_mode)


# Pipeline flags: given for a model that is not a diffusion pipeline they change nothing (a note says so).
PIPELINE_FLAGS: tuple[str, ...] = tuple(o.name for o in PIPELINE_OPTIONS if o.cli)


def add_pipeline_arguments(parser: argparse.ArgumentParser, *, training: bool = True) -> None:
    """Flags of diffusion and video pipelines (models/pipeline.py): steps, frames, offload, VAE, components;
    ``training=False`` (serve: generations only) leaves out the training caches."""
    g = parser.add_argument_group(PIPELINE)
    add_options(g, (o for o in PIPELINE_OPTIONS if training or o.name not in PIPELINE_TRAINING_ONLY))


def _pipeline_fields(args: argparse.Namespace) -> dict[str, Any]:
    if not hasattr(args, "quantize_components"):  # a verb without the pipeline group (measure's --steps is its own)
        return {}
    return {f: getattr(args, f) for f in PIPELINE_FLAGS if getattr(args, f, None) is not None}


# PEFT flags: given without --peft they would change nothing, which is never what the user meant.
PEFT_FLAGS: tuple[str, ...] = PEFT_SETTINGS


def add_peft_arguments(g: argparse._ArgumentGroup) -> None:
    """--peft and the LoRA settings (trace/peft.py applies them with the real peft library)."""
    add_options(g, PEFT_OPTIONS)


def _spell(name: str) -> str:
    return "--" + name.replace("_", "-")


def _peft_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The PEFT flags given, as Workload fields; a LoRA setting without --peft is a usage error."""
    return workload_fields({f: getattr(args, f, None) for f in ("peft", *PEFT_FLAGS)}, spell=_spell)


def ignored_flag_notes(args: argparse.Namespace) -> list[str]:
    """One note per flag given that the chosen mode never reads (see MODE_ONLY_FLAGS)."""
    notes = []
    for field in mode_ignored(vars(args), args.mode):
        only = " or ".join(f"--mode {m}" for m in MODE_ONLY[field])
        notes.append(f"{_spell(field)} applies to {only} only; ignored with --mode {args.mode}")
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
    """The workload the flags describe (report/options.workload_fields, the web page's mapping too). Notes
    for flags the mode ignores go to ``args.notes`` when main() set it (printed after the answer), else
    straight to stderr; never to stdout."""
    values = {o.name: getattr(args, o.name, None) for o in ALL_WORKLOAD_OPTIONS if o.cli}
    if not hasattr(args, "quantize_components"):  # a verb without the pipeline group (measure's --steps is its own)
        values = {k: v for k, v in values.items() if k not in PIPELINE_FLAGS}
    fields = workload_fields(values, spell=_spell)
    if fields.get("precision") is None:
        fields["precision"] = precision_for(args)
    fields.update(overrides)
    workload = Workload(**fields)  # bad values fail first: a note about a flag in error is noise
    notes = ignored_flag_notes(args)
    if values.get("checkpointing") is None and "checkpointing" not in overrides and offloads_activations(
            values.get("offload")):
        notes.append("--offload activations: full activation checkpointing (its blocks' inputs are what moves to "
                     "the host; --checkpointing was not given)")
    if notes:  # the workload echoed in --json is the one modelled: an ignored value is not in it
        ignored = set(mode_ignored(fields, workload.mode))
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
    add_option(parser, JSON_OUTPUT)


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-cache``: trace again instead of reading (or writing) the on-disk trace cache."""
    add_option(parser, NO_CACHE)
