"""Diffusion and video pipelines as a MODEL: a diffusers ``model_index.json`` and each component's config.

A pipeline is several models run in sequence: text encoders (transformers classes), a denoiser
(a diffusers transformer or UNet) run once per sampling step, and a VAE that decodes the latents.
gpuplan builds each component from its config with the real ``diffusers`` / ``transformers`` class
(on fake tensors when tracing: never a weight) and runs the pipeline's own program around them —
the calls diffusers' pipeline ``__call__`` makes, with the shapes it makes them with — as one
:class:`PipelineModule`, so the ordinary tracer records the whole generation (trace/runner.py).

The denoiser is traced for one sampling step; the memory peak of a step is the same at every step,
and the time of the others is its ops counted ``steps`` (× 2 where classifier-free guidance runs a
second pass) times (:meth:`PipelineSource.op_repeats`).

Pipelines modelled (``model_index.json`` ``_class_name``): FluxPipeline, StableDiffusion3Pipeline,
StableDiffusionXLPipeline, WanPipeline, HunyuanVideoPipeline. Shipped configs (``pipelines/NAME/``)
carry their provenance in ``gpuplan.json``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gpuplan.errors import ConfigError, ModelSourceError, UnknownModelError, did_you_mean, one_line
from gpuplan.models.base import Inputs, ModelSource
from gpuplan.models.files import read_json_object
from gpuplan.models.pipeline_spec import (
    FAMILIES,
    T5_MAX_TOKENS,
    Component,
    Family,
    PipelineSpec,
    Shape,
    shape_of,
)
from gpuplan.workload import Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

_PACKAGE: Final = "gpuplan.models"
_FOLDER: Final = "pipelines"
_SKIPPED_SUFFIXES: Final = ("Tokenizer", "TokenizerFast", "Scheduler", "ImageProcessor", "FeatureExtractor")
"""model_index.json entries that hold no weights (tokenizers, schedulers, processors)."""


def _parse_index(name: str, index: Mapping[str, Any], read_config: Any,
                 provenance: Mapping[str, Any] | None = None) -> PipelineSpec:
    cls = index.get("_class_name")
    if cls not in FAMILIES:
        raise ModelSourceError(f"{name}: pipeline class {cls!r} is not one gpuplan models "
                               f"(supported: {', '.join(sorted(FAMILIES))})")
    components = []
    for comp, entry in sorted(index.items()):
        if comp.startswith("_") or not isinstance(entry, list) or len(entry) != 2 or entry[0] is None:
            continue
        library, class_name = entry
        if not isinstance(class_name, str) or class_name.endswith(_SKIPPED_SUFFIXES):
            continue
        if library not in ("diffusers", "transformers"):
            raise ModelSourceError(f"{name}: component {comp} comes from {library!r}; gpuplan builds diffusers and "
                                   "transformers components only")
        components.append(Component(comp, library, class_name, read_config(comp)))
    spec = PipelineSpec(name, str(cls), tuple(components), dict(provenance or {}))
    if spec.family.denoiser not in spec.names or "vae" not in spec.names:
        raise ModelSourceError(f"{name}: model_index.json lacks the {spec.family.denoiser} or the vae")
    return spec


def read_pipeline_folder(path: Path) -> PipelineSpec:
    """A diffusers folder: ``model_index.json`` and ``COMPONENT/config.json`` for each component."""
    index = read_json_object(path / "model_index.json")

    def read(comp: str) -> dict[str, Any]:
        config = path / comp / "config.json"
        if not config.is_file():
            raise ModelSourceError(f"{path}: component {comp} has no {comp}/config.json; download the pipeline's "
                                   "config files (model_index.json and every */config.json)")
        return read_json_object(config)

    return _parse_index(str(path), index, read)


@functools.cache
def pipeline_names() -> tuple[str, ...]:
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("_")))


def _read_resource(name: str, *parts: str) -> Any:
    node = resources.files(_PACKAGE).joinpath(_FOLDER, name, *parts)
    return json.loads(node.read_text(encoding="utf-8"))


def catalog_pipeline(name: str) -> PipelineSpec:
    """A shipped pipeline by catalog name (or its Hub id, case-insensitive)."""
    key = name.lower()
    for known in pipeline_names():
        meta = _read_resource(known, "gpuplan.json")
        if key == known or key == str(meta.get("hf_id", "")).lower():
            return _parse_index(known, _read_resource(known, "model_index.json"),
                                lambda comp, k=known: _read_resource(k, comp, "config.json"), meta)
    raise UnknownModelError(f"unknown pipeline {name!r}{did_you_mean(name, list(pipeline_names()))}")


def is_catalog_pipeline(name: str) -> bool:
    try:
        catalog_pipeline(name)
    except UnknownModelError:
        return False
    return True


# ----------------------------------------------------------------------------------- source ----

class PipelineSource(ModelSource):
    """A diffusers pipeline: its components built from their configs, run as the pipeline runs them."""

    kind = "pipeline"

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.task = "text-to-video" if spec.family.video else "text-to-image"

    @property
    def denoiser(self) -> str:
        return self.spec.family.denoiser

    @property
    def generates(self) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "pipeline_class": self.spec.pipeline_class,
                "components": [c.name for c in self.spec.components]}

    def layer_counts(self) -> dict[str, int]:
        cfg = self.spec.component(self.denoiser).config
        return {f"{self.denoiser}.{key}": int(cfg[key]) for key, _ in self.spec.family.stacks if key in cfg}

    def block_paths(self) -> dict[str, str]:
        return {f"{self.denoiser}.{key}": f"{self.denoiser}.{path}" for key, path in self.spec.family.stacks}

    def check_workload(self, workload: Workload) -> Shape:
        """Every pipeline-specific refusal, before any trace (one line each)."""
        shape = shape_of(self.spec, workload)
        unknown = [n for n in workload.quantize_components if n not in self.spec.names]
        if unknown:
            raise ConfigError(f"--quantize-components {','.join(unknown)}: {self.name} has no such component "
                              f"(components: {', '.join(self.spec.names)})")
        cls = self.spec.pipeline_class
        if workload.seq_len is not None and cls == "StableDiffusionXLPipeline":
            raise ConfigError(f"--seq-len sets a T5 / Llama prompt length (max_sequence_length); {self.name}'s CLIP "
                              "encoders take 77 tokens: drop --seq-len")
        if workload.seq_len is not None and cls in T5_MAX_TOKENS and workload.seq_len > T5_MAX_TOKENS[cls]:
            raise ConfigError(f"--seq-len {workload.seq_len}: {cls} takes max_sequence_length up to "
                              f"{T5_MAX_TOKENS[cls]}; use {T5_MAX_TOKENS[cls]} or less")
        if workload.gguf_type is not None:
            self._check_gguf(workload, workload.gguf_type)
        if workload.mode == "generate":
            raise ConfigError(f"{self.name} is a diffusion pipeline: use --mode infer (a generation of --steps "
                              "denoising steps) or --mode train")
        if workload.trains and workload.offload != "none":
            raise ConfigError(f"--offload {workload.offload} is diffusers' inference offload; with --mode train use "
                              "--offload none")
        return shape

    def _check_gguf(self, workload: Workload, gguf_type: str) -> None:
        from gpuplan.models.gguf_mix import GGUF_TYPES

        if gguf_type not in GGUF_TYPES:
            raise ConfigError(f"unknown --gguf-type {gguf_type!r} (allowed: {', '.join(GGUF_TYPES)}): the "
                              "llama-quantize type in the GGUF file's name, e.g. flux1-dev-Q4_K_S.gguf is Q4_K_S")
        names = workload.quantize_components or (self.denoiser,)
        other = [n for n in names if n in self.spec.names and self.spec.component(n).library != "diffusers"]
        if other:
            raise ConfigError(f"--gguf-type {gguf_type} with --quantize-components {','.join(other)}: transformers "
                              "dequantizes a GGUF checkpoint when it loads it (nothing stays quantized); name the "
                              f"diffusers {self.denoiser} only")
        if workload.load_in != "none" or workload.component_quant != "none":
            other_flag = f"--load-in-{workload.load_in}" if workload.load_in != "none" else \
                f"--weight-quant {workload.component_quant}"
            raise ConfigError(f"--gguf-type {gguf_type} and {other_flag} are two formats for the same weights; "
                              "keep one")

    def op_repeats(self, workload: Workload) -> dict[str, int]:
        """Ops of the denoiser run once per step (twice with sequential guidance): module prefix -> count."""
        if workload.trains:
            return {}
        shape = shape_of(self.spec, workload)
        # a second (unconditional) pass is traced as it runs, so both passes are in the traced ops already
        return {self.denoiser: shape.steps, "scheduler": shape.steps}

    def workload_notes(self, workload: Workload) -> tuple[str, ...]:
        shape = shape_of(self.spec, workload)
        fam = self.spec.family
        size = f"{shape.height}×{shape.width}" + (f", {shape.frames} frames" if shape.frames else "")
        if workload.trains:
            return (f"{self.name}: one training step of the {self.denoiser} at {size}, batch {shape.batch} "
                    f"(flow-matching / noise-prediction MSE loss as diffusers' training scripts compute it)",)
        guidance = {"none": "no classifier-free guidance pass (guidance embedded or off)",
                    "batch": "classifier-free guidance: prompt and negative prompt in one batch of 2×",
                    "sequential": "classifier-free guidance: a second, unconditional pass per step"}[fam.guidance]
        return (f"{self.name}: text encoders → {shape.steps} {self.denoiser} steps → VAE decode at {size}, "
                f"batch {shape.batch}; {guidance}; the {self.denoiser} is traced for one step (its peak is every "
                "step's) and its time counted for all",)

    # -- building ---------------------------------------------------------------------------
    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        shape = self.check_workload(workload)
        skip = set()
        if workload.trains:
            if workload.cache_text_embeddings:
                skip |= {c.name for c in self.spec.components if c.role == "text_encoder"}
            if workload.cache_latents:
                skip.add("vae")
        modules = {}
        for comp in self.spec.components:
            if comp.name in skip:
                continue
            overrides = {k.split(".", 1)[1]: v for k, v in (layers or {}).items() if k.startswith(comp.name + ".")}
            modules[comp.name] = build_component(self.name, comp, overrides)
        from gpuplan.models.pipeline_program import PipelineModule

        return PipelineModule(self.spec, modules, workload, shape)

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        return module.make_inputs()  # type: ignore[no-any-return, operator]

    def loss(self, module: nn.Module, output: Any, inputs: Inputs, workload: Workload) -> torch.Tensor:
        return output  # type: ignore[no-any-return]  # the pipeline module's training forward returns the loss


def build_component(pipeline: str, comp: Component, overrides: Mapping[str, Any]) -> nn.Module:
    """One component from its config with its library's own class (on the current default device/dtype)."""
    cfg = {k: v for k, v in comp.config.items() if not k.startswith("_")}
    cfg.update(overrides)
    try:
        if comp.library == "transformers":
            import transformers

            cls = getattr(transformers, comp.class_name, None)
            model_type = cfg.pop("model_type", None)
            for key in ("transformers_version", "_name_or_path", "architectures", "torch_dtype", "dtype"):
                cfg.pop(key, None)
            if cls is None or not isinstance(model_type, str):
                raise ModelSourceError(f"{pipeline}: transformers has no class {comp.class_name!r} (or the config has "
                                       "no model_type)")
            hf_config = transformers.AutoConfig.for_model(model_type, **cfg)
            return cls(hf_config)  # type: ignore[no-any-return]
        diffusers = _require_diffusers()
        cls = getattr(diffusers, comp.class_name, None)
        if cls is None:
            raise ModelSourceError(f"{pipeline}: diffusers {diffusers.__version__} has no class {comp.class_name!r}")
        return cls.from_config(cfg)  # type: ignore[no-any-return]
    except ModelSourceError:
        raise
    except Exception as exc:
        raise ModelSourceError(f"{pipeline}: cannot build {comp.name} ({comp.class_name}) from its config: "
                               f"{type(exc).__name__}: {one_line(exc, 200)}") from exc


