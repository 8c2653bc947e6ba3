"""A web query (URL parameters) turned into a validated, canonical job description.

Everything is checked here, in the server process, before a worker is asked: a bad value is a one-line
:class:`~gpuplan.errors.ConfigError` naming the value and what is allowed. The canonical form
(:meth:`Query.params`) is the share link, the cache key and what the worker receives.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuplan.errors import ConfigError, UnknownModelError, did_you_mean
from gpuplan.hardware import get_gpu
from gpuplan.hardware.support import default_precision_on
from gpuplan.report.options import ALL_WORKLOAD_OPTIONS, WORKLOAD_PARAMS, Option, mode_ignored, workload_fields
from gpuplan.report.verb_options import TAKES_WORKLOAD, VERBS, check_fit_axis, verb_options
from gpuplan.workload import Workload, make_workload

__all__ = ["NO_WORKLOAD", "REQUIRED", "VERBS", "VERB_OPTIONS", "WORKLOAD_OPTIONS", "WORKLOAD_PARAMS", "Query",
           "check_model_name", "is_pipeline_name", "parse_query"]

UPLOAD_PREFIX: Final = "upload:"
UPLOAD_ID = re.compile(r"^[0-9a-f]{16}$")

# Every parameter is one described option (report/options.py), the command line's flag of the same name:
# the same parser, choices and one-line refusal. VERBS are the library calls the page offers.
WORKLOAD_OPTIONS: Final[Mapping[str, Option]] = {o.param: o for o in ALL_WORKLOAD_OPTIONS if o.web}
"""The workload parameters (their names are WORKLOAD_PARAMS, the Workload fields)."""
VERB_OPTIONS: Final[Mapping[str, Mapping[str, Option]]] = {
    verb: {o.param: o for o in verb_options(verb) if o.web} for verb in VERBS}
"""Each verb's own parameters, beyond the workload; the command line's flags that the page can honour."""
REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    verb: tuple(p for p, o in spec.items() if o.required) for verb, spec in VERB_OPTIONS.items()}
NO_WORKLOAD: Final = tuple(v for v in VERBS if v not in TAKES_WORKLOAD)
"""Verbs whose library call takes no training/inference workload (serve sizes an engine, rl its own step)."""

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
    """Fields of other verbs that were filled in and are not used by this one (the form has every verb's
    fields: the page leaves them out with a note; the API refuses them, as the command line refuses a flag
    its verb does not have)."""
    mode_ignored: tuple[str, ...] = ()
    """Workload fields the chosen mode never reads: left out with a note, as the command line does."""

    @property
    def upload_id(self) -> str | None:
        return self.model[len(UPLOAD_PREFIX):] if self.model.startswith(UPLOAD_PREFIX) else None

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    def values(self) -> dict[str, Any]:
        """The verb's options as the library takes them (the argparse ``dest`` names and values): the ones
        given, and the command line's defaults of the others."""
        given = dict(self.options)
        out: dict[str, Any] = {}
        for param, option in VERB_OPTIONS[self.verb].items():
            if param in given:
                out[option.name] = option.value(given[param])
            elif option.default is not None:
                out[option.name] = option.default
        return out

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


def parse_value(option: Option, text: str) -> Any:
    """``text`` read by the option's own parser (the command line's); its one-line refusal names the parameter."""
    try:
        return option.value(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{option.param}: {exc}") from None


def _option_text(option: Option, text: str, catalog: tuple[str, ...]) -> str:
    """The canonical text of a verb option's value."""
    if option.kind == "gpu":  # the canonical id, so that 'h100' and 'H100-SXM' share a link and a cache entry
        return get_gpu(text).id
    if option.kind == "model":  # another model (a draft, a critic): a catalog name, never a path
        if text not in catalog:
            raise UnknownModelError(f"{option.param}: unknown model {text[:40]!r}{did_you_mean(text, catalog)}; "
                                    "the web page takes a catalog name (see /api/models)")
        return text
    value = parse_value(option, text)
    if option.web_choices and text not in option.web_choices:
        raise ConfigError(f"{option.param}: {text[:40]!r} is not run by the web page (choose from "
                          f"{', '.join(option.web_choices)}; the command line runs {', '.join(option.choices)})")
    return option.text(value)


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
    spec = VERB_OPTIONS[verb]
    all_options = {k for s in VERB_OPTIONS.values() for k in s}
    unknown = sorted(k for k in values if k not in WORKLOAD_OPTIONS and k not in all_options)
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(u[:40] for u in unknown)}; allowed: model, verb, "
                          f"{', '.join(sorted(set(WORKLOAD_OPTIONS) | all_options))}")
    takes_workload = verb in TAKES_WORKLOAD or (verb == "serve" and is_pipeline_name(model))
    workload_params = {p: o for p, o in WORKLOAD_OPTIONS.items() if takes_workload and p not in spec}
    # another verb's field filled in on the same form: left out of this query (and of its share link)
    ignored = sorted(k for k in values if k not in spec and k not in workload_params)
    work: dict[str, Any] = {}
    given: dict[str, str] = {}
    for param, option in workload_params.items():
        if param in values:
            work[option.name] = parse_value(option, values[param])
            given[param] = option.text(work[option.name])
    default_mode = "infer" if verb == "serve" else "train"
    unread = mode_ignored(work, str(work.get("mode", default_mode)))
    for name in unread:  # as the command line: noted, left out
        del work[name], given[name]
    fields = workload_fields(work)  # one mapping from options to Workload fields; LoRA settings need a method
    if takes_workload:
        fields.setdefault("mode", default_mode)
        if "precision" not in fields:  # the command line's default: what people run on the query's GPU
            gpu_name = values.get("gpu") if "gpu" in spec else None
            fields["precision"] = default_precision_on(str(fields["mode"]), gpu_name)
    workload = make_workload(**fields) if takes_workload else Workload()  # ranges and choices: the library's
    options: dict[str, str] = {}
    chosen: dict[str, str] = {}
    for param, option in spec.items():
        if param not in values:
            continue
        options[param] = _option_text(option, values[param], catalog)
        if option.exclusive:  # as argparse's mutually exclusive group
            other = chosen.setdefault(option.exclusive, param)
            if other != param:
                raise ConfigError(f"{param}: not allowed with {other} (give one of them)")
    if verb == "fit":  # the command line's rule for the axis (report/verb_options.check_fit_axis)
        check_fit_axis({spec[p].name: spec[p].value(t) for p, t in options.items()}, seq_len_given="seq_len" in given)
    if verb == "rl":  # rl's PEFT settings: the same rule as the workload's
        workload_fields({spec[p].name: v for p, v in options.items() if spec[p].name in _PEFT_NAMES})
    missing = [n for n in REQUIRED[verb] if n not in options]
    if missing:
        raise ConfigError(f"{verb} needs {' and '.join(missing)}; fill in the field(s) and submit again")
    return Query(verb=verb, model=model, workload=workload, given=tuple(sorted(given.items())),
                 options=tuple(sorted(options.items())), ignored=tuple(sorted(ignored)), mode_ignored=tuple(unread))


_PEFT_NAMES: Final = ("peft", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "train_modules")
