"""The layout search of ``gpuplan serve MODEL --gpu G --gpus N``: every way to run one engine instance on N
GPUs as tensor parallelism × DP attention ranks × pipeline stages (tp × dp × pp = N), with the routed experts of
a MoE model either TP-split over a stage (ep 1) or whole over all of its GPUs (ep = tp × dp; vLLM
``--enable-expert-parallel``, SGLang ``--ep-size``), each sized by ``capacity.serve`` (weights and KV per stage,
all-to-all, the pipeline's micro-batched decode step: ``serve/timing.decode_step``) through the same rules as an
explicit ``--tp/--pp/--dp/--ep``. Pipeline stages (vLLM ``--pipeline-parallel-size``, SGLang ``--pp-size``) are
searched without DP attention (pp > 1 with dp 1) and up to one stage per layer.

A layout qualifies when the engine starts and it meets the target: the asked concurrency spread over its DP
ranks, the latency targets (``--ttft-slo`` / ``--itl-slo``: the largest concurrency meeting them), or a
``--rate`` (whole instances of N GPUs). Ranking: with ``--rate`` the fewest GPUs, then goodput; otherwise
goodput per GPU — output tokens/s of the instance at the batch the answer runs (the asked concurrency, the
latency targets' largest concurrency, else as many as fit), over its N GPUs — then the lower inter-token
latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.presentation import to_json, to_text

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.serve.capacity import ServeResult

MAX_SEARCH_GPUS = 1024


@dataclass(frozen=True, slots=True)
class LayoutOutcome:
    """One layout as ``serve`` sized it, or why it could not run."""

    tp: int
    dp: int
    ep: int
    result: ServeResult | None
    meets: bool
    reason: str
    pp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def goodput_tokens_per_s_per_gpu(self) -> float:
        """Output tokens/s of the instance (every DP rank at the answer's batch) over its GPUs."""
        r = self.result
        if r is None or not self.meets or r.time_unknown:
            return 0.0
        return r.decode_tokens_per_s * self.dp / self.gpus

    @property
    def gpus_for_rate(self) -> int | None:
        r = self.result
        return r.rate.gpus if r is not None and r.rate is not None else None

    def sort_key(self) -> tuple[float, ...]:
        itl = self.result.decode.seconds if self.result is not None else 0.0
        gpus = self.gpus_for_rate
        return (0 if self.meets else 1, gpus if gpus is not None else 0, -self.goodput_tokens_per_s_per_gpu, itl,
                self.pp, self.ep, self.dp)

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "gpus": self.gpus,
                               "ok": bool(r and r.ok),
                               "meets": self.meets, "reason": self.reason,
                               "goodput_tokens_per_s_per_gpu": self.goodput_tokens_per_s_per_gpu}
        if r is not None:
            out.update({"weights_bytes_per_gpu": r.budget.weights_bytes,
                        "kv_cache_bytes_per_gpu": r.budget.kv_cache_bytes,
                        "max_concurrency": r.max_concurrency * self.dp,
                        "max_concurrency_per_dp_rank": r.max_concurrency,
                        "decode_batch_per_dp_rank": r.decode_batch,
                        "itl_s": None if r.time_unknown else r.decode.seconds,
                        "ttft_s": None if r.time_unknown else r.prefill.seconds,
                        "communication_s": None if r.time_unknown else r.decode.communication_s,
                        "gpus_for_rate": self.gpus_for_rate, "command": r.command})
        return out


@dataclass(frozen=True, slots=True)
class LayoutSearch:
    """Every layout of ``gpus`` GPUs tried, best first, and the chosen one's full serve answer."""

    model: str
    gpu: GPU
    gpus: int
    ranking: str
    outcomes: tuple[LayoutOutcome, ...]
    assumptions: tuple[str, ...] = field(default=())

    @property
    def chosen(self) -> LayoutOutcome | None:
        best = self.outcomes[0] if self.outcomes else None
        return best if best is not None and best.meets else None

    @property
    def ok(self) -> bool:
        return self.chosen is not None

    @property
    def shown(self) -> ServeResult | None:
        """The answer printed in full: the chosen layout's, else the best one that ran."""
        return next((o.result for o in self.outcomes if o.result is not None), None)

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.serve.layout_search_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.serve.render_layout_search


