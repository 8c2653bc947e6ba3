"""The pipeline's program: what a diffusers pipeline ``__call__`` (inference) or a diffusers training script
(one step of the denoiser) does with its components, as one ``nn.Module`` the tracer runs.

Inference: encode the prompt (and the negative prompt where classifier-free guidance needs it), make the
latents, run the denoiser for one step, the scheduler's update, then decode with the VAE. Every call uses
the shapes the pipeline uses (token counts, latent packing, guidance batch), so the trace holds the
tensors a real generation holds; the values mean nothing (fake tensors). The scheduler's update runs in a
``scheduler`` submodule, so its ops are counted once per step like the denoiser's
(``PipelineSource.op_repeats``).

Training: one step of the denoiser as diffusers' training scripts run it (frozen encoders and VAE in eval
mode under ``no_grad``, noise added at a random time, the MSE between the prediction and its target), with
the text embeddings and latents taken as inputs when they were cached beforehand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import torch
import torch.nn.functional as F
from torch import nn

from gpuplan.models.base import Inputs
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from gpuplan.models.pipeline_spec import PipelineSpec, Shape

FLUX_T5_TOKENS: Final = {True: 512, False: 256}
"""FluxPipeline max_sequence_length: 512 (dev, guidance-distilled) / 256 (schnell's model card)."""
CLIP_TOKENS: Final = 77
SD3_T5_TOKENS: Final = 256
WAN_T5_TOKENS: Final = 512
HUNYUAN_TOKENS: Final = 256
HUNYUAN_TEMPLATE_TOKENS: Final = 95
"""HunyuanVideoPipeline's prompt template: 95 template tokens cropped after the Llama encoder."""
HUNYUAN_SKIP_LAYERS: Final = 2
"""HunyuanVideoPipeline num_hidden_layers_to_skip: the Llama hidden state 3rd from the end."""



GUIDANCE_SCALE = 5.0
"""Any guidance scale above 1 (its value changes no shape)."""


class Scheduler(nn.Module):
    """The per-step update outside the denoiser: guidance combination and the sampler's step, computed in
    float32 as diffusers' schedulers do (``sample.to(torch.float32)`` ... ``.to(model_output.dtype)``)."""

    def forward(self, sample: torch.Tensor, output: torch.Tensor, guidance: str,
                uncond: torch.Tensor | None = None) -> torch.Tensor:
        if guidance == "batch":
            uncond, output = output.chunk(2)
        if uncond is not None:
            output = uncond + GUIDANCE_SCALE * (output - uncond)
        keep = sample.dtype
        prev = sample.to(torch.float32) + (-0.02) * output
        return prev.to(keep)


class PipelineModule(nn.Module):
    """The components as submodules (named as in model_index.json) and the pipeline's program as forward."""

    def __init__(self, spec: PipelineSpec, modules: Mapping[str, nn.Module], workload: Workload,
                 shape: Shape) -> None:
        super().__init__()
        self.spec = spec
        self.family = spec.family
        self.shape = shape
        self.trains = workload.trains
        self.cache_text = workload.trains and workload.cache_text_embeddings
        self.cache_latents = workload.trains and workload.cache_latents
        self.seq_len = workload.seq_len
        """--seq-len: the pipeline's ``max_sequence_length`` (T5 / Llama prompt tokens); None: its default."""
        self._dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(workload.param_dtype, torch.float32)
        for name, module in modules.items():
            self.add_module(name, module)
        self.scheduler = Scheduler()
        self.denoiser_name = spec.family.denoiser
        if "vae" in modules and not self.trains:
            vae = modules["vae"]
            if workload.vae_tiling:
                vae.enable_tiling()  # type: ignore[operator]
            if workload.vae_slicing:
                vae.enable_slicing()  # type: ignore[operator]
        if self.trains:
            for name, module in modules.items():
                if name != self.denoiser_name:
                    module.requires_grad_(False)
        self._phase: Any = None

    def set_phase_sink(self, enter: Any) -> None:
        """The recorder's ``enter``: the program names the stage it runs (``encode:NAME``, ``denoise``, ...)."""
        self._phase = enter

    def _c(self, name: str) -> Any:
        """A component by its model_index.json name."""
        return getattr(self, name)

    def _enter(self, phase: str) -> None:
        if self._phase is not None:
            self._phase(phase)

    def train(self, mode: bool = True) -> PipelineModule:
        """Only the denoiser trains; the encoders and the VAE stay in eval mode (as the scripts keep them)."""
        super().train(False)
        getattr(self, self.denoiser_name).train(mode)
        return self

    # -- inputs -------------------------------------------------------------------------------
    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the pipeline was loaded in (``torch_dtype``): its latents and embeddings."""
        return self._dtype

    def _ids(self, name: str, tokens: int) -> torch.Tensor:
        vocab = int(self.spec.component(name).config.get("vocab_size", 32000))
        return torch.randint(0, vocab, (self.shape.batch, tokens))

    @property
    def prompt_tokens(self) -> int:
        """The long encoder's tokens (``max_sequence_length``: T5, or HunyuanVideo's Llama after its template)."""
        if self.seq_len is not None:
            return self.seq_len
        cls = self.family.pipeline_class
        if cls == "FluxPipeline":
            return FLUX_T5_TOKENS[bool(self.spec.component("transformer").config.get("guidance_embeds", False))]
        return {"StableDiffusion3Pipeline": SD3_T5_TOKENS, "WanPipeline": WAN_T5_TOKENS}.get(cls, HUNYUAN_TOKENS)

    def _tokens(self) -> dict[str, int]:
        cls = self.family.pipeline_class
        if cls == "FluxPipeline":
            return {"text_encoder": CLIP_TOKENS, "text_encoder_2": self.prompt_tokens}
        if cls == "StableDiffusion3Pipeline":
            return {"text_encoder": CLIP_TOKENS, "text_encoder_2": CLIP_TOKENS, "text_encoder_3": self.prompt_tokens}
        if cls == "StableDiffusionXLPipeline":
            return {"text_encoder": CLIP_TOKENS, "text_encoder_2": CLIP_TOKENS}
        if cls == "WanPipeline":
            return {"text_encoder": self.prompt_tokens}
        return {"text_encoder": self.prompt_tokens + HUNYUAN_TEMPLATE_TOKENS, "text_encoder_2": CLIP_TOKENS}

    def _latent_shape(self) -> tuple[int, ...]:
        s = self.shape
        channels = int(self.spec.component("vae").config.get("latent_channels",
                                                              self.spec.component("vae").config.get("z_dim", 4)))
        if self.family.video:
            return (s.batch, channels, s.latent_frames, s.latent_height, s.latent_width)
        return (s.batch, channels, s.latent_height, s.latent_width)

    def make_inputs(self) -> Inputs:
        kwargs: dict[str, Any] = {}
        if self.cache_text:
            kwargs["embeddings"] = self._cached_embeddings()
        else:
            kwargs.update({f"ids_{name}": self._ids(name, n) for name, n in self._tokens().items()})
        if self.trains:
            s = self.shape
            if self.cache_latents:
                kwargs["latents"] = torch.randn(self._latent_shape(), dtype=self.compute_dtype)
            else:
                frames = (s.frames,) if self.family.video and s.frames else ()
                kwargs["pixels"] = torch.randn((s.batch, 3, *frames, s.height, s.width), dtype=self.compute_dtype)
        return Inputs(kwargs=kwargs)

    def _cached_embeddings(self) -> dict[str, torch.Tensor]:
        """The prompt embeddings a script computed once before training (shapes of the encoders' outputs, read
        from the denoiser's config: what it takes)."""
        b, dtype = self.shape.batch, self.compute_dtype
        cls = self.family.pipeline_class
        cfg = self.spec.component(self.denoiser_name).config

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(b, *shape, dtype=dtype)

        if cls == "FluxPipeline":
            t5 = self._tokens()["text_encoder_2"]
            return {"prompt": randn(t5, cfg["joint_attention_dim"]), "pooled": randn(cfg["pooled_projection_dim"])}
        if cls == "StableDiffusion3Pipeline":
            return {"prompt": randn(CLIP_TOKENS + self.prompt_tokens, cfg["joint_attention_dim"]),
                    "pooled": randn(cfg["pooled_projection_dim"])}
        if cls == "StableDiffusionXLPipeline":
            pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
            return {"prompt": randn(CLIP_TOKENS, cfg["cross_attention_dim"]), "pooled": randn(pooled)}
        if cls == "WanPipeline":
            return {"prompt": randn(self.prompt_tokens, cfg["text_dim"])}
        return {"prompt": randn(self.prompt_tokens, cfg["text_embed_dim"]),
                "pooled": randn(cfg["pooled_projection_dim"])}

    # -- encoders -------------------------------------------------------------------------------
    def _clip(self, name: str, ids: torch.Tensor, hidden_index: int | None) -> tuple[torch.Tensor | None, torch.Tensor]:
        self._enter(f"encode:{name}")
        out = getattr(self, name)(ids, output_hidden_states=hidden_index is not None)
        pooled = getattr(out, "text_embeds", None)
        if pooled is None:
            pooled = out.pooler_output
        hidden = out.hidden_states[hidden_index] if hidden_index is not None else None
        return hidden, pooled

    def _t5(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        self._enter(f"encode:{name}")
        return getattr(self, name)(ids).last_hidden_state  # type: ignore[no-any-return]

    def _encode(self, kw: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The prompt's embeddings as the pipeline's ``encode_prompt`` makes them."""
        if self.cache_text:
            return dict(kw["embeddings"])
        cls = self.family.pipeline_class
        ids = {k.removeprefix("ids_"): v for k, v in kw.items() if k.startswith("ids_")}
        if cls == "FluxPipeline":
            _, pooled = self._clip("text_encoder", ids["text_encoder"], None)
            return {"prompt": self._t5("text_encoder_2", ids["text_encoder_2"]), "pooled": pooled}
        if cls == "StableDiffusion3Pipeline":
            hl, pl = self._clip("text_encoder", ids["text_encoder"], -2)
            hg, pg = self._clip("text_encoder_2", ids["text_encoder_2"], -2)
            t5 = self._t5("text_encoder_3", ids["text_encoder_3"])
            clip = torch.cat([hl, hg], dim=-1)  # type: ignore[list-item]
            clip = F.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
            return {"prompt": torch.cat([clip, t5], dim=-2), "pooled": torch.cat([pl, pg], dim=-1)}
        if cls == "StableDiffusionXLPipeline":
            hl, _ = self._clip("text_encoder", ids["text_encoder"], -2)
            hg, pg = self._clip("text_encoder_2", ids["text_encoder_2"], -2)
            return {"prompt": torch.cat([hl, hg], dim=-1), "pooled": pg}  # type: ignore[list-item]
        if cls == "WanPipeline":
            return {"prompt": self._t5("text_encoder", ids["text_encoder"])}
        tokens = ids["text_encoder"]
        self._enter("encode:text_encoder")
        mask = torch.ones_like(tokens)
        out = self._c("text_encoder")(input_ids=tokens, attention_mask=mask, output_hidden_states=True)
        prompt = out.hidden_states[-(HUNYUAN_SKIP_LAYERS + 1)][:, HUNYUAN_TEMPLATE_TOKENS:]
        del out
        _, pooled = self._clip("text_encoder_2", ids["text_encoder_2"], None)
        return {"prompt": prompt, "pooled": pooled, "mask": mask[:, HUNYUAN_TEMPLATE_TOKENS:]}

    # -- the denoiser call --------------------------------------------------------------------
    def _denoise(self, latents: torch.Tensor, emb: Mapping[str, torch.Tensor]) -> torch.Tensor:
        cls = self.family.pipeline_class
        b = latents.shape[0]
        dtype = self.compute_dtype
        timestep = torch.full((b,), 0.5, dtype=dtype)
        if cls == "FluxPipeline":
            transformer = self._c("transformer")
            guided = bool(transformer.config.guidance_embeds)
            n_img = latents.shape[1]
            return transformer(  # type: ignore[no-any-return]
                hidden_states=latents, timestep=timestep, guidance=torch.full((b,), 3.5) if guided else None,
                pooled_projections=emb["pooled"], encoder_hidden_states=emb["prompt"],
                txt_ids=torch.zeros(emb["prompt"].shape[1], 3, dtype=dtype), img_ids=torch.zeros(n_img, 3, dtype=dtype),
                return_dict=False)[0]
        if cls == "StableDiffusion3Pipeline":
            return self._c("transformer")(hidden_states=latents, timestep=timestep,  # type: ignore[no-any-return]
                                    encoder_hidden_states=emb["prompt"], pooled_projections=emb["pooled"],
                                    return_dict=False)[0]
        if cls == "StableDiffusionXLPipeline":
            time_ids = torch.zeros(b, 6, dtype=dtype)
            return self._c("unet")(latents, timestep, encoder_hidden_states=emb["prompt"],  # type: ignore[no-any-return]
                             added_cond_kwargs={"text_embeds": emb["pooled"], "time_ids": time_ids},
                             return_dict=False)[0]
        if cls == "WanPipeline":
            return self._c("transformer")(hidden_states=latents, timestep=timestep,  # type: ignore[no-any-return]
                                    encoder_hidden_states=emb["prompt"], return_dict=False)[0]
        mask = emb.get("mask")
        if mask is None:
            mask = torch.ones(b, emb["prompt"].shape[1], dtype=torch.int64)
        return self._c("transformer")(hidden_states=latents, timestep=timestep,  # type: ignore[no-any-return]
                                encoder_hidden_states=emb["prompt"], encoder_attention_mask=mask,
                                pooled_projections=emb["pooled"], guidance=torch.full((b,), 6000.0, dtype=dtype),
                                return_dict=False)[0]

    # -- packing (FLUX) -------------------------------------------------------------------------
    def _pack(self, latents: torch.Tensor) -> torch.Tensor:
        b, c, h, w = latents.shape
        latents = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
        return latents.reshape(b, (h // 2) * (w // 2), c * 4)

    def _unpack(self, latents: torch.Tensor) -> torch.Tensor:
        s = self.shape
        b, _, channels = latents.shape
        h, w = s.latent_height, s.latent_width
        latents = latents.view(b, h // 2, w // 2, channels // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
        return latents.reshape(b, channels // 4, h, w)

    # -- forward --------------------------------------------------------------------------------
    def forward(self, **kw: Any) -> torch.Tensor:
        if self.trains:
            return self._train_step(kw)
        return self._generate(kw)

    def _generate(self, kw: Mapping[str, Any]) -> torch.Tensor:
        fam = self.family
        emb = self._encode(kw)
        negative: dict[str, torch.Tensor] | None = None
        if fam.guidance != "none":
            if fam.pipeline_class == "StableDiffusionXLPipeline":  # force_zeros_for_empty_prompt
                negative = {k: torch.zeros_like(v) for k, v in emb.items()}
            else:
                negative = self._encode(kw)
        if fam.guidance == "batch" and negative is not None:
            emb = {k: torch.cat([negative[k], v]) for k, v in emb.items()}
            negative = None
        dtype = self.compute_dtype
        self._enter("denoise")
        latents = torch.randn(self._latent_shape(), dtype=torch.float32 if fam.latents_fp32 else dtype)
        if fam.pipeline_class == "FluxPipeline":
            latents = self._pack(latents)
        model_input = latents.to(dtype)
        if fam.guidance == "batch":
            model_input = torch.cat([model_input] * 2)
        output = self._denoise(model_input, emb)
        uncond = self._denoise(model_input, negative) if negative is not None else None
        del model_input
        latents = self.scheduler(latents, output, fam.guidance, uncond)
        del output, uncond
        self._enter("vae_decode")
        return self._decode(latents)

    def _decode(self, latents: torch.Tensor) -> torch.Tensor:
        vae = self._c("vae")
        cfg = vae.config
        if self.family.pipeline_class == "FluxPipeline":
            latents = self._unpack(latents)
        latents = latents.to(self.compute_dtype)
        if self.family.pipeline_class == "WanPipeline":
            z = latents.shape[1]
            mean = torch.tensor(cfg.latents_mean, dtype=latents.dtype).view(1, z, 1, 1, 1)
            std = 1.0 / torch.tensor(cfg.latents_std, dtype=latents.dtype).view(1, z, 1, 1, 1)
            latents = latents / std + mean
        else:
            latents = latents / cfg.scaling_factor
            shift = getattr(cfg, "shift_factor", None)
            if shift is not None:
                latents = latents + shift
        return vae.decode(latents, return_dict=False)[0]  # type: ignore[no-any-return]

    def _train_step(self, kw: Mapping[str, Any]) -> torch.Tensor:
        fam = self.family
        with torch.no_grad():
            emb = self._encode(kw)
            if self.cache_latents:
                x0 = kw["latents"]
            else:
                self._enter("vae_encode")
                dist = self._c("vae").encode(kw["pixels"]).latent_dist
                x0 = dist.sample()
                del dist
                cfg = self._c("vae").config
                shift = getattr(cfg, "shift_factor", None) or 0.0
                x0 = (x0 - shift) * cfg.scaling_factor
        self._enter("forward")
        dtype = self.compute_dtype
        x0 = x0.to(dtype)
        noise = torch.randn_like(x0)
        sigma = torch.rand(x0.shape[0], dtype=dtype).view(-1, *([1] * (x0.dim() - 1)))
        noisy = (1.0 - sigma) * x0 + sigma * noise
        if fam.pipeline_class == "FluxPipeline":
            pred = self._unpack(self._denoise(self._pack(noisy), emb))
        else:
            pred = self._denoise(noisy, emb)
        target = noise if fam.pipeline_class == "StableDiffusionXLPipeline" else noise - x0
        return F.mse_loss(pred.float(), target.float())
