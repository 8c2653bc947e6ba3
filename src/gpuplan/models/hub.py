"""Hugging Face Hub ids as a MODEL form: ``ORG/NAME`` or ``ORG/NAME@REVISION``.

Offline first. The id resolves, in this order, to:

1. the repo's ``config.json`` in the standard Hugging Face cache (``$HF_HUB_CACHE``, else
   ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the layout ``huggingface_hub`` writes:
   ``models--ORG--NAME/refs/REVISION`` → ``snapshots/<commit>/config.json``), with the cached
   safetensors headers (``model.safetensors`` or every shard of ``model.safetensors.index.json``)
   when the snapshot holds them;
2. the built-in catalog entry published under that id (no revision given);
3. with the network allowed (``HF_HUB_OFFLINE`` unset), ``config.json`` alone fetched into that
   cache by ``huggingface_hub.hf_hub_download``, after its size is checked against the same bound
   as any config.json (:data:`gpuplan.models.files.CONFIG_MAX_BYTES`). No weights are downloaded,
   and ``trust_remote_code`` is never used.

Otherwise one line says what to download or pass instead, and a gated repo one line about the token.
An existing path always wins over a Hub id, and ``package.module:factory`` holds a ``:`` that no Hub
id has (models/sources.resolve_model).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import (
    GpuplanError,
    MissingDependencyError,
    ModelSourceError,
    UnknownModelError,
    did_you_mean,
    one_line,
)
from gpuplan.extras import HUB
from gpuplan.models.files import CONFIG_MAX_BYTES, WeightsSummary, read_config_json, read_safetensors_headers

HUB_ID: Final = re.compile(
    r"^(?P<repo>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9._-]*[A-Za-z0-9_])"
    r"(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._/-]*))?$")
"""``ORG/NAME[@REVISION]``: huggingface_hub's repo-id characters (letters, digits, ``-_.``), one slash."""

OFFLINE_VALUES: Final = frozenset({"1", "on", "yes", "true"})
"""Values of ``HF_HUB_OFFLINE`` that mean offline (huggingface_hub's ``_is_true``)."""

DOWNLOAD_TIMEOUT_S: Final = 10.0
"""Seconds one Hub request may wait (huggingface_hub's own default ``etag_timeout``)."""


HUB_URL: Final = re.compile(
    r"^(?:(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/|hf://)"
    r"(?P<kind>(?:datasets|spaces)/)?(?P<repo>[^/?#@]+/[^/?#@]+)"
    r"(?:@(?P<at>[^/?#]+)|/(?:tree|blob|resolve)/(?P<rev>[^/?#]+))?(?:[/?#].*)?$")
"""A model page or file URL as people paste it: ``https://huggingface.co/ORG/NAME[/tree/REV/...]``,
``hf.co/ORG/NAME`` or huggingface_hub's file-system form ``hf://ORG/NAME[@REV]``."""


def hub_id_from_url(spec: str) -> str | None:
    """The ``ORG/NAME[@REVISION]`` a Hub URL names, or None when ``spec`` is not a Hub URL; a dataset's or
    a Space's URL is refused in one line (only models have a config.json to plan from)."""
    match = HUB_URL.match(spec)
    if match is None:
        return None
    if match["kind"]:
        raise ModelSourceError(f"{spec!r} is a Hugging Face {match['kind'].rstrip('s/')}, not a model; pass a model's "
                               "id ORG/NAME (e.g. Qwen/Qwen3-8B) or its page URL")
    revision = match["at"] or match["rev"]
    hub_id = match["repo"] + (f"@{revision}" if revision else "")
    if not is_hub_id(hub_id):
        raise ModelSourceError(f"{spec!r} does not name a Hub model ORG/NAME[@REVISION]; pass e.g. "
                               "https://huggingface.co/Qwen/Qwen3-8B or Qwen/Qwen3-8B@main")
    return hub_id


