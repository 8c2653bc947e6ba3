"""The engine's profile run, traced: the forward vLLM runs before sizing the KV cache, on fake tensors.

vLLM 0.10.0 ``vllm/v1/worker/gpu_model_runner.py`` ``profile_run``: ``_dummy_run(max_num_batched_tokens)``
spreads the token budget over ``min(tokens, max_num_seqs)`` dummy requests and runs the model once without
a KV cache; ``_dummy_sampler_run`` then computes the logits of each request's last token in float32
(``LogitsProcessor``) and samples them with temperature 0.5, top-p 0.9 and top-k vocab − 1
(``vllm/v1/sample/ops/topk_topp_sampler.py`` ``apply_top_k_top_p`` and ``random_sample``). The peak of
PyTorch memory above the weights during both is what ``gpu_worker.py`` calls the activation peak.

Here the same run is the model's own forward traced by ``gpuplan.trace`` (``trace_source``) on a batch
of ``num_seqs`` rows of ``ceil(tokens / num_seqs)`` tokens, followed by the sampler's ops as written in
that file. Nothing here is a constant: the peak comes out of the trace.

What the engine holds or allocates beyond the model's own forward is written here as tensors live at
the moment they are (all go through PyTorch's caching allocator, so vLLM counts them in its torch peak):

- the multimodal profile (``profile_run``; the same logic is in 0.33's ``multimodal/encoder_budget.py``
  ``_get_max_items``): before the text run, the vision encoder runs on
  ``max(1, min(encoder budget // tokens per image, max_num_seqs × images per prompt))`` dummy images of
  the largest size, the encoder budget being ``max_num_batched_tokens`` (``compute_mm_encoder_budget``).
  ``profile_run`` keeps the batched ``pixel_values`` (cast to the model dtype by the processing context)
  and the encoder cache holds the projected outputs until the sampler has run (only vLLM does this:
  ``capacity.trace_profile_run(images=...)``).
- ``profile_run`` keeps the decoder's ``hidden_states`` ``[tokens, hidden]`` through the sampler run.
- the workspace of ``torch.sort`` on CUDA (PyTorch ``aten/src/ATen/native/cuda/SortStable.cu``
  ``do_launch_stable_sort_kernel``): the top-k/top-p sort of ``[num_seqs, vocab]`` logits allocates,
  beside its two outputs, int64 start indices and CUB's radix-sort scratch (an alternate key and value
  buffer, ``DispatchSegmentedRadixSort``), live for the length of the sort. A fake-tensor trace sees
  only op outputs, so without it the sort — the profile run's peak for a large vocabulary — is under-
  counted by 20 bytes per logit (the 4.2 GiB gap on vLLM PR #21489's gemma-3-4b-it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplan.models.sources import HFConfigSource, Inputs

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.workload import Workload

SAMPLER_TEMPERATURE = 0.5
SAMPLER_TOP_P = 0.9
MAX_IMAGES_PER_PROMPT = 999
"""vLLM 0.10.0 ``MultiModalConfig.get_limit_per_prompt``: the default per-modality limit under V1."""
SMALL_SORT_MAX = 4096
"""Rows up to this length sort in place in shared memory (``SortUtils.cuh`` / ``Sort.cpp``
``should_use_small_sort``): no workspace."""
FULL_SORT_MAX_SEGMENTS = 128
"""Below this many rows PyTorch sorts all rows at once keyed by (value, row) (``SortStable.cu``)."""
INDEX_BYTES = 8


def sort_workspace_bytes(rows: int, row_len: int, key_bytes: int) -> int:
    """Scratch ``torch.sort`` allocates on CUDA for ``rows`` rows of ``row_len`` keys, beside its outputs
    (PyTorch ``SortStable.cu``; CUB's non-double-buffer radix sort takes an alternate key and value buffer
    as temporary storage). The branches are PyTorch's."""
    n = rows * row_len
    cub_scratch = key_bytes + INDEX_BYTES
    if row_len <= SMALL_SORT_MAX or n == 0:
        return 0
    if rows == 1 or row_len >= 1_000_000:  # segmented_sort_large_segments: one row at a time
        return row_len * INDEX_BYTES + row_len * cub_scratch
    if rows < FULL_SORT_MAX_SEGMENTS:  # segmented_sort_pairs_by_full_sort: two int2 arrays + keys out
        return 2 * n * INDEX_BYTES + n * key_bytes + n * cub_scratch
    return n * INDEX_BYTES + n * cub_scratch  # segmented_sort_pairs: reverse indices + CUB scratch


