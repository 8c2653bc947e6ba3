"""The rollout: the policy served by vLLM / SGLang (``gpuplan.serve``) generating a step's responses.

The engine is sized by ``serve`` with the same engine, TP, memory utilization and lengths (the offline ``LLM``
class's defaults, as verl, TRL and OpenRLHF start it); its prefill and decode are ``serve/timing.py``'s at
the real concurrency: the step's prompts × samples spread over the engine replicas (rollout GPUs / TP), each
replica decoding as many sequences at once as its KV cache and ``max_num_seqs`` allow.

Time of one replica (continuous batching, stated): ``waves = ceil(sequences / batch)``; each wave prefills its
prompts as one batch and decodes the mean response length at the full batch (mean context prompt +
response / 2, as ``serve`` times a request); the longest response's tail (max − mean tokens) is decoded once
at the end at batch 1 (the stragglers), since the other waves' tails overlap the next wave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.serve import serve
from gpuplan.serve.timing import decode_step, prefill

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.rl.settings import RLSettings
    from gpuplan.serve.capacity import ServeResult
    from gpuplan.trace.step import TracedStep


@dataclass(frozen=True, slots=True)
class Rollout:
    engine: ServeResult
    """``serve``'s answer for one replica at the batch the rollout decodes."""
    replicas: int
    sequences_per_replica: int
    batch: int
    """Sequences one replica decodes at once (0: the engine holds none)."""
    waves: int
    prefill_s: float
    decode_s: float
    tail_s: float

    @property
    def ok(self) -> bool:
        return self.engine.ok and self.batch > 0

    @property
    def seconds(self) -> float:
        return self.prefill_s + self.decode_s + self.tail_s

    @property
    def engine_bytes(self) -> int:
        """What the engine holds on each rollout GPU while generating (CUDA context aside)."""
        return self.engine.budget.engine_bytes

    @property
    def asleep_bytes(self) -> int:
        return self.engine.budget.asleep_bytes

    @property
    def weight_bytes(self) -> int:
        return self.engine.budget.weights_bytes


def rollout(
    source: ModelSource, settings: RLSettings, gpu: GPU, profiles: dict[tuple[Any, ...], TracedStep] | None = None
) -> Rollout:
    """Size and time the engine generating ``settings.sequences_per_step`` responses on its GPUs."""
    cache = profiles if profiles is not None else {}
    asked: dict[str, Any] = dict(
        gpu=gpu,
        tp=settings.rollout_tp,
        engine=settings.rollout_engine,
        max_model_len=settings.sequence_len,
        input_len=settings.prompt_len,
        output_len=settings.response_len,
        gpu_memory_utilization=settings.utilization,
        llm_class=True,
        profiles=cache,
        max_num_seqs=settings.rollout_max_num_seqs,
        max_num_batched_tokens=settings.rollout_max_num_batched_tokens,
        enforce_eager=settings.rollout_enforce_eager,
    )
    engine = serve(source, **asked)
    replicas = settings.engine_gpus // settings.rollout_tp
    per_replica = math.ceil(settings.sequences_per_step / replicas)
    batch = min(per_replica, engine.max_concurrency, engine.settings.max_num_seqs) if engine.ok else 0
    if batch <= 0 or engine.time_unknown or engine.shape is None:
        return Rollout(engine, replicas, per_replica, max(batch, 0), 0, 0.0, 0.0, 0.0)
    if engine.decode_batch != batch:  # the time line at the real concurrency (the profile run is cached)
        engine = serve(source, concurrency=batch, **asked)
    assert engine.shape is not None
    waves = math.ceil(per_replica / batch)
    tp = settings.rollout_tp
    first = prefill(
        engine.shape,
        engine.gpu,
        tp,
        tokens=settings.prompt_len,
        prompts=batch,
        weight_quant=engine.settings.quantization,
    )
    tail_tokens = settings.longest_response - settings.response_len
    tail_s = 0.0
    if tail_tokens:
        context = settings.sequence_len
        tail_s = (
            tail_tokens
            * decode_step(
                engine.shape,
                engine.gpu,
                tp,
                batch=1,
                context=context,
                kv_read_bytes=engine.kv.sequence_bytes(context),
                weight_quant=engine.settings.quantization,
                eager=not engine.settings.cuda_graphs,
            ).seconds
        )
    return Rollout(
        engine,
        replicas,
        per_replica,
        batch,
        waves,
        waves * first.seconds,
        waves * settings.response_len * engine.decode.seconds,
        tail_s,
    )