def is_hub_id(spec: str) -> bool:
    """``spec`` has the shape of a Hub id (the caller has ruled out existing paths)."""
    match = HUB_ID.match(spec)
    # '..' never names a repo or a revision (huggingface_hub refuses it), and would climb out of refs/
    return match is not None and ".." not in spec and not spec.startswith(".")


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub uses, read from the environment now (not at import)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface" / "hub"


def hub_offline() -> bool:
    return any(os.environ.get(var, "").strip().lower() in OFFLINE_VALUES
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _require_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise MissingDependencyError(HUB.message() + " (or pass the model's config.json)") from exc
    return huggingface_hub


DEFAULT_REVISION: Final = "main"
"""The branch the Hub serves when no revision is given: ``ORG/NAME@main`` is ``ORG/NAME``."""


def _download_hint(repo: str, revision: str | None) -> str:
    # `hf` is the command current huggingface_hub installs (huggingface-cli is gone from it)
    rev = f" --revision {revision}" if revision and revision != DEFAULT_REVISION else ""
    return f"`hf download {repo} config.json{rev}`"


LOGIN_HINT: Final = "set HF_TOKEN or run `hf auth login`"


def cached_config(repo: str, revision: str | None, cache_dir: Path) -> Path | None:
    """The cached config.json of ``repo`` at ``revision`` (a branch, tag or commit), if the cache holds it."""
    hub = _require_hub()
    found = hub.try_to_load_from_cache(repo, "config.json", cache_dir=str(cache_dir), revision=revision)
    return Path(found) if isinstance(found, str) else None


def cached_file(repo: str, filename: str, revision: str | None, cache_dir: Path) -> Path | None:
    """The cached ``filename`` of ``repo`` at ``revision``, if the cache holds it (a diffusers repo's
    ``model_index.json`` and component configs)."""
    hub = _require_hub()
    found = hub.try_to_load_from_cache(repo, filename, cache_dir=str(cache_dir), revision=revision)
    return Path(found) if isinstance(found, str) else None


def cached_weights(snapshot: Path) -> WeightsSummary | None:
    """Headers of the safetensors weights a cached snapshot holds completely (every shard the index
    names), else None: a partial download would undercount."""
    index = snapshot / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        except (OSError, ValueError, AttributeError):
            return None
        shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        if not shards or not all(isinstance(s, str) and (snapshot / s).is_file() for s in shards):
            return None
    elif not (snapshot / "model.safetensors").is_file():
        return None
    return read_safetensors_headers(snapshot)


def fetch_config(repo: str, revision: str | None, cache_dir: Path, filename: str = "config.json") -> Path:
    """Download ``filename`` (``config.json``, or a diffusers repo's ``model_index.json`` and component configs)
    alone into the cache; one line for each way the Hub can refuse."""
    hub = _require_hub()
    from huggingface_hub import errors

    shown = repo + (f"@{revision}" if revision else "")
    try:
        url = hub.hf_hub_url(repo, filename, revision=revision)
        meta = hub.get_hf_file_metadata(url, timeout=DOWNLOAD_TIMEOUT_S)
        if meta.size is not None and meta.size > CONFIG_MAX_BYTES:
            raise ModelSourceError(f"{shown}: its {filename} is {meta.size:,} bytes, more than the "
                                   f"{CONFIG_MAX_BYTES:,} gpuplan reads; download it yourself and pass its path")
        path = hub.hf_hub_download(repo, filename, revision=revision, cache_dir=str(cache_dir),
                                   etag_timeout=DOWNLOAD_TIMEOUT_S)
    except errors.GatedRepoError:
        raise ModelSourceError(
            f"{shown} is a gated repo: accept its terms on https://huggingface.co/{repo} and give gpuplan a token "
            f"({LOGIN_HINT}), or pass a config.json path") from None
    except errors.RepositoryNotFoundError:
        raise UnknownModelError(
            f"no Hugging Face repo {repo!r} (or it is private: {LOGIN_HINT}); "
            "check the id on https://huggingface.co, or pass a config.json path") from None
    except errors.RevisionNotFoundError:
        raise ModelSourceError(f"{repo} has no revision {revision!r}; give a branch, tag or commit of the repo "
                               "after @, or drop @ for main") from None
    except errors.LocalEntryNotFoundError as exc:  # the download could not reach the Hub (a subclass of the next)
        raise _unreachable(shown, repo, revision, cache_dir, exc) from None
    except errors.EntryNotFoundError:
        raise ModelSourceError(f"{shown} has no {filename} (a GGUF-only repo? download the .gguf file and pass its "
                               "path); pass the model's config.json") from None
    except GpuplanError:
        raise
    except Exception as exc:
        # client's own exception types (httpx, httpx2, requests) differ between huggingface_hub versions, and
        # none of them is OSError in every version; whatever the Hub call raised is one line, never a traceback
        raise _unreachable(shown, repo, revision, cache_dir, exc) from None
    return Path(path)


def _unreachable(shown: str, repo: str, revision: str | None, cache_dir: Path, exc: BaseException) -> ModelSourceError:
    return ModelSourceError(
        f"{shown}: not in the Hugging Face cache {cache_dir} and the Hub cannot be reached "
        f"({type(exc).__name__}: {one_line(exc, 80)}); run {_download_hint(repo, revision)} "
        "(or set HF_HUB_OFFLINE=1 to skip the Hub), or pass a config.json path")


def _catalog_entry(repo: str) -> Any:
    from gpuplan.models.catalog import get_catalog_model

    try:
        entry = get_catalog_model(repo)
    except UnknownModelError:
        return None
    return entry if entry.hf_id.lower() == repo.lower() else None


@dataclass(frozen=True, slots=True)
class HubModel:
    """What a Hub id resolved to: a config.json (and the cached snapshot it came from), or the built-in
    catalog entry published under that id."""

    config: Mapping[str, Any]
    snapshot: Path | None = None
    catalog: Any = None
    """The :class:`~gpuplan.models.catalog.CatalogModel` when the answer is the built-in entry."""


def resolve_hub_id(spec: str) -> HubModel:
    """The config a Hub id names (see the module docstring); models/sources.resolve_model makes the source."""
    match = HUB_ID.match(spec)
    if match is None:
        raise UnknownModelError(f"{spec!r} is not a Hugging Face Hub id ORG/NAME[@REVISION]")
    repo, revision = match.group("repo"), match.group("revision")
    if revision == DEFAULT_REVISION:
        revision = None  # the default branch: the same cache entry, catalog entry and download as no revision
    cache_dir = hub_cache_dir()
    try:
        config = cached_config(repo, revision, cache_dir)
    except ValueError as exc:  # HFValidationError: the Hub's own rules for ids (length, '--', '.git')
        raise UnknownModelError(f"{spec!r} is not a valid Hugging Face Hub id: {one_line(exc, 160)}") from None
    if config is None and revision is None:
        entry = _catalog_entry(repo)
        if entry is not None:
            return HubModel(entry.config, catalog=entry)
    if config is None:
        if hub_offline():
            from gpuplan.models.catalog import catalog_models

            built_in = did_you_mean(repo, [m.hf_id for m in catalog_models()]).replace("; did you mean", "; built in:")
            raise ModelSourceError(
                f"{spec}: no such path here, and not in the Hugging Face cache {cache_dir} (HF_HUB_OFFLINE is set); "
                f"run {_download_hint(repo, revision)} or pass a config.json path{built_in}")
        config = fetch_config(repo, revision, cache_dir)
    return HubModel(read_config_json(config), snapshot=config.parent)


__all__ = ["HUB_ID", "HubModel", "cached_config", "cached_file", "cached_weights", "fetch_config", "hub_cache_dir",
           "hub_offline", "is_hub_id", "resolve_hub_id"]
