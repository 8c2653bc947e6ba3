"""Fake-traced peak vs a real CPU run tracked storage by storage (issue 2: within 1%).

The real run executes the same step on real CPU tensors under the same recorder: every storage's
allocation and free is observed as it happens. The fake trace must reproduce that peak before any
GPU-specific term, so both use host semantics here (``cuda=False``: CPU autocast lists, CPU
attention kernels, the optimizer implementation torch picks on CPU). The fake side of models
with a layer count is traced at 3 and 2 blocks and scaled to the full depth, so these checks
cover the scaling as well.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.models.sources import FactorySource, HFConfigSource, ModelSource, TorchvisionSource
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_BERT, TINY_GPT2, TINY_LLAMA, TINY_T5

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tiny_models.py"
TOLERANCE = 0.01


def _source(name: str) -> ModelSource:
    if name == "mlp":
        return FactorySource(f"{FIXTURES}:mlp,mlp_inputs")
    if name == "cnn":
        return FactorySource(f"{FIXTURES}:small_cnn")
    if name == "resnet18":
        return TorchvisionSource("resnet18")
    configs = {"gpt2": TINY_GPT2, "llama": TINY_LLAMA, "bert": TINY_BERT, "t5": TINY_T5}
    return HFConfigSource(f"tiny-{name}", configs[name])


CASES = [
    ("mlp", Workload(mode="train", batch_size=16)),
    ("mlp", Workload(mode="train", batch_size=16, optimizer="sgd")),
    ("cnn", Workload(mode="train", batch_size=4, image_size=32)),
    ("cnn", Workload(mode="infer", batch_size=4, image_size=32)),
    ("resnet18", Workload(mode="train", batch_size=2, image_size=64, optimizer="sgd-momentum")),
    ("resnet18", Workload(mode="train", batch_size=2, image_size=64, checkpointing="full")),
    ("gpt2", Workload(mode="train", batch_size=2, seq_len=32)),
    ("gpt2", Workload(mode="train", batch_size=2, seq_len=32, precision="amp-bf16", optimizer="sgd")),
    ("gpt2", Workload(mode="generate", batch_size=2, seq_len=16, new_tokens=4)),
    ("llama", Workload(mode="train", batch_size=2, seq_len=32, checkpointing="full")),
    ("llama", Workload(mode="train", batch_size=2, seq_len=32, precision="amp-bf16")),
    ("llama", Workload(mode="infer", batch_size=2, seq_len=32)),
    ("llama", Workload(mode="generate", batch_size=2, seq_len=16, new_tokens=4)),
    ("bert", Workload(mode="train", batch_size=2, seq_len=32)),
    ("bert", Workload(mode="train", batch_size=2, seq_len=32, precision="amp-bf16", checkpointing="full")),
    ("t5", Workload(mode="train", batch_size=2, seq_len=16)),
    ("t5", Workload(mode="train", batch_size=2, seq_len=16, decoder_seq_len=40)),  # --decoder-seq-len
]


@pytest.mark.parametrize(("model", "workload"), CASES, ids=[f"{m}-{w.mode}-{w.precision}-{w.optimizer}-"
                                                             f"ckpt:{w.checkpointing}" for m, w in CASES])
@pytest.mark.slow
def test_fake_trace_matches_real_cpu_run(model: str, workload: Workload) -> None:
    source = _source(model)
    real = trace_step(source, workload, cuda=False, fake=False)
    fake = trace_step(source, workload, cuda=False, fake=True)
    assert real.tensor_peak_bytes > 0
    error = fake.tensor_peak_bytes / real.tensor_peak_bytes - 1
    assert abs(error) <= TOLERANCE, (
        f"fake {fake.tensor_peak_bytes} vs real {real.tensor_peak_bytes} bytes ({error:+.2%}); "
        f"real peak in {real.peak_phase}, fake in {fake.peak_phase}")
    assert fake.params_count == real.params_count
