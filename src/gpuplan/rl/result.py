"""The answer of ``gpuplan rl``: per phase, per GPU, and for the step (plain data; report/rl.py renders it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.presentation import to_json, to_text

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.rl.rollout import Rollout
    from gpuplan.rl.settings import RLSettings

PHASES: tuple[str, ...] = ("generate", "old_log_prob", "ref_log_prob", "reward", "critic", "train", "weight_sync")
"""Every phase an RL step may run, in the order it runs them."""


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of the step on the GPUs it runs on."""

    name: str
    seconds: float
    peak_bytes_per_gpu: int
    """The most any one GPU holds during the phase (the trainer's and the engine's parts below)."""
    parts_bytes: dict[str, int] = field(default_factory=dict)
    """What makes up the peak on that GPU (``this_phase``, each resident model, the sleeping engine, ...)."""
    where: str = "all"
    """all (colocated), trainer or rollout GPUs (split placement)."""
    interval_s: tuple[float, float] | None = None
    """80% interval of ``seconds`` (perf/uncertainty), where the family has residuals."""


@dataclass(frozen=True, slots=True)
class RLResult:
    settings: RLSettings
    model: str
    gpu: GPU
    phases: tuple[Phase, ...]
    usable_bytes: int
    reason: str | None
    """Why the step does not run (None when it fits)."""
    assumptions: tuple[str, ...] = ()
    rollout: Rollout | None = None
    command: str | None = None
    """A launch configuration (``--emit``: gpuplan.rl.emit), else None."""

    @property
    def fits(self) -> bool:
        return self.reason is None

    @property
    def limiting_phase(self) -> str:
        """The phase whose per-GPU peak is the largest: the one that decides whether the step fits."""
        return max(self.phases, key=lambda p: p.peak_bytes_per_gpu).name

    @property
    def peak_bytes_per_gpu(self) -> int:
        return max(p.peak_bytes_per_gpu for p in self.phases)

    @property
    def step_time_s(self) -> float:
        """Phases one after another: colocated they share the GPUs; split, the trainers wait for the rollout
        and the rollout for the new weights (verl's and OpenRLHF's synchronous default)."""
        return sum(p.seconds for p in self.phases)

    @property
    def step_time_interval_s(self) -> tuple[float, float] | None:
        """The phases' 80% intervals added (their errors taken as moving together: the widest sum)."""
        if any(p.interval_s is None and p.seconds > 0 for p in self.phases if p.name != "weight_sync"):
            return None
        low = sum(p.interval_s[0] if p.interval_s else p.seconds for p in self.phases)
        high = sum(p.interval_s[1] if p.interval_s else p.seconds for p in self.phases)
        return (low, high)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        s = self.settings
        tokens = s.sequences_per_step * (s.prompt_len + s.response_len)
        return tokens / self.step_time_s / s.gpus if self.step_time_s > 0 else 0.0

    @property
    def phase_map(self) -> dict[str, Phase]:
        return {p.name: p for p in self.phases}

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.rl.rl_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.rl.render_rl
