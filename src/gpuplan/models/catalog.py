"""The built-in model catalog: real Hugging Face ``config.json`` values for popular models.

Each entry is one JSON file in the ``catalog/`` folder next to this module, named after the
entry. It holds the fields of the model's published ``config.json`` that build the architecture
(``model_type``, sizes, heads, vocabulary, RoPE settings, tied embeddings, dtype, ...), where
they came from, and the parameter count the model's authors (or the hub's safetensors metadata)
publish, so that tests can check that the architecture built from the config is the real one.

Nothing here imports torch or transformers: the tracer builds the model from
:meth:`CatalogModel.config_dict` (``AutoConfig.for_model(**entry.config_dict())`` and the
``transformers`` auto class named by :attr:`CatalogModel.auto_class`). Entries are read lazily
through :mod:`importlib.resources`, validated, and cached; every lookup returns a fresh object
whose config cannot disturb the cache.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

from gpuplan.errors import ModelSourceError, UnknownModelError, did_you_mean, list_choices

__all__ = [
    "TASKS",
    "TASK_AUTO_CLASS",
    "CatalogModel",
    "catalog_models",
    "catalog_names",
    "get_catalog_model",
    "is_catalog_name",
]

#: The ``transformers`` auto class that builds each task's model (a name: no import here).
TASK_AUTO_CLASS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "causal-lm": "AutoModelForCausalLM",
        "masked-lm": "AutoModelForMaskedLM",
        "seq2seq-lm": "AutoModelForSeq2SeqLM",
        "image-classification": "AutoModelForImageClassification",
        "sequence-classification": "AutoModelForSequenceClassification",
    }
)
TASKS: Final[tuple[str, ...]] = tuple(TASK_AUTO_CLASS)

_PACKAGE: Final = "gpuplan.models"
_FOLDER: Final = "catalog"

# key -> (type, required)
_FIELDS: Final[Mapping[str, tuple[type, bool]]] = MappingProxyType(
    {
        "name": (str, True),
        "task": (str, True),
        "hf_id": (str, True),
        "source": (str, True),
        "retrieved": (str, True),
        "published_params": (int, True),
        "published_params_source": (str, True),
        "default_seq_len": (int, True),
        "config": (dict, True),
        "published_params_rounding": (int, False),
        "notes": (str, False),
        "aliases": (list, False),
    }
)


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogModel:
    """One built-in model: its real config.json fields and where they came from."""

    name: str
    """Catalog name, lower case (``llama-3.1-8b``)."""
    task: str
    """One of :data:`TASKS`; decides the head (LM head, MLM head, classifier)."""
    hf_id: str
    """The model's repository on the Hugging Face hub (``meta-llama/Llama-3.1-8B``)."""
    source: str
    """Where the config values come from."""
    retrieved: str
    """ISO date the values were checked."""
    published_params: int
    """Parameter count as published; exact where a source states it exactly."""
    published_params_source: str
    """Who publishes :attr:`published_params`, and how it is rounded."""
    default_seq_len: int
    """Sequence length for estimates when the user gives none (image size for vision models)."""
    config: Mapping[str, Any] = field(compare=False)
    """The config.json fields (read-only view; use :meth:`config_dict` for a mutable copy).

    Left out of ``==`` and ``hash()``: an entry is identified by its name and sources, and a
    mapping is not hashable."""
    published_params_rounding: int = 1
    """The published figure is rounded to a multiple of this (1: exact; 10**9 for "7B")."""
    notes: str = ""
    """Anything a user of the entry should know (MoE, sliding windows, units of default_seq_len)."""
    aliases: tuple[str, ...] = ()
    """Other names that find this entry (old hub ids, common spellings)."""

    @property
    def model_type(self) -> str:
        """The transformers ``model_type`` (``llama``, ``gpt2``, ...)."""
        return str(self.config["model_type"])

    @property
    def auto_class(self) -> str:
        """Name of the ``transformers`` auto class that builds this entry's model."""
        return TASK_AUTO_CLASS[self.task]

    @property
    def published_params_tolerance(self) -> int:
        """Absolute tolerance the rounding of :attr:`published_params` implies.

        Half the rounding unit: 0 for an exact count such as 6,738,415,616, 500,000 for "110M"
        (rounded to the million), 500,000,000 for "7B" (rounded to the billion).
        """
        return self.published_params_rounding // 2

    def config_dict(self) -> dict[str, Any]:
        """A fresh, mutable deep copy of :attr:`config` for ``AutoConfig.for_model(**...)``."""
        return copy.deepcopy(dict(self.config))


def _fail(file: str, problem: str) -> ModelSourceError:
    return ModelSourceError(
        f"built-in catalog entry {file} is invalid: {problem}; the installed package is damaged"
        " or was edited — reinstall gpuplan or fix the file"
    )


