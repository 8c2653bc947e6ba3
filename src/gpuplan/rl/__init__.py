"""RL post-training sizing (``gpuplan rl``): GRPO / PPO / DAPO / DPO with the policy, a frozen reference, a
critic, a reward model and a rollout engine, colocated or split (docs/architecture.md, issue 22)."""

from gpuplan.rl.settings import ALGORITHMS, OFFLOADS, PLACEMENTS, ROLLOUT_ENGINES, RLSettings

__all__ = ["ALGORITHMS", "OFFLOADS", "PLACEMENTS", "ROLLOUT_ENGINES", "RLSettings"]