def _sort_with_workspace(logits: Any) -> tuple[Any, Any]:
    """``logits.sort(dim=-1)`` with its CUDA workspace live for the length of the sort."""
    import torch

    rows, row_len = logits.shape
    workspace = torch.empty(sort_workspace_bytes(rows, row_len, logits.element_size()), dtype=torch.uint8,
                            device=logits.device)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    del workspace
    return logits_sort, logits_idx


def _sample(logits: Any) -> Any:
    """vLLM's dummy sampling of ``logits`` [num_seqs, vocab], op for op (v1 sampler, 0.10.0)."""
    import torch

    logits = logits.to(torch.float32)
    logits = logits.div_(SAMPLER_TEMPERATURE)
    top_k = torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.long)
    top_p = torch.full((logits.shape[0],), SAMPLER_TOP_P)
    logits_sort, logits_idx = _sort_with_workspace(logits)
    k_index = (logits_sort.size(1) - top_k).unsqueeze(1)
    k_mask = logits_sort < logits_sort.gather(1, k_index)
    logits_sort.masked_fill_(k_mask, -float("inf"))
    del k_mask
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    p_mask = probs_sum <= 1 - top_p.unsqueeze(1)
    p_mask[:, -1] = False
    logits_sort.masked_fill_(p_mask, -float("inf"))
    del p_mask, probs_sum, probs_sort
    logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
    del logits_sort, logits_idx
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    del logits
    q = torch.empty_like(probs)
    q.exponential_()
    return probs.div_(q).argmax(dim=-1)


def image_tokens(config: Mapping[str, Any]) -> int:
    """Encoder tokens of one image of the largest size, or 0 where the model has no vision encoder we
    profile. Gemma 3 (vLLM ``gemma3_mm.py`` ``get_num_image_tokens``): ``(num_crops + 1) ×
    image_seq_length`` with pan-and-scan off by default (``num_crops`` 0) and ``image_seq_length`` =
    ``mm_tokens_per_image``."""
    vision = config.get("vision_config")
    per_image = config.get("mm_tokens_per_image")
    if not isinstance(vision, Mapping) or not isinstance(vision.get("image_size"), int):
        return 0
    return per_image if isinstance(per_image, int) and per_image > 0 else 0


