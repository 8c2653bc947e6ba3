"""``gpuplan rl --fit``: what to change when the step does not fit, and the longest response that does.

Every probe is a whole ``rl()`` answer (no rule of its own). The ladder tries, cheapest first and each on top of
the last: LoRA adapters (no full gradients and optimizer state; the reference becomes the policy with its
adapters off), CPU offload of the optimizer, of the parameters and the reference too, a smaller share of each GPU
for the colocated engine, and finally split placement (half the GPUs for the engine). The prompts per step do not
change the memory (the engine decodes them in waves, the trainer in micro-batches), only the time: there is no
largest one to search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from gpuplan.rl.result import RLResult
    from gpuplan.rl.settings import RLSettings

RESPONSE_STEP = 64
"""Tokens between the response lengths probed (as fit's sequence-length axis)."""
MAX_RESPONSE_LEN = 1 << 20
"""Past a million tokens the search stops (no model's context is longer)."""
SMALLER_UTILIZATIONS: tuple[float, ...] = (0.4, 0.3)


@dataclass(frozen=True, slots=True)
class Rung:
    name: str
    settings: RLSettings
    result: RLResult | None
    """None when the settings are refused (a rung that cannot apply to this step)."""
    refused: str | None = None

    @property
    def fits(self) -> bool:
        return self.result is not None and self.result.fits


def _rungs(s: RLSettings) -> list[tuple[str, dict[str, Any]]]:
    """(the flags added so far, the settings changed so far) for each rung, cheapest first."""
    rungs: list[tuple[str, dict[str, Any]]] = []
    changes: dict[str, Any] = {}
    flags: dict[str, str] = {}

    def add(flag: str, value: str, **changed: Any) -> None:
        changes.update(changed)
        flags[flag] = value
        rungs.append((" ".join(f"{k} {v}" for k, v in flags.items()), dict(changes)))

    if s.peft == "none":
        add("--peft", "lora", peft="lora")
    if "optimizer" not in s.offload:
        add("--offload", ",".join(sorted(s.offload | {"optimizer"})), offload=s.offload | {"optimizer"})
    full = {"params", "optimizer"} | ({"ref"} if s.ref and changes.get("peft", s.peft) == "none" else set())
    if not full <= s.offload:
        add("--offload", ",".join(sorted(s.offload | full)), offload=s.offload | full)
    if s.generates and s.placement == "colocate":
        for u in SMALLER_UTILIZATIONS:
            if u < s.utilization:
                add("--rollout-memory-utilization", f"{u:g}", rollout_memory_utilization=u)
        half = s.gpus // 2
        if s.gpus >= 2 and s.gpus % 2 == 0 and half % s.rollout_tp == 0:
            flags.pop("--rollout-memory-utilization", None)  # split: the engine's own default again
            add(
                "--placement",
                f"split --rollout-gpus {half}",
                placement="split",
                rollout_gpus=half,
                rollout_memory_utilization=None,
            )
    return rungs


def ladder(
    settings: RLSettings, run: Callable[[RLSettings], RLResult], *, stop_at_fit: bool = True
) -> tuple[Rung, ...]:
    """The rungs for ``settings``, each answered by ``run`` (``gpuplan.rl.rl``), until one fits."""
    out: list[Rung] = []
    for name, changes in _rungs(settings):
        try:
            changed = replace(settings, **changes)
        except ConfigError as exc:  # e.g. the global batch no longer divides over the trainer's GPUs
            out.append(Rung(name, settings, None, str(exc)))
            continue
        rung = Rung(name, changed, run(changed))
        out.append(rung)
        if rung.fits and stop_at_fit:
            break
    return tuple(out)


def largest_response_len(settings: RLSettings, run: Callable[[RLSettings], RLResult]) -> int | None:
    """The longest ``max_response_len`` (steps of RESPONSE_STEP tokens, the mean response capped at it) with which
    the step fits; None when even the shortest step does not."""

    def fits(n: int) -> bool:
        try:
            changed = replace(settings, max_response_len=n, response_len=min(settings.response_len, n))
            return run(changed).fits
        except ConfigError:  # past the model's context (serve refuses the engine's max_model_len)
            return False

    if not fits(RESPONSE_STEP):
        return None
    lo = 1  # in steps of RESPONSE_STEP tokens: fits at lo, not at hi
    while fits(2 * lo * RESPONSE_STEP):  # double until it does not fit (or the model's context refuses it)
        lo *= 2
        if lo * RESPONSE_STEP >= MAX_RESPONSE_LEN:
            return lo * RESPONSE_STEP
    hi = 2 * lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid * RESPONSE_STEP) else (lo, mid)
    return lo * RESPONSE_STEP