def _validate(file: str, raw: object) -> dict[str, Any]:
    """Check one parsed entry; return it as a dict or raise ModelSourceError naming the file."""
    if not isinstance(raw, dict):
        raise _fail(file, "the top level is not a JSON object")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise _fail(file, f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(_FIELDS)})")
    for key, (kind, required) in _FIELDS.items():
        if key not in raw:
            if required:
                raise _fail(file, f"required key {key!r} is missing")
            continue
        value = raw[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _fail(file, f"{key!r} must be a JSON {kind.__name__}, not {type(value).__name__}")
    stem = file.removesuffix(".json")
    if raw["name"] != stem or raw["name"] != raw["name"].strip().lower():
        raise _fail(file, f"name {raw['name']!r} must be lower case and equal the file name {stem!r}")
    if raw["task"] not in TASK_AUTO_CLASS:
        raise _fail(file, f"task {raw['task']!r} is not one of {', '.join(TASKS)}")
    if "/" not in raw["hf_id"]:
        raise _fail(file, f"hf_id {raw['hf_id']!r} is not an 'org/repo' hub id")
    try:
        datetime.date.fromisoformat(raw["retrieved"])
    except ValueError:
        raise _fail(file, f"retrieved {raw['retrieved']!r} is not an ISO date (YYYY-MM-DD)") from None
    for key in ("published_params", "default_seq_len", "published_params_rounding"):
        if raw.get(key, 1) <= 0:
            raise _fail(file, f"{key} must be positive, not {raw[key]}")
    if raw["published_params"] % raw.get("published_params_rounding", 1):
        raise _fail(file, "published_params is not a multiple of published_params_rounding")
    config = raw["config"]
    if not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise _fail(file, "config has no model_type")
    architectures = config.get("architectures")
    if not (
        isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures)
    ):
        raise _fail(file, "config.architectures must be a non-empty list of class names")
    if not all(isinstance(a, str) and a for a in raw.get("aliases", [])):
        raise _fail(file, "aliases must be a list of non-empty strings")
    return raw


@functools.cache
def _entries() -> Mapping[str, Mapping[str, Any]]:
    """All entries by name, parsed and validated once."""
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    entries: dict[str, Mapping[str, Any]] = {}
    for item in folder.iterdir():
        if not item.name.endswith(".json"):
            continue
        try:
            raw = json.loads(item.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _fail(item.name, f"cannot be read as JSON ({exc})") from exc
        entry = _validate(item.name, raw)
        entries[entry["name"]] = entry
    return MappingProxyType(dict(sorted(entries.items())))


@functools.cache
def _index() -> Mapping[str, str]:
    """Lower-cased lookup key (name, hf_id, hub repo name, alias) -> entry name."""
    index: dict[str, str] = {}
    for name, entry in _entries().items():
        hf_id = str(entry["hf_id"])
        keys = {name, hf_id.lower(), hf_id.rsplit("/", 1)[-1].lower()}
        keys.update(str(alias).lower() for alias in entry.get("aliases", []))
        for key in keys:
            other = index.setdefault(key, name)
            if other != name:
                raise _fail(f"{name}.json", f"lookup key {key!r} is also claimed by {other}.json")
    return MappingProxyType(index)


def catalog_names() -> list[str]:
    """The names of all built-in models, sorted."""
    return list(_entries())


def catalog_models() -> list[CatalogModel]:
    """Every built-in model, sorted by name (fresh objects, as :func:`get_catalog_model`)."""
    return [get_catalog_model(name) for name in _entries()]


def _resolve(name: str) -> str | None:
    return _index().get(name.strip().lower())


def is_catalog_name(name: str) -> bool:
    """True when :func:`get_catalog_model` would find ``name``."""
    return _resolve(name) is not None


def get_catalog_model(name: str) -> CatalogModel:
    """The built-in model called ``name`` (case-insensitive), or with that hub id.

    ``name`` may be the catalog name (``llama-3.1-8b``), the hub id (``meta-llama/Llama-3.1-8B``),
    the hub repository name alone (``Llama-3.1-8B``) or a listed alias. Raises
    :class:`~gpuplan.errors.UnknownModelError` naming the closest catalog names otherwise.
    """
    key = _resolve(name)
    if key is None:
        names = catalog_names()
        query = name.strip()
        hint = did_you_mean(query, names) or did_you_mean(query.rsplit("/", 1)[-1], names)
        raise UnknownModelError(
            f"unknown model {name!r}{hint} (built-in models: {list_choices(names, see='`gpuplan models`')};"
            " MODEL may also be ORG/NAME, timm:NAME,"
            " a config.json, .safetensors or .gguf file, or file.py:factory)"
        )
    raw = _entries()[key]
    return CatalogModel(
        name=raw["name"],
        task=raw["task"],
        hf_id=raw["hf_id"],
        source=raw["source"],
        retrieved=raw["retrieved"],
        published_params=raw["published_params"],
        published_params_source=raw["published_params_source"],
        default_seq_len=raw["default_seq_len"],
        config=MappingProxyType(copy.deepcopy(raw["config"])),
        published_params_rounding=raw.get("published_params_rounding", 1),
        notes=raw.get("notes", ""),
        aliases=tuple(raw.get("aliases", ())),
    )
