"""Activation memory per GPT layer against Korthikanti et al. 2022, Table 2 (row kor-f-none).

Their accounting: fp16 activations, 1-byte dropout masks, a GPT block with a 4h GeLU MLP, no flash
attention: sbh(34 + 5as/h) bytes per layer. With flash attention the 5as/h term (the s×s scores,
softmax output, dropout mask and dropped matrix) disappears: only the output and its log-sum-exp
rows are kept. The block is written as Megatron-LM's is (tests/fixtures/megatron_gpt.py); the
layer's bytes are the difference between 3- and 2-layer traces of the activations alive at the
end of the forward pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.models.sources import FactorySource
from gpuplan.trace.runner import StepRunner, Target
from gpuplan.trace.scaling import category_vectors
from gpuplan.workload import Workload
from tests.fixtures.megatron_gpt import HEADS, HIDDEN

FIXTURE = Path(__file__).parent.parent / "fixtures" / "megatron_gpt.py"
S, B = 512, 2


def _layer_activation_bytes(kind: str) -> int:
    workload = Workload(mode="train", batch_size=B, seq_len=S, precision="fp16", optimizer="sgd")
    at_end_of_forward = []
    for layers in (3, 2):
        run = StepRunner(FactorySource(f"{FIXTURE}:{kind}_{layers}"), workload, Target(compute_capability=(8, 0))).run()
        last_forward = max(i for i, p in enumerate(run.trace.points) if p.phase == "forward")
        at_end_of_forward.append(category_vectors(run.trace, [last_forward])[last_forward]["activations"])
    return at_end_of_forward[0] - at_end_of_forward[1]


@pytest.mark.slow
def test_eager_attention_layer_matches_sbh_34_plus_5as_over_h() -> None:
    expected = S * B * HIDDEN * (34 + 5 * HEADS * S / HIDDEN)
    measured = _layer_activation_bytes("eager")
    assert abs(measured / expected - 1) <= 0.05, f"{measured} vs {expected:.0f} ({measured / expected - 1:+.1%})"


@pytest.mark.slow
def test_flash_attention_removes_the_5as_over_h_term() -> None:
    expected = S * B * HIDDEN * 34
    measured = _layer_activation_bytes("fused")
    assert abs(measured / expected - 1) <= 0.05, f"{measured} vs {expected:.0f} ({measured / expected - 1:+.1%})"
