"""A diffusers pipeline's plain description: its family (how ``__call__`` runs the components), its
components and the generation's sizes (:class:`Shape`, :func:`shape_of`).

Below both models/pipeline.py (reading the specs, the source) and models/pipeline_program.py (the program
run on the built components), which each name these types: neither imports the other for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuplan.errors import ConfigError
from gpuplan.workload import Workload


@dataclass(frozen=True, slots=True)
class Family:
    """How one diffusers pipeline class runs its components (its ``__call__``), in the numbers it uses."""

    pipeline_class: str
    denoiser: str
    """Component name of the denoiser (``transformer`` or ``unet``)."""
    video: bool
    default_steps: int
    default_height: int
    default_width: int
    default_frames: int | None
    guidance: str
    """none | batch (CFG doubles the batch of one pass) | sequential (a second, unconditional pass)."""
    pixel_multiple: int
    """Height and width must be multiples of this (VAE factor × patch size)."""
    temporal_factor: int = 1
    """Frames must be ``temporal_factor·k + 1`` (the video VAE's causal compression)."""
    stacks: tuple[tuple[str, str], ...] = ()
    """(config key of the denoiser, module path) of its repeated blocks, traced at 3 and 2 and scaled."""
    latents_fp32: bool = False
    """The pipeline keeps the latents in float32 between steps (Wan, HunyuanVideo)."""


FAMILIES: Final[Mapping[str, Family]] = {
    f.pipeline_class: f for f in (
        # FluxPipeline.__call__ defaults (diffusers 0.42): 28 steps, 1024², guidance embedded (no second pass)
        Family("FluxPipeline", "transformer", False, 28, 1024, 1024, None, "none", 16,
               stacks=(("num_layers", "transformer_blocks"), ("num_single_layers", "single_transformer_blocks"))),
        # StableDiffusion3Pipeline: 28 steps, guidance 7.0 > 1: prompt and negative in one batch of 2B
        Family("StableDiffusion3Pipeline", "transformer", False, 28, 1024, 1024, None, "batch", 16),
        # StableDiffusionXLPipeline: 50 steps, guidance 5.0 (batch of 2B)
        Family("StableDiffusionXLPipeline", "unet", False, 50, 1024, 1024, None, "batch", 8),
        # WanPipeline: 50 steps, 480×832, 81 frames, guidance 5.0 as a second transformer call
        Family("WanPipeline", "transformer", True, 50, 480, 832, 81, "sequential", 16, temporal_factor=4,
               stacks=(("num_layers", "blocks"),), latents_fp32=True),
        # HunyuanVideoPipeline: 50 steps, 720×1280, 129 frames, embedded guidance (true_cfg_scale 1: no 2nd pass)
        Family("HunyuanVideoPipeline", "transformer", True, 50, 720, 1280, 129, "none", 16, temporal_factor=4,
               stacks=(("num_layers", "transformer_blocks"), ("num_single_layers", "single_transformer_blocks")),
               latents_fp32=True),
    )
}

T5_MAX_TOKENS: Final[Mapping[str, int]] = {"FluxPipeline": 512, "StableDiffusion3Pipeline": 512}
"""The pipelines' own refusal: ``max_sequence_length`` cannot be greater than 512 (diffusers 0.42)."""


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    library: str
    class_name: str
    config: Mapping[str, Any]

    @property
    def role(self) -> str:
        if self.name.startswith("text_encoder"):
            return "text_encoder"
        return "vae" if self.name == "vae" else "denoiser"


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    name: str
    pipeline_class: str
    components: tuple[Component, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> Family:
        return FAMILIES[self.pipeline_class]

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)


# ------------------------------------------------------------------------------------ shapes ----

@dataclass(frozen=True, slots=True)
class Shape:
    """The generation's sizes, checked against what the pipeline can take."""

    batch: int
    height: int
    width: int
    frames: int | None
    steps: int

    @property
    def latent_height(self) -> int:
        return self.height // 8

    @property
    def latent_width(self) -> int:
        return self.width // 8

    @property
    def latent_frames(self) -> int:
        return 1 if self.frames is None else (self.frames - 1) // 4 + 1


def shape_of(spec: PipelineSpec, workload: Workload) -> Shape:
    """The workload's sizes for this pipeline (its defaults where not given), or one-line errors."""
    fam = spec.family
    height = workload.image_size or fam.default_height
    width = workload.image_width or (workload.image_size if workload.image_size else fam.default_width)
    for what, value in (("height", height), ("width", width)):
        if value % fam.pixel_multiple:
            low = value - value % fam.pixel_multiple
            raise ConfigError(f"--image-size {what} {value} is not a multiple of {fam.pixel_multiple} "
                              f"({spec.name}: VAE factor 8 × patch size); use {low or fam.pixel_multiple} or "
                              f"{low + fam.pixel_multiple}")
    frames = workload.frames
    if fam.video:
        frames = frames or fam.default_frames
        assert frames is not None
        if (frames - 1) % fam.temporal_factor:
            k = (frames - 1) // fam.temporal_factor
            raise ConfigError(f"--frames {frames}: {spec.name}'s video VAE takes {fam.temporal_factor}·k + 1 frames; "
                              f"use {fam.temporal_factor * k + 1} or {fam.temporal_factor * (k + 1) + 1}")
    elif frames is not None:
        raise ConfigError(f"--frames applies to video pipelines; {spec.name} makes images (drop --frames)")
    steps = workload.steps or fam.default_steps
    return Shape(workload.batch_size, height, width, frames, steps)
