"""Who shares a GPU in which phase: each phase's own peak plus what the other models keep resident, plus the
sleeping engine when colocated. Sums only; every term comes from rl/models.py, rl/rollout.py or rl/sync.py.

Colocated, one process per GPU holds the trainer and the engine (verl's hybrid engine, TRL colocate): one CUDA
context and set of workspaces (the trainer's), the engine's weights and KV cache while it generates, only its
CUDA graphs and non-torch memory while it sleeps. Split, the rollout GPUs hold the engine and its own context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.memory.overheads import cuda_context_bytes
from gpuplan.perf.efficiency import generation_key
from gpuplan.perf.uncertainty import family_key
from gpuplan.perf.workload_family import time_interval
from gpuplan.rl.result import Phase
from gpuplan.rl.sync import weight_sync_s

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.parallel.topology import Topology
    from gpuplan.rl.models import Forward, Trained
    from gpuplan.rl.rollout import Rollout
    from gpuplan.rl.settings import RLSettings


@dataclass(frozen=True, slots=True)
class Residents:
    """The trainer GPUs' models and what each keeps between its own phases."""

    policy: Trained
    ref: Forward | None = None
    reward: Forward | None = None
    critic: Trained | None = None
    ref_shares_policy: bool = False
    """PEFT: the reference is the policy with its adapters off (no weights of its own)."""
    ref_offloaded: bool = False
    """--offload ref: its weights on the host between its passes."""

    def resident(self) -> dict[str, int]:
        """Bytes each model keeps on a trainer GPU while another phase runs."""
        out = {"policy": self.policy.resident_bytes}
        if self.ref is not None and not self.ref_shares_policy and not self.ref_offloaded:
            out["ref"] = self.ref.resident_bytes
        if self.reward is not None:
            out["reward"] = self.reward.resident_bytes
        if self.critic is not None:
            out["critic"] = self.critic.resident_bytes
        return out

    def besides(self, *running: str, keep_optimizer: tuple[Trained, ...] = ()) -> dict[str, int]:
        """The resident bytes of every model but ``running`` (whose phase brings its own weights), plus the
        optimizer state of the trained ones among them (it stays while they only forward)."""
        out = {k: v for k, v in self.resident().items() if k not in running}
        for name, model in zip(running, keep_optimizer, strict=False):
            if model.optimizer_bytes:
                out[f"{name}_optimizer"] = model.optimizer_bytes
        return out


def compose(
    settings: RLSettings,
    gpu: GPU,
    r: Residents,
    *,
    old: Forward | None,
    critic_values: Forward | None,
    rollout: Rollout | None,
    cluster: Topology,
) -> tuple[Phase, ...]:
    """Every phase of the step with its per-GPU peak, seconds and 80% interval."""
    colocated = settings.placement == "colocate"
    overhead = r.policy.overhead_bytes
    asleep = {"engine_asleep": rollout.asleep_bytes} if rollout is not None and colocated else {}
    where = "all" if colocated else "trainer"
    arch = generation_key(gpu)
    kind = r.policy.profile.kind
    train_family = family_key(kind, "train", settings.trainer_gpus)
    infer_family = family_key(kind, "infer")

    def phase(name: str, seconds: float, parts: dict[str, int], family: str | None, at: str = where) -> Phase:
        iv = time_interval(seconds, family, arch) if family and seconds > 0 else None
        return Phase(name, seconds, sum(parts.values()), parts, at, (iv.low_s, iv.high_s) if iv else None)

    def forward_phase(name: str, f: Forward, running: tuple[str, ...], keep: tuple[Trained, ...] = ()) -> Phase:
        parts = {
            "this_phase": f.bytes_per_gpu,
            "cuda_context_and_workspaces": overhead,
            **r.besides(*running, keep_optimizer=keep),
            **asleep,
        }
        return phase(name, f.seconds, parts, infer_family)

    phases: list[Phase] = []
    if rollout is not None:
        engine = {"engine": rollout.engine_bytes}
        if colocated:
            parts = {**engine, "cuda_context_and_workspaces": overhead, **r.resident()}
        else:
            parts = {**engine, "cuda_context": cuda_context_bytes(gpu.arch)[0]}
        phases.append(phase("generate", rollout.seconds, parts, "llm-infer", "all" if colocated else "rollout"))
    if old is not None:
        phases.append(forward_phase("old_log_prob", old, ("policy",), (r.policy,)))
    if r.ref is not None and r.ref_shares_policy:  # the policy's own weights, adapters off
        phases.append(forward_phase("ref_log_prob", r.ref, ("policy", "ref"), (r.policy,)))
    elif r.ref is not None:
        phases.append(forward_phase("ref_log_prob", r.ref, ("ref",)))
    if r.reward is not None:
        phases.append(forward_phase("reward", r.reward, ("reward",)))
    if r.critic is not None and critic_values is not None:
        values = {
            "this_phase": critic_values.bytes_per_gpu,
            "cuda_context_and_workspaces": overhead,
            **r.besides("critic", keep_optimizer=(r.critic,)),
        }
        update = {"this_phase": r.critic.peak_bytes, **r.besides("critic")}
        parts = max(values, update, key=lambda p: sum(p.values()))
        phases.append(
            phase(
                "critic",
                critic_values.seconds + r.critic.step_s * settings.optimizer_steps,
                {**parts, **asleep},
                train_family,
            )
        )
    train = {"this_phase": r.policy.peak_bytes, **r.besides("policy"), **asleep}
    phases.append(phase("train", r.policy.step_s * settings.optimizer_steps, train, train_family))
    if rollout is not None:
        phases.append(_sync(settings, r, rollout, overhead, asleep, cluster))
    return tuple(phases)


def _sync(
    settings: RLSettings, r: Residents, rollout: Rollout, overhead: int, asleep: dict[str, int], cluster: Topology
) -> Phase:
    """The weights gathered block by block (FSDP: the current block and the prefetched next one) into the
    engine: colocated, its weights woken on the same GPU; split, the rollout GPUs hold the engine as it is."""
    seconds = weight_sync_s(settings, r.policy.weight_16bit_bytes, cluster)
    gathered = 2 * r.policy.block_16bit_bytes if settings.trainer_gpus > 1 else 0
    trainer = {"gathered_blocks": gathered, "cuda_context_and_workspaces": overhead, **r.resident()}
    if settings.placement == "colocate":
        parts = {**trainer, **asleep, "engine_weights": rollout.weight_bytes}
        return Phase("weight_sync", seconds, sum(parts.values()), parts, "all")
    engine = {"engine": rollout.engine_bytes, "cuda_context": cuda_context_bytes(rollout.engine.gpu.arch)[0]}
    parts, where = (trainer, "trainer") if sum(trainer.values()) >= sum(engine.values()) else (engine, "rollout")
    return Phase("weight_sync", seconds, sum(parts.values()), parts, where)
