"""The log-probability pass (old policy, reference) as each RL framework computes it, traced.

The forward is the causal LM's own (``estimate --mode infer``); what differs between frameworks is what they do
with the full-vocabulary logits after it, written here as the frameworks' ops so that the trace counts them:

* verl: the LM's logits ``[micro-batch, prompt + response, vocab]`` in the 16-bit compute dtype, log-probs by
  flash-attn's fused cross-entropy or a row-by-row log_softmax (volcengine/verl verl/workers/actor/dp_actor.py
  @0081137b, verl/utils/torch_functional.py @03c8cca1): nothing larger than the logits after them — the plain
  forward, traced as it is (no wrapper: the default's figures are the forward's).
* TRL: ``model(input_ids, logits_to_keep=completion + 1)``, the last position dropped, the logits divided by the
  temperature (one copy), ``selective_log_softmax`` row by row in 16 bits (huggingface/trl
  trl/trainer/grpo_trainer.py ``_get_per_token_logps_and_entropies``, trl/trainer/utils.py
  ``selective_log_softmax`` @000bb3db).
* OpenRLHF: the actor upcasts the whole logits to float32 (``output["logits"].to(torch.float32)``: one fp32 copy
  beside the 16-bit one until it replaces it), then the labels' logits gathered and the logsumexp taken 1024 rows
  at a time (OpenRLHF/OpenRLHF openrlhf/models/actor.py, openrlhf/models/utils.py ``log_probs_from_logits`` /
  ``_logsumexp_by_chunk``; OpenRLHF PR #634).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from gpuplan.models.sources import HFConfigSource, Inputs

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload

_LOGSUMEXP_ROWS: Final = 1024
"""OpenRLHF ``_logsumexp_by_chunk``'s chunk_size."""


def _module_class() -> type[nn.Module]:
    from torch import nn

    class LogProbPass(nn.Module):
        """The LM's forward and the framework's log-probs of the sequence's own tokens."""

        def __init__(self, lm: nn.Module, framework: str, prompt: int) -> None:
            super().__init__()
            self.lm = lm
            self.config = lm.config
            self.framework, self.prompt = framework, prompt

        def forward(self, input_ids: Any) -> Any:
            if self.framework == "trl":
                return self._trl(input_ids)
            return self._openrlhf(input_ids)

        def _trl(self, input_ids: Any) -> Any:
            import torch

            keep = input_ids.shape[1] - self.prompt  # the completion's positions (padded or mean length)
            logits = self.lm(input_ids=input_ids, use_cache=False, logits_to_keep=keep + 1).logits
            logits = logits[:, :-1, :][:, -keep:, :] / 1.0  # views, then the temperature-scaled copy
            labels = input_ids[:, -keep:]
            rows = [
                torch.log_softmax(row, dim=-1).gather(-1, lab.unsqueeze(-1)).squeeze(-1)
                for row, lab in zip(logits, labels, strict=True)
            ]
            return torch.stack(rows)

        def _openrlhf(self, input_ids: Any) -> Any:
            import torch

            output = {"logits": self.lm(input_ids=input_ids, use_cache=False).logits}
            output["logits"] = output["logits"].to(torch.float32)  # the 16-bit logits freed once replaced
            logits = output.pop("logits")
            labels = torch.roll(input_ids, shifts=-1, dims=1)
            picked = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
            flat = logits.reshape(-1, logits.shape[-1])
            lse = torch.cat([torch.logsumexp(c, dim=-1) for c in flat.split(_LOGSUMEXP_ROWS)]).view(picked.shape)
            return picked - lse

    return LogProbPass


class LogProbSource(HFConfigSource):
    """A causal LM whose inference step is ``framework``'s log-prob pass over sequences of ``prompt`` tokens and
    a completion (the rest of each sequence)."""

    def __init__(self, base: HFConfigSource, framework: str, prompt: int) -> None:
        super().__init__(base.name, base.config_dict, task="causal-lm", kind=base.kind)
        self.framework, self.prompt = framework, prompt
        self.trace_identity = {"log_probs": framework, "prompt": prompt}
        """Keys the trace cache (trace/cache.py): this step is not the plain causal LM's."""

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        return _module_class()(super().build(workload, layers), self.framework, self.prompt)

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        return super().inputs(getattr(module, "lm", module), workload)


def log_prob_source(source: ModelSource, framework: str, prompt: int) -> ModelSource:
    """``source`` traced as ``framework`` computes its log-probs of sequences of ``prompt`` tokens and a response
    (verl: the plain forward). A model that is not a transformers causal LM is refused for trl / openrlhf (one line)."""
    from gpuplan.errors import ConfigError

    if framework == "verl":
        return source
    if not isinstance(source, HFConfigSource) or source.task != "causal-lm":
        raise ConfigError(
            f"--framework {framework} sizes the log-probs through a transformers causal LM's forward; "
            f"{source.name} is not one: pass --framework verl"
        )
    return LogProbSource(source, framework, prompt)


__all__ = ["LogProbSource", "log_prob_source"]
