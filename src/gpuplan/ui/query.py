"""A web query (URL parameters) turned into a validated, canonical job description.

Everything is checked here, in the server process, before a worker is asked: a bad value is a one-line
:class:`~gpuplan.errors.ConfigError` naming the value and what is allowed. The canonical form
(:meth:`Query.params`) is the share link, the cache key and what the worker receives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuplan.errors import ConfigError, UnknownModelError, did_you_mean
from gpuplan.hardware import get_gpu
from gpuplan.hardware.support import default_precision_on
from gpuplan.serve.engines import PAGED_ENGINES as ENGINES  # the page sizes paged engines only
from gpuplan.serve.kv import KV_CACHE_DTYPES
from gpuplan.workload import PEFT_SETTINGS, WEIGHT_QUANTS, Workload, check_peft_settings, make_workload

VERBS: Final = ("estimate", "fit", "recommend", "plan", "serve")
"""The library calls the page offers (the CLI verbs of the same names)."""

UPLOAD_PREFIX: Final = "upload:"
UPLOAD_ID = re.compile(r"^[0-9a-f]{16}$")

WORKLOAD_INTS: Final = ("batch_size", "seq_len", "image_size", "new_tokens", "grad_accum", "lora_rank", "steps",
                        "frames", "image_width", "mlp_tiles",
                        "high_precision_blocks")
WORKLOAD_FLOATS: Final = ("lora_alpha", "lora_dropout")
WORKLOAD_CHOICES: Final = ("mode", "precision", "optimizer", "checkpointing", "attention", "optimizer_impl",
                           "zero_grad", "loss", "load_in", "peft", "offload", "component_quant")
WORKLOAD_NAMES: Final = ("lora_targets", "train_modules", "quantize_components")
"""Comma-separated module names (``q_proj,v_proj``), as the CLI's --lora-targets / --train-modules."""
WORKLOAD_FLAGS: Final = ("vae_tiling", "vae_slicing", "cache_latents", "cache_text_embeddings", "tiled_mlp")
"""Switches (the pipeline's, --tiled-mlp): 'on' (a checkbox) or absent."""
WORKLOAD_PARAMS: Final = (*WORKLOAD_INTS, *WORKLOAD_FLOATS, *WORKLOAD_CHOICES, *WORKLOAD_NAMES, *WORKLOAD_FLAGS)
"""Every Workload field the page takes; tests/ui/test_query.py checks that this is all of them, so a new
field is offered or refused by name, never dropped silently."""

# Options beyond the workload, per verb: name -> kind ("int", "float", "choice:a|b", "text", "flag").
VERB_OPTIONS: Final[Mapping[str, Mapping[str, str]]] = {
    "estimate": {"gpu": "text", "weight_quant": "choice:none|int8|fp8|int4",
                 "cuda_module_loading": "choice:lazy|eager"},
    "fit": {"gpu": "text", "target_batch_size": "int"},
    "recommend": {"max_gpus": "int", "budget_usd": "float"},
    "plan": {"gpu": "text", "gpus": "int", "nodes": "int", "tp": "int", "pp": "int", "dp": "int",
             "zero": "choice:0|1|2|3", "fsdp": "flag", "global_batch_size": "int", "micro_batch_size": "int"},
    "serve": {"gpu": "text", "tp": "int", "pp": "int", "engine": "choice:" + "|".join(ENGINES),
              "max_model_len": "int", "context": "int", "concurrency": "int", "input_len": "int", "output_len": "int",
              "rate": "float", "gpu_memory_utilization": "float",
              "kv_cache_dtype": "choice:" + "|".join(KV_CACHE_DTYPES), "max_num_batched_tokens": "int",
              "max_num_seqs": "int", "quantization": "choice:" + "|".join(WEIGHT_QUANTS)},
}
REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {"fit": ("gpu",), "plan": ("gpu", "gpus"), "serve": ("gpu",)}
NO_WORKLOAD: Final = ("serve",)
"""Verbs whose library call takes no training/inference workload (serve sizes an engine instead)."""

MAX_VALUE_CHARS: Final = 100
"""Longest value accepted in any field: names and numbers are short; more is a paste accident."""


@dataclass(frozen=True, slots=True)
class Query:
    """One validated request: which library call, on which model, with which workload and options."""

    verb: str
    model: str
    """A catalog / torchvision name, or ``upload:<id>`` of a file the user uploaded."""
    workload: Workload
    given: tuple[tuple[str, str], ...]
    """The workload fields the user set (canonical text), for the share link."""
    options: tuple[tuple[str, str], ...]
    """The verb's options the user set (canonical text), sorted by name."""
    ignored: tuple[str, ...] = ()
    """Fields of other verbs that were filled in and are not used by this one."""

    @property
    def upload_id(self) -> str | None:
        return self.model[len(UPLOAD_PREFIX):] if self.model.startswith(UPLOAD_PREFIX) else None

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    @property
    def pipeline(self) -> bool:
        """The model is a shipped diffusion pipeline (serve answers its generations from the workload)."""
        return self.upload_id is None and is_pipeline_name(self.model)

    def params(self) -> dict[str, str]:
        """The canonical URL parameters: equal queries give equal parameters (cache key, share link)."""
        return {"verb": self.verb, "model": self.model, **dict(self.given), **dict(self.options)}

    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.params().items()))


def is_pipeline_name(model: str) -> bool:
    """A shipped diffusion pipeline's name (models/pipeline.py; reading the names imports no torch)."""
    from gpuplan.models.pipeline import pipeline_names

    return model in pipeline_names()


def _text(name: str, value: str) -> str:
    value = value.strip()
    if len(value) > MAX_VALUE_CHARS:
        raise ConfigError(f"{name}: {len(value)} characters is too long (at most {MAX_VALUE_CHARS})")
    return value


