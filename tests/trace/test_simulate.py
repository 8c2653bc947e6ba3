"""``gpuplan.simulate``: the user's own training loop, traced as written, agrees with the estimate of
the same model and workload (both on fake tensors with CUDA semantics)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gpuplan
from gpuplan.errors import GpuplanError
from tests.fixtures.tiny_models import mlp

FIXTURE = Path(__file__).parent.parent / "fixtures" / "tiny_models.py"


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, amp: bool) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(x).float().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("amp", [False, True])
@pytest.mark.slow
def test_simulated_loop_matches_estimate(amp: bool) -> None:
    with gpuplan.simulate(gpu="RTX-4090") as sim:
        model = mlp().cuda()
        opt = torch.optim.AdamW(model.parameters())
        x = sim.randn(16, 32).cuda()
        for _ in range(2):
            _train_step(model, opt, x, amp)
    simulated = sim.report()
    est = gpuplan.estimate(f"{FIXTURE}:mlp,mlp_inputs", batch_size=16, gpu="RTX-4090",
                           precision="amp-bf16" if amp else "fp32", loss="mean")
    assert simulated.params_count == est.params_count
    # the user's loop keeps ``loss`` (one fp32 scalar) alive through opt.step(); gpuplan's step drops it
    assert 0 <= simulated.step.tensor_peak_bytes - est.step.tensor_peak_bytes <= 4
    assert simulated.components["optimizer_state"] == est.components["optimizer_state"]
    assert simulated.fits is True


def test_report_before_the_block_ends_is_an_error() -> None:
    sim = gpuplan.simulate()
    with pytest.raises(GpuplanError, match="after the"):
        sim.report()


def test_half_precision_conversion_inside_simulation() -> None:
    """PyTorch would swap fake parameters in place (and fail); the simulation assigns new ones."""
    with gpuplan.simulate() as sim:
        model = mlp().to(torch.bfloat16)
        model(sim.randn(4, 32, dtype=torch.bfloat16)).sum()
        dtypes = {p.dtype for p in model.parameters()}
    assert dtypes == {torch.bfloat16}
    assert sim.report().params_count == sum(p.numel() for p in mlp().parameters())