def _require_diffusers() -> Any:
    try:
        import diffusers
    except ImportError as exc:
        from gpuplan.errors import MissingDependencyError

        raise MissingDependencyError("diffusion pipelines need the 'diffusers' package: "
                                     "pip install 'gpuplan[diffusion]'") from exc
    return diffusers


def resolve_pipeline(spec: str) -> PipelineSource | None:
    """A catalog pipeline name or a diffusers folder, else None."""
    path = Path(spec)
    if path.is_dir() and (path / "model_index.json").is_file():
        return PipelineSource(read_pipeline_folder(path))
    if path.name == "model_index.json" and path.is_file():
        return PipelineSource(read_pipeline_folder(path.parent))
    if is_catalog_pipeline(spec):
        return PipelineSource(catalog_pipeline(spec))
    return None


def resolve_hub_pipeline(spec: str, *, download: bool = False) -> PipelineSource | None:
    """A Hub id naming a diffusers repo: its cached ``model_index.json`` and component configs, else the shipped
    pipeline published under that id, else (``download``: the repo has no config.json and the network is allowed)
    the config files alone downloaded; None when the repo is not a pipeline: the caller reads it as a
    transformers model."""
    from gpuplan.models import hub

    match = hub.HUB_ID.match(spec)
    if match is None:
        return None
    repo, revision = match.group("repo"), match.group("revision")
    cache_dir = hub.hub_cache_dir()
    try:
        index = hub.cached_file(repo, "model_index.json", revision, cache_dir)
    except ValueError:
        return None  # not a valid repo id: the transformers path says why
    if index is None and revision is None:
        for known in pipeline_names():
            if str(_read_resource(known, "gpuplan.json").get("hf_id", "")).lower() == repo.lower():
                return PipelineSource(catalog_pipeline(known))
    if index is None:
        if not download or hub.hub_offline():
            return None
        try:
            index = hub.fetch_config(repo, revision, cache_dir, filename="model_index.json")
        except ModelSourceError:
            return None  # no model_index.json (or no network): the config.json path gives its own answer
    snapshot = index.parent
    content = read_json_object(index)
    if not str(content.get("_class_name", "")).endswith("Pipeline"):
        return None  # not a diffusers model_index.json
    for comp, entry in content.items():
        if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)
                and not entry[1].endswith(_SKIPPED_SUFFIXES) and not comp.startswith("_")
                and not (snapshot / comp / "config.json").is_file()):
            if hub.hub_offline():
                raise ModelSourceError(f"{spec}: {comp}/config.json is not in the Hugging Face cache (HF_HUB_OFFLINE "
                                       f"is set); run `huggingface-cli download {repo} --include '*.json'`")
            hub.fetch_config(repo, revision, cache_dir, filename=f"{comp}/config.json")
    return PipelineSource(read_pipeline_folder(snapshot))


def component_names(spec: PipelineSpec) -> Sequence[str]:
    return spec.names


__all__ = ["FAMILIES", "Component", "Family", "PipelineSource", "PipelineSpec", "Shape", "build_component",
           "catalog_pipeline", "component_names", "is_catalog_pipeline", "pipeline_names", "read_pipeline_folder",
           "resolve_hub_pipeline", "resolve_pipeline", "shape_of"]
