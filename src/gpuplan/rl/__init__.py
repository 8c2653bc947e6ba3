"""RL post-training sizing (``gpuplan rl``): GRPO / PPO / DAPO / DPO with the policy, a frozen reference, a
critic, a reward model and a rollout engine, colocated or split (docs/architecture.md, issue 22)."""

from collections.abc import Callable

from gpuplan.rl.result import RLResult
from gpuplan.rl.settings import ALGORITHMS, OFFLOADS, PLACEMENTS, ROLLOUT_ENGINES, RLSettings


def rl(settings: RLSettings, *, progress: Callable[[str], None] | None = None) -> RLResult:
    """One RL post-training step of ``settings``: memory per GPU and seconds of every phase, whether it fits
    (gpuplan.rl.estimate.rl; imported when called, so the settings load without the tracing stack)."""
    from gpuplan.rl.estimate import rl as run

    return run(settings, progress=progress)


__all__ = ["ALGORITHMS", "OFFLOADS", "PLACEMENTS", "ROLLOUT_ENGINES", "RLResult", "RLSettings", "rl"]
