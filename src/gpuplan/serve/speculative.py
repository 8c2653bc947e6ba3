"""Speculative decoding in a served model's budget and decode time: a draft model
(``--speculative-model NAME --num-speculative-tokens K``) or the model's own multi-token-prediction layers
(``--speculative-method mtp``: DeepSeek-V3's ``num_nextn_predict_layers``, Qwen3-Next's ``mtp_num_hidden_layers``).

Memory, as the engine allocates it: the drafter is loaded with the model (vLLM ``gpu_model_runner.load_model``
loads ``self.drafter`` inside the model-loading measurement), split by the target's TP; its attention layers
get pages in the same KV cache as the target's, so every cached token costs the target's bytes plus the
drafter's (an MTP layer is one more decoder layer: its KV and its weights, the embedding and lm_head shared
with the model).

Time: one step drafts K tokens (K forwards of the draft model, or of the MTP layers, at the batch) and
verifies K + 1 per sequence in one forward of the target; with a per-token acceptance rate ``a`` a step
yields ``(1 − a^(K+1)) / (1 − a)`` tokens per sequence on average (Leviathan, Kalman & Matias, "Fast Inference
from Transformers via Speculative Decoding", ICML 2023, eq. 1). ``--spec-acceptance`` states ``a``; its
defaults: 0.85 for MTP (DeepSeek-V3 technical report §5.4.3: the second token is accepted 85–90% of the
time) and 0.7 for a draft model (inside the 0.5–0.9 Leviathan et al. measured across model pairs; it depends
on the pair and the text — measure yours).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import ConfigError
from gpuplan.models.config_view import ConfigView

SPEC_METHODS: tuple[str, ...] = ("draft", "mtp")
DEFAULT_ACCEPTANCE: dict[str, float] = {"mtp": 0.85, "draft": 0.7}
DEFAULT_TOKENS: dict[str, int] = {"mtp": 1, "draft": 4}
"""--num-speculative-tokens when not given: one per MTP layer (DeepSeek-V3 trained one), 4 draft tokens."""
MAX_SPEC_TOKENS = 32
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
@dataclass(frozen=True, slots=True)
class Speculation:
    """The speculative-decoding settings, defaults resolved."""

    method: str
    model: str | None
    tokens: int
    acceptance: float
    mtp_layers: int = 0

    @property
    def accepted_per_step(self) -> float:
        """Mean tokens a sequence gains per step (Leviathan et al. eq. 1, module docstring)."""
        a, k = self.acceptance, self.tokens
        return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)

    def vllm_config(self, model_type: str) -> str:
        """The ``--speculative-config`` JSON of vLLM 0.10.0 (``vllm/config.py`` ``SpeculativeConfig``)."""
        if self.method == "mtp":
            method = "qwen3_next_mtp" if model_type == "qwen3_next" else "deepseek_mtp"
            return json.dumps({"method": method, "num_speculative_tokens": self.tokens})
        return json.dumps({"model": self.model, "num_speculative_tokens": self.tokens})

    def sglang_args(self) -> list[str]:
        """SGLang 0.4.6 runs MTP as NEXTN (EAGLE's draft loop over the model's own next-token layers)."""
        return ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(self.tokens),
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(self.tokens + 1)]


def mtp_layers(config: dict[str, Any]) -> int:
    cfg = ConfigView(config)
    return int(cfg.positive(*_MTP_KEYS, default=0) or 0)


def speculation(config: dict[str, Any], name: str, *, method: str | None, model: str | None, tokens: int | None,
                acceptance: float | None) -> Speculation | None:
    """The settings asked (None: no speculative decoding), checked; one clear line for a bad value."""
    if method is None and model is None and tokens is None and acceptance is None:
        return None
    if method is None:
        method = "draft" if model is not None else ""
    if method not in SPEC_METHODS:
        raise ConfigError(f"speculative decoding needs --speculative-model NAME or --speculative-method mtp "
                          f"(allowed methods: {', '.join(SPEC_METHODS)})")
    if method == "draft" and model is None:
        raise ConfigError("--speculative-method draft needs --speculative-model NAME (the draft model)")
    if method == "mtp" and model is not None:
        raise ConfigError("--speculative-method mtp drafts with the model's own MTP layers: drop --speculative-model")
    layers = mtp_layers(config) if method == "mtp" else 0
    if method == "mtp" and not layers:
        raise ConfigError(f"--speculative-method mtp: {name} has no multi-token-prediction layers "
                          f"({' / '.join(_MTP_KEYS)} in its config); use --speculative-model NAME")
    k = DEFAULT_TOKENS[method] if tokens is None else tokens
    if isinstance(k, bool) or not 1 <= k <= MAX_SPEC_TOKENS:
        raise ConfigError(f"--num-speculative-tokens {k!r} is out of range: allowed 1..{MAX_SPEC_TOKENS}")
    a = DEFAULT_ACCEPTANCE[method] if acceptance is None else acceptance
    if not (0 <= a <= 1) or not math.isfinite(a):
        raise ConfigError(f"--spec-acceptance {a!r} must be a probability in [0, 1] (the share of drafted tokens "
                          "the target accepts, e.g. 0.7)")
    return Speculation(method, model, k, a, layers)