def parse_int(name: str, text: str) -> int:
    """A whole number written in decimal digits (range checks are the library's)."""
    if not re.fullmatch(r"-?[0-9]{1,18}", text):
        raise ConfigError(f"{name} must be a whole number, got {text[:40]!r}")
    return int(text)


def parse_float(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {text[:40]!r}") from None
    if not (value == value and abs(value) != float("inf")):
        raise ConfigError(f"{name} must be a finite number, got {text[:40]!r}")
    return value


def parse_names(name: str, text: str) -> tuple[str, ...]:
    """Comma-separated module names, none empty."""
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise ConfigError(f"{name} must be comma-separated module names, got {text[:40]!r}")
    return names


def check_model_name(model: str, catalog: tuple[str, ...]) -> str:
    """A catalog name or an upload id; paths, Hub ids, URLs and ``file.py:factory`` are refused here."""
    if model.startswith(UPLOAD_PREFIX):
        if not UPLOAD_ID.match(model[len(UPLOAD_PREFIX):]):
            raise ConfigError(f"model {model[:40]!r} is not an upload id (upload a config.json to get one)")
        return model
    if model in catalog:
        return model
    raise UnknownModelError(
        f"unknown model {model[:40]!r}{did_you_mean(model, catalog)}; the web page takes a catalog name "
        "(see /api/models) or an uploaded config.json / safetensors header — never a path, Hub id or code")


def parse_query(params: Mapping[str, str], catalog: tuple[str, ...]) -> Query | None:
    """The query in ``params``, or None when no model is given (the empty form)."""
    values = {k: _text(k, v) for k, v in params.items() if v is not None}
    values = {k: v for k, v in values.items() if v != ""}  # a form's empty field: not given
    if "model" not in values:
        return None
    verb = values.pop("verb", "estimate")
    if verb not in VERBS:
        raise ConfigError(f"unknown verb {verb[:40]!r}{did_you_mean(verb, VERBS)} (allowed: {', '.join(VERBS)})")
    model = check_model_name(values.pop("model"), catalog)
    options_spec = VERB_OPTIONS[verb]
    workload_fields = set(WORKLOAD_PARAMS)
    all_options = {k for spec in VERB_OPTIONS.values() for k in spec}
    unknown = sorted(k for k in values if k not in workload_fields and k not in all_options)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(u[:40] for u in unknown)}; allowed: model, verb, "
                          f"{', '.join(sorted(workload_fields | all_options))}")
    # another verb's field filled in on the same form: left out of this query (and of its share link)
    ignored = tuple(sorted(k for k in values if k in all_options and k not in options_spec))
    if verb in NO_WORKLOAD and not is_pipeline_name(model):  # a pipeline's generation is a workload
        ignored = tuple(sorted([*ignored, *(k for k in values if k in workload_fields and k not in options_spec)]))
        values = {k: v for k, v in values.items() if k not in workload_fields}
    work: dict[str, object] = {}
    given: dict[str, str] = {}
    for name in WORKLOAD_INTS:
        if name in values:
            work[name] = parse_int(name, values[name])
            given[name] = str(work[name])
    for name in WORKLOAD_FLOATS:
        if name in values:
            work[name] = parse_float(name, values[name])
            given[name] = repr(work[name])
    for name in WORKLOAD_CHOICES:
        if name in values:
            work[name] = given[name] = values[name]
    for name in WORKLOAD_NAMES:
        if name in values:
            work[name] = parse_names(name, values[name])
            given[name] = ",".join(work[name])  # type: ignore[arg-type]
    for name in WORKLOAD_FLAGS:
        if name in values:
            if values[name] not in ("1", "on", "true"):
                raise ConfigError(f"{name} is a checkbox: 'on' or absent, got {values[name][:40]!r}")
            work[name] = True
            given[name] = "on"
    check_peft_settings(tuple(n for n in PEFT_SETTINGS if n in work), str(work.get("peft", "none")))
    if verb == "plan":
        work.setdefault("mode", "train")
    if verb == "serve" and is_pipeline_name(model):
        work.setdefault("mode", "infer")
    if "precision" not in work and (verb not in NO_WORKLOAD or is_pipeline_name(model)):
        # the command line's default: what people run on the query's GPU (one rule, hardware.support)
        gpu_name = values.get("gpu") if "gpu" in options_spec else None
        work["precision"] = default_precision_on(str(work.get("mode", "train")), gpu_name)
    workload = make_workload(**work)  # ranges and choices: the library's one check
    options: dict[str, str] = {}
    for name, kind in options_spec.items():
        if name not in values:
            continue
        text = values[name]
        if kind == "int":
            options[name] = str(parse_int(name, text))
        elif kind == "float":
            options[name] = repr(parse_float(name, text))
        elif kind == "flag":
            if text not in ("1", "on", "true"):
                raise ConfigError(f"{name} is a checkbox: 'on' or absent, got {text[:40]!r}")
            options[name] = "on"
        elif kind.startswith("choice:"):
            allowed = kind.removeprefix("choice:").split("|")
            if text not in allowed:
                raise ConfigError(f"{name} {text[:40]!r} is not one of {', '.join(allowed)}")
            options[name] = text
        else:  # the GPU: canonical id, so that 'h100' and 'H100-SXM' share a link and a cache entry
            options[name] = get_gpu(text).id
    missing = [n for n in REQUIRED.get(verb, ()) if n not in options]
    if missing:
        raise ConfigError(f"{verb} needs {' and '.join(missing)}; fill in the field(s) and submit again")
    return Query(verb=verb, model=model, workload=workload, given=tuple(sorted(given.items())),
                 options=tuple(sorted(options.items())), ignored=ignored)