def profile_images(config: Mapping[str, Any], tokens: int, num_seqs: int) -> int:
    """Dummy images vLLM's profile run encodes: the encoder budget (``max_num_batched_tokens``) in
    images, at most ``num_seqs`` × the images a prompt may hold (every prompt holds at least one, and
    the default limit, 999, is never the binding one at these sizes), at least 1."""
    per_image = image_tokens(config)
    if per_image == 0 or tokens <= 0:
        return 0
    return max(1, min(tokens // per_image, num_seqs * MAX_IMAGES_PER_PROMPT))


def _keep_hidden_states(lm: nn.Module, kept: list[Any]) -> Any:
    """Hook the decoder so its last hidden states stay referenced (``kept``), or None without one."""
    get_decoder = getattr(lm, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or decoder is lm:
        return None

    def keep(_module: Any, _args: Any, output: Any) -> None:
        hidden = output[0] if isinstance(output, tuple) else getattr(output, "last_hidden_state", None)
        if hidden is not None:
            kept.append(hidden)

    return decoder.register_forward_hook(keep)


def _module_class() -> type[nn.Module]:
    from torch import nn

    class ProfileRun(nn.Module):
        """The vision encoder on the dummy images (if any), the causal LM, its last-token logits per
        request, and the sampler (one dummy profile step)."""

        def __init__(self, lm: nn.Module, images: int, image_size: int) -> None:
            super().__init__()
            self.lm = lm
            self.config = lm.config
            self.images, self.image_size = images, image_size

        def forward(self, input_ids: Any) -> Any:
            import torch

            pixel_values = encoder_cache = None
            if self.images:
                size = self.image_size
                # vLLM casts the processor's pixels to the model dtype (``processing/context.py``
                # ``call_hf_processor``: "emulates output.to(dtype=model_config.dtype)")
                dtype = next(self.lm.parameters()).dtype
                pixel_values = torch.zeros(self.images, 3, size, size, dtype=dtype, device=input_ids.device)
                model: Any = self.lm  # a vision-language model: build() checked get_image_features
                features = model.get_image_features(pixel_values=pixel_values)
                # transformers 5 returns the projected features as pooler_output, older versions the tensor
                encoder_cache = getattr(features, "pooler_output", features)
                del features
            # profile_run keeps the decoder's hidden states ([tokens, hidden]) until the sampler is done
            kept: list[Any] = []
            hook = _keep_hidden_states(self.lm, kept)
            out = self.lm(input_ids=input_ids, use_cache=False, logits_to_keep=1)
            if hook is not None:
                hook.remove()
            logits = out.logits[:, -1, :]
            del out
            sampled = _sample(logits)
            del pixel_values, encoder_cache, kept  # profile_run drops them only after the sampler
            return sampled

    return ProfileRun


class ProfileRunSource(HFConfigSource):
    """An HF causal LM whose inference step is the engine's profile run."""

    def __init__(self, base: HFConfigSource, *, images: int = 0) -> None:
        super().__init__(base.name, base.config_dict, task="causal-lm", kind=base.kind)
        self.images = images
        """Dummy images the vision encoder runs on first (``profile_images``); 0: a text-only profile."""
        self.trace_identity = {"profile_run": "vllm-0.10.0", "images": images}
        """Keys the trace cache (trace/cache.py): this step is not the plain causal LM's."""

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        lm = super().build(workload, layers)
        images = self.images if callable(getattr(lm, "get_image_features", None)) else 0
        vision = self.config_dict.get("vision_config")
        size = vision.get("image_size") if isinstance(vision, Mapping) else None
        return _module_class()(lm, images if isinstance(size, int) else 0, size if isinstance(size, int) else 0)

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        config: Any = module.config
        size: Any = getattr(config, "vocab_size", None) or getattr(config.get_text_config(), "vocab_size", 32000)
        vocab = int(size)
        return Inputs(kwargs={"input_ids": torch.randint(0, vocab, (workload.batch_size, self.seq_len(workload)))})


TP_SHARDABLE_MODEL_TYPES: tuple[str, ...] = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "deepseek_v2", "deepseek_v3", "granite", "olmo2")
"""transformers classes that read ``head_dim`` from the config, so that a config with 1/tp of the heads
builds one rank's attention (GPT-2, OPT, Falcon derive head_dim from hidden_size // heads: not these)."""
_TP_SHARDED_WIDTHS: tuple[str, ...] = ("intermediate_size", "moe_intermediate_size",
                                       "shared_expert_intermediate_size")


def tp_rank_config(config: Mapping[str, Any], tp: int) -> dict[str, Any] | None:
    """The decoder one tensor-parallel rank runs (vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear``
    / ``QKVParallelLinear`` hold 1/tp of the heads and of the MLP and expert widths; hidden states, the
    logits (gathered to the whole vocabulary) and the sampler stay whole), as a config whose traced
    profile run is one rank's. None where the class cannot be built so, or a width does not divide."""
    if tp <= 1:
        return None
    nested = isinstance(config.get("text_config"), Mapping)
    text = dict(config["text_config"]) if nested else dict(config)
    if text.get("model_type", config.get("model_type")) not in TP_SHARDABLE_MODEL_TYPES:
        return None
    heads = text.get("num_attention_heads")
    hidden = text.get("hidden_size")
    if not isinstance(heads, int) or not isinstance(hidden, int) or heads % tp:
        return None
    if not text.get("kv_lora_rank"):  # MLA sizes its heads by qk_nope/qk_rope/v_head_dim, not head_dim
        text["head_dim"] = int(text.get("head_dim") or hidden // heads)
    text["num_attention_heads"] = heads // tp
    kv = text.get("num_key_value_heads")
    if isinstance(kv, int):
        text["num_key_value_heads"] = max(1, kv // tp)  # replicated when tp > kv heads
    for key in _TP_SHARDED_WIDTHS:
        width = text.get(key)
        if isinstance(width, int) and width > 0:
            if width % tp:
                return None
            text[key] = width // tp
    if not nested:
        return text
    out = dict(config)
    out["text_config"] = text
    return out
