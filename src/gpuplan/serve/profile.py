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


def _sample(logits: Any) -> Any:
    """vLLM's dummy sampling of ``logits`` [num_seqs, vocab], op for op (v1 sampler, 0.10.0)."""
    import torch

    logits = logits.to(torch.float32)
    logits = logits.div_(SAMPLER_TEMPERATURE)
    top_k = torch.full((logits.shape[0],), logits.shape[1] - 1, dtype=torch.long)
    top_p = torch.full((logits.shape[0],), SAMPLER_TOP_P)
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
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


def _module_class() -> type[nn.Module]:
    from torch import nn

    class ProfileRun(nn.Module):
        """The causal LM, its last-token logits per request, and the sampler (one dummy profile step)."""

        def __init__(self, lm: nn.Module) -> None:
            super().__init__()
            self.lm = lm
            self.config = lm.config

        def forward(self, input_ids: Any) -> Any:
            out = self.lm(input_ids=input_ids, use_cache=False, logits_to_keep=1)
            logits = out.logits[:, -1, :]
            del out
            return _sample(logits)

    return ProfileRun


class ProfileRunSource(HFConfigSource):
    """An HF causal LM whose inference step is the engine's profile run."""

    def __init__(self, base: HFConfigSource) -> None:
        super().__init__(base.name, base.config_dict, task="causal-lm", kind=base.kind)

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        return _module_class()(super().build(workload, layers))

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        config: Any = module.config
        size: Any = getattr(config, "vocab_size", None) or getattr(config.get_text_config(), "vocab_size", 32000)
        vocab = int(size)
        return Inputs(kwargs={"input_ids": torch.randint(0, vocab, (workload.batch_size, self.seq_len(workload)))})