def layouts_for(gpus: int, *, moe: bool, layers: int | None = None) -> list[tuple[int, int, int, int]]:
    """(tp, pp, dp, ep) with tp × pp × dp = ``gpus``: pp > 1 only with dp 1 and at most ``layers`` stages, tp
    within a node once the instance spans nodes (pipeline stages cross the network, tensor parallelism does not);
    a MoE model also with its experts whole over each stage's tp × dp GPUs (ep = tp × dp)."""
    from gpuplan.parallel.topology import DEFAULT_GPUS_PER_NODE

    out = []
    for pp in (d for d in range(1, gpus + 1) if gpus % d == 0 and (layers is None or d <= layers)):
        stage = gpus // pp
        for tp in (d for d in range(1, stage + 1) if stage % d == 0):
            dp = stage // tp
            if gpus > DEFAULT_GPUS_PER_NODE and tp > DEFAULT_GPUS_PER_NODE:
                continue
            if pp > 1 and dp > 1:
                continue
            out.append((tp, pp, dp, 1))
            if moe and stage > 1:
                out.append((tp, pp, dp, stage))
    return out


def _per_rank(total: int | None, dp: int) -> int | None:
    return None if total is None else -(-total // dp)


def search_layouts(model: str | ModelSource, *, gpu: str | GPU, gpus: int, concurrency: int | None = None,
                   profiles: dict[tuple[Any, ...], Any] | None = None, **serve_kwargs: Any) -> LayoutSearch:
    """Size every (tp, dp, ep) of ``gpus`` GPUs with ``capacity.serve`` and rank them (module docstring).
    ``concurrency`` is the instance's: each DP rank is asked its share. ``serve_kwargs`` go to serve as given
    (not tp / dp / ep / pp)."""
    from gpuplan.hardware import resolve_gpu
    from gpuplan.models.config_view import ConfigView
    from gpuplan.models.sources import ModelSource as SourceType
    from gpuplan.models.sources import resolve_model
    from gpuplan.serve.capacity import _decoder_source, serve

    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_SEARCH_GPUS:
        raise ConfigError(f"--gpus {gpus!r} is out of range: allowed 1..{MAX_SEARCH_GPUS}")
    for name in ("tp", "dp", "ep", "pp"):
        if name in serve_kwargs:
            raise ConfigError(f"--gpus searches the layouts: drop --{name} (or drop --gpus to size one layout)")
    source = _decoder_source(model if isinstance(model, SourceType) else resolve_model(model))
    target = resolve_gpu(gpu)
    assert target is not None
    view = ConfigView(source.config_dict)
    moe = bool(view.get("num_experts_per_tok"))
    cache = profiles if profiles is not None else {}
    outcomes: list[LayoutOutcome] = []
    for tp, pp, dp, ep in layouts_for(gpus, moe=moe, layers=view.layers):
        try:
            r = serve(source, gpu=target, tp=tp, pp=pp, dp=dp, ep=ep, concurrency=_per_rank(concurrency, dp),
                      profiles=cache, **serve_kwargs)
        except GpuplanError as exc:
            if "--gpu-memory-utilization" in str(exc) or "--max-model-len" in str(exc):
                raise  # the asked settings are wrong for every layout: the user's error, not the layout's
            outcomes.append(LayoutOutcome(tp, dp, ep, None, False, str(exc), pp))
            continue
        rate_ok = r.rate is None or r.rate.replicas > 0
        meets = r.ok and r.concurrency_fits and r.slo_met is not False and rate_ok
        reason = r.reason if not r.ok else (
            "meets the target" if meets else
            f"holds {r.max_concurrency * dp:,} sequences of {r.context:,} tokens" if not r.concurrency_fits else
            "misses the latency targets")
        outcomes.append(LayoutOutcome(tp, dp, ep, r, meets, reason, pp))
    outcomes.sort(key=LayoutOutcome.sort_key)
    ranking = ("fewest GPUs for the rate, then goodput per GPU" if serve_kwargs.get("rate") is not None
               else "goodput per GPU (output tokens/s of the instance at the answer's batch ÷ GPUs), then ITL")
    notes = (f"layouts searched: tp × pp × dp = {gpus} (DP attention ranks with their own KV cache; pipeline stages "
             "holding ⌈layers / pp⌉ layers each, without DP attention), MoE experts TP-split over a stage (ep 1) or "
             "whole over its tp × dp GPUs",
             "with pp > 1 the running sequences form pp micro-batches in flight (vLLM V1's batch queue): the "
             "inter-token latency is the whole model's step at ⌈batch / pp⌉ sequences plus pp − 1 stage-to-stage "
             "sends (serve/timing.decode_step)",
             "a layout qualifies when the engine starts and it meets the target (--concurrency spread over the DP "
             "ranks, --ttft-slo / --itl-slo, --rate in whole instances)",
             f"ranked by {ranking}")
    return LayoutSearch(source.name, target, gpus, ranking, tuple(outcomes), notes)
