"""The trainer's models on their GPUs: each one's step through the existing machinery, nothing recomputed here.

* A trained model (the policy; PPO's critic): the planner's evaluator (``parallel.evaluate``) on the profile
  of the exact traced step (``parallel.profile.profile_model``, traced as ``estimate`` traces it), with the
  layout the RL trainers run: FSDP2 over every trainer GPU (verl's FSDP workers, TRL through accelerate),
  DeepSpeed ZeRO-3 with its CPU offload when ``--offload params|optimizer`` is asked (OpenRLHF's ZeRO-3
  offload; the planner models offload as DeepSpeed's, its one CPU-offload rule).
* A forward-only model (the reference, the reward model, the policy's and critic's log-prob / value passes):
  ``estimate`` in ``--mode infer`` at micro-batch × (prompt + response) tokens, its weights sharded over the
  trainer GPUs by ``parallel.forward.sharded_forward`` (the rule ``recommend`` uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.parallel.evaluate import Evaluation, evaluate
from gpuplan.parallel.forward import ShardedForward, sharded_forward
from gpuplan.parallel.layout import FSDP2, Layout, Zero
from gpuplan.parallel.plan import plan_context
from gpuplan.parallel.profile import ModelProfile, profile_model

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.parallel.topology import Topology
    from gpuplan.rl.settings import RLSettings
    from gpuplan.workload import Workload


@dataclass(frozen=True, slots=True)
class Trained:
    """One optimizer step of a trained model on one trainer GPU (the planner's figures)."""

    profile: ModelProfile
    evaluation: Evaluation
    """At the padded length (prompt + longest response): the memory."""
    overhead_bytes: int
    """CUDA context and cuBLAS workspaces of one trainer process (counted once per GPU)."""
    timed: Evaluation | None = None
    """At the mean length (prompt + mean response): the time, when it differs from the padded length."""

    @property
    def peak_bytes(self) -> int:
        """Peak of the training step on one GPU, its CUDA context and workspaces included."""
        return self.evaluation.per_gpu_peak_bytes

    @property
    def resident_bytes(self) -> int:
        """What stays on the GPU between its training steps: the weights' and optimizer state's shards
        (gradients are freed by ``zero_grad(set_to_none=True)``; offloaded states are on the host)."""
        rank = self.evaluation.ranks[0]
        return rank.params_bytes + rank.optimizer_bytes

    @property
    def optimizer_bytes(self) -> int:
        return self.evaluation.ranks[0].optimizer_bytes

    @property
    def step_s(self) -> float:
        """One optimizer step (its micro-batches, gathers, reduce-scatters, the optimizer), at the mean length."""
        return (self.timed or self.evaluation).step_time_s

    @property
    def weight_16bit_bytes(self) -> int:
        """The model's weights in the compute dtype: what a weight sync sends."""
        return int(self.profile.params_count * self.profile.compute_bytes)

    @property
    def block_16bit_bytes(self) -> int:
        """One block's weights in the compute dtype (what FSDP gathers at a time)."""
        return int(self.profile.block_params * self.profile.compute_bytes)


VALUE_HEAD_NOTE = (
    "critic and reward model: the backbone with a one-output value head in place of the LM head, traced as "
    "transformers' AutoModelForTokenClassification with num_labels = 1 as verl builds both "
    "(volcengine/verl verl/workers/fsdp_workers.py @b38119fa: CriticWorker and RewardModelWorker): no "
    "full-vocabulary logits, no LM-head weights, gradients or optimizer state; the value loss (a few "
    "[micro-batch, tokens] tensors) traced as the values' mean"
)


def value_model(source: ModelSource) -> ModelSource:
    """``source``'s backbone with a one-output head per token (the critic's values, a reward model's score):
    transformers' token-classification class of the same config with ``num_labels = 1``. A model that is not a
    transformers config is refused (one line): its head cannot be swapped."""
    from gpuplan.errors import ConfigError
    from gpuplan.models.sources import HFConfigSource

    config = source.config_dict if isinstance(source, HFConfigSource) else None
    if config is None:
        raise ConfigError(
            f"{source.name} is not a transformers config: gpuplan rl builds the critic and the reward model as "
            "its backbone with a value head; pass a catalog name or a config.json"
        )
    from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES

    if config.get("model_type") not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES:
        raise ConfigError(
            f"{source.name} ({config.get('model_type')}) has no token-classification class in transformers: "
            "gpuplan rl cannot build it with a value head; pass a critic / reward model of another architecture"
        )
    head = {k: v for k, v in config.items() if k != "architectures"} | {"num_labels": 1}
    return HFConfigSource(source.name, head, task="token-classification", kind=source.kind)


def trainer_layout(settings: RLSettings) -> Layout:
    """FSDP2 over the trainer GPUs (verl, TRL); ZeRO-3 with DeepSpeed's CPU offload when offload is asked."""
    offload_params, offload_optimizer = "params" in settings.offload, "optimizer" in settings.offload
    sharding = (
        Zero(3, offload_optimizer=offload_optimizer, offload_params=offload_params)
        if offload_params or offload_optimizer
        else FSDP2()
    )
    return Layout(
        dp=settings.trainer_gpus,
        tp=1,
        pp=1,
        micro_batch_size=settings.micro_batch,
        grad_accum=settings.grad_accum,
        sharding=sharding,
        checkpointing=settings.checkpointing,
        sequence_parallel=False,
    )  # tp 1: nothing to split (as the planner writes it)


def trained(
    source: ModelSource, workload: Workload, settings: RLSettings, gpu: GPU, topology: Topology, *, time_seq_len: int
) -> Trained:
    """The planner's answer for ``workload`` (one micro-batch, traced once) under ``trainer_layout``; the time from
    a second trace at ``time_seq_len`` tokens when the padded length differs (padding removed, as verl and
    OpenRLHF pack the sequences)."""
    layout = trainer_layout(settings)
    prof = profile_model(source, workload.with_(grad_accum=1), gpu)
    ctx = plan_context(prof, topology, gpu)
    timed = None
    if workload.seq_len != time_seq_len:
        short = profile_model(source, workload.with_(grad_accum=1, seq_len=time_seq_len), gpu)
        timed = evaluate(plan_context(short, topology, gpu), layout)
    return Trained(prof, evaluate(ctx, layout), ctx.overhead_bytes, timed)


@dataclass(frozen=True, slots=True)
class Forward:
    """The forward-only passes of one model over a step's sequences, on one trainer GPU."""

    estimate: Estimate
    """At the padded length: the memory."""
    sharded: ShardedForward
    passes: int
    """Micro-batches one GPU forwards per RL step."""
    timed: Estimate | None = None
    """At the mean length: the time, when it differs from the padded length."""

    @property
    def bytes_per_gpu(self) -> int:
        """The pass's reserved bytes with the weights sharded (CUDA context and workspaces not included)."""
        return self.sharded.bytes_per_gpu

    @property
    def resident_bytes(self) -> int:
        return self.sharded.weight_bytes_per_gpu

    @property
    def seconds(self) -> float:
        """Every pass: the traced forward or the prefetched gathers, whichever is longer."""
        one = (self.timed or self.estimate).step_time_s or 0.0
        return self.passes * max(one, self.sharded.gather_s)


def forward(
    source: ModelSource,
    workload: Workload,
    sequences: int,
    gpu: GPU,
    topology: Topology,
    gpus: int,
    *,
    time_seq_len: int,
    held_by: Trained | None = None,
) -> Forward:
    """``sequences`` forwarded in micro-batches of ``workload.batch_size`` over ``gpus`` trainer GPUs; memory at
    the workload's (padded) length, time at ``time_seq_len`` tokens. ``held_by``: a trained model forwarding its
    own weights (the policy's log-probs, the critic's values): they stay as its layout holds them (FSDP mixed
    precision: fp32 shards, blocks gathered in the 16-bit ``workload`` precision; ZeRO-3 offload: on the host)."""
    from gpuplan.estimate import estimate

    est = estimate(source, gpu=gpu, workload=workload)
    timed = None
    if workload.seq_len != time_seq_len:
        timed = estimate(source, gpu=gpu, workload=workload.with_(seq_len=time_seq_len))
    passes = math.ceil(sequences / (workload.batch_size * gpus))
    held = held_by.evaluation.ranks[0].params_bytes if held_by is not None else None
    return Forward(est, sharded_forward(est.step, topology, gpus, held_bytes_per_gpu=held), passes, timed)
