"""fit for fine-tuning: the largest sequence length of a PEFT setup on a GPU (the context-length
frontier the Unsloth and LLaMA-Factory tables print), and the ladder's PEFT rungs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuplan.estimate
from gpuplan.advise.fit import SEQ_LEN_STEP, _ladder, largest_seq_len
from gpuplan.errors import ConfigError
from gpuplan.hardware import GPU, get_gpu
from gpuplan.models.sources import HFConfigSource
from gpuplan.report.advise import answer_flags
from gpuplan.workload import Workload
from tests.advise.conftest import shrunk
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA

LORA = Workload(batch_size=4, peft="lora", precision="bf16")
TINY_LLAMA_SOURCE = HFConfigSource("tiny-llama", TINY_LLAMA)


class LinearInSeq:
    """A stand-in for ``estimate()`` whose need is exactly fixed + per_token·seq_len: the search is
    checked against an answer known in advance."""

    def __init__(self, gpu: GPU, answer_tokens: int, per_token: int = 1 << 20) -> None:
        self.per_token = per_token
        self.fixed = gpu.usable_memory_bytes - answer_tokens * per_token
        self.calls: list[Workload] = []

    def __call__(self, model: Any, *, workload: Workload, gpu: GPU, **_: Any) -> Any:
        self.calls.append(workload)
        need = self.fixed + (workload.seq_len or 0) * self.per_token
        return SimpleNamespace(total_required_bytes=need, peak_allocated_bytes=need, min_required_bytes=need,
                               tensor_peak_bytes=need, fits=need <= gpu.usable_memory_bytes, step_time_s=None,
                               throughput=None, assumptions=())


@pytest.mark.parametrize("answer_tokens", [64, 1000, 5000, 37_000])
def test_seq_len_search_finds_the_frontier_in_bounded_traces(monkeypatch: pytest.MonkeyPatch,
                                                             answer_tokens: int) -> None:
    gpu = get_gpu("RTX-4090")
    stub = LinearInSeq(gpu, answer_tokens)
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    result = largest_seq_len(HFConfigSource("tiny-llama", TINY_LLAMA), gpu, LORA)
    expected = answer_tokens // SEQ_LEN_STEP * SEQ_LEN_STEP  # largest multiple of the step that fits
    assert result.max_seq_len == expected
    assert result.max_point is not None and result.max_point.fits
    assert result.over_point is not None and not result.over_point.fits
    assert result.over_point.workload.seq_len == expected + SEQ_LEN_STEP
    assert {w.batch_size for w in stub.calls} == {LORA.batch_size}  # the batch is held
    assert result.traces <= 16
    assert result.to_dict()["max_seq_len"] == expected


@pytest.mark.slow
def test_seq_len_frontier_is_estimate_verdict_on_real_traces() -> None:
    """Tiny Llama + LoRA on a GPU shrunk to a few hundred MiB: the answer fits and 64 tokens more
    do not, by estimate()'s own verdict on real fake-tensor traces."""
    gpu = shrunk("L4", 470)
    two_blocks = HFConfigSource("tiny-llama-2", {**TINY_LLAMA, "num_hidden_layers": 2})  # traced whole: fast
    result = largest_seq_len(two_blocks, gpu, LORA)
    assert result.ok and result.max_seq_len % SEQ_LEN_STEP == 0
    assert result.max_point is not None and result.over_point is not None
    assert result.max_point.fits and not result.over_point.fits
    assert result.over_point.workload.seq_len == result.max_seq_len + SEQ_LEN_STEP
    assert result.max_point.workload.peft == "lora"
    assert "largest sequence length that fits" in str(result)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer_tokens=st.integers(min_value=SEQ_LEN_STEP, max_value=2_000_000),
       per_token=st.integers(min_value=1 << 10, max_value=1 << 22))
def test_seq_len_search_property(monkeypatch: pytest.MonkeyPatch, answer_tokens: int, per_token: int) -> None:
    """For any memory line, the answer is the largest multiple of the step under it, confirmed by a
    fitting trace there and a failing one a step further, in a bounded number of traces."""
    gpu = get_gpu("H100-SXM")
    if answer_tokens * per_token >= gpu.usable_memory_bytes:
        return  # the fixed part would be negative: no such model
    monkeypatch.setattr(gpuplan.estimate, "estimate", LinearInSeq(gpu, answer_tokens, per_token))
    result = largest_seq_len(TINY_LLAMA_SOURCE, gpu, LORA)
    assert result.max_seq_len == answer_tokens // SEQ_LEN_STEP * SEQ_LEN_STEP
    assert result.over_point is not None and not result.over_point.fits
    assert result.traces <= 16


def test_seq_len_search_stops_at_a_learned_position_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's wpe holds n_positions = 128 rows: longer sequences cannot run, whatever the memory."""
    gpu = get_gpu("RTX-4090")
    monkeypatch.setattr(gpuplan.estimate, "estimate", LinearInSeq(gpu, answer_tokens=5000))
    gpt2 = HFConfigSource("tiny-gpt2", {"architectures": ["GPT2LMHeadModel"], **TINY_GPT2})
    result = largest_seq_len(gpt2, gpu, LORA)
    assert result.max_seq_len == 128 and result.over_point is None and result.limit_tokens == 128
    assert any("learned position table holds no more" in a for a in result.assumptions)


def test_seq_len_nothing_fits_is_a_no_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = get_gpu("T4")
    monkeypatch.setattr(gpuplan.estimate, "estimate", LinearInSeq(gpu, answer_tokens=10))
    result = largest_seq_len(HFConfigSource("tiny-llama", TINY_LLAMA), gpu, LORA)
    assert not result.ok and result.max_seq_len == 0
    assert result.reason is not None and "do not fit T4" in result.reason


def test_seq_len_limit_is_checked() -> None:
    with pytest.raises(ConfigError, match="sequence-length limit 10 is out of range"):
        largest_seq_len(HFConfigSource("tiny-llama", TINY_LLAMA), "T4", LORA, limit_tokens=10)


def test_peft_ladder_rungs_cheapest_first() -> None:
    gpu = get_gpu("RTX-4090")
    base = Workload(peft="lora", lora_rank=64, lora_targets=("all-linear",), precision="bf16")
    names = [name for name, _, _ in _ladder(base, gpu)]
    assert names == ["8bit-optimizer", "smaller-rank", "default-targets", "selective-checkpointing",
                     "full-checkpointing", "4bit-base", "paged-optimizer"]
    changes = {name: change for name, _, change in _ladder(base, gpu)}
    assert changes["4bit-base"] == {"peft": "qlora"}
    assert changes["smaller-rank"] == {"lora_rank": 8}
    # QLoRA already has a 4-bit base, QDoRA is not modelled; full fine-tuning gets no PEFT rung
    for other in ("qlora", "dora"):
        assert "4bit-base" not in [n for n, _, _ in _ladder(base.with_(peft=other), gpu)]
    assert not {"smaller-rank", "4bit-base", "paged-optimizer"} & {n for n, _, _ in _ladder(Workload(), gpu)}


def test_answer_flags_name_the_peft_changes() -> None:
    base = Workload(peft="lora", lora_rank=64, lora_targets=("q_proj",), precision="bf16")
    final = base.with_(peft="qlora", lora_rank=8, lora_targets=(), checkpointing="full")
    point = SimpleNamespace(workload=final)
    result = SimpleNamespace(techniques=[SimpleNamespace(point=point, name="4bit-base")], workload=base,
                             target_batch_size=None)
    flags = answer_flags(result)  # type: ignore[arg-type]
    assert "--checkpointing full" in flags and "--peft qlora" in flags and "--lora-rank 8" in flags
    assert "PEFT's default" in flags


class LongContextStub(LinearInSeq):
    """Each long-context technique lowers the bytes per token (full checkpointing, fused linear CE, tiled MLP,
    activation offload): the rungs' answers are known in advance."""

    SHARE: ClassVar[dict[str, float]] = {"checkpointing": 0.5, "loss": 0.8, "tiled_mlp": 0.75, "offload": 0.5}

    def __call__(self, model: Any, *, workload: Workload, gpu: GPU, **kw: Any) -> Any:
        factor = 1.0
        for field, on in (("checkpointing", workload.checkpointing == "full"),
                          ("loss", workload.loss == "fused-linear-ce"), ("tiled_mlp", workload.tiled_mlp),
                          ("offload", workload.offload == "activations")):
            factor *= self.SHARE[field] if on else 1.0
        shrunk_seq = int((workload.seq_len or 0) * factor)
        return super().__call__(model, workload=workload.with_(seq_len=max(1, shrunk_seq)), gpu=gpu, **kw)


def test_seq_len_long_context_ladder_rungs(monkeypatch: pytest.MonkeyPatch) -> None:
    """fit --axis seq-len's long-context rungs (issue 23): cumulative, in the ALST order, each searched, the
    answer growing with each; the as-given answer stays ``max_seq_len``."""
    gpu = get_gpu("H100-SXM")
    stub = LongContextStub(gpu, answer_tokens=4096, per_token=1 << 20)
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    source = HFConfigSource("tiny-llama", TINY_LLAMA, task="causal-lm")
    result = largest_seq_len(source, gpu, Workload(batch_size=1), limit_tokens=1 << 20, ladder=True)
    assert result.max_seq_len == 4096
    names = [r.name for r in result.ladder]
    assert names == ["full-checkpointing", "fused-linear-ce", "tiled-mlp", "activation-offload"]
    answers = [r.max_seq_len for r in result.ladder]
    assert answers == sorted(answers) and answers[-1] > answers[0] > 4096
    assert answers[-1] == int(4096 / (0.5 * 0.8 * 0.75 * 0.5)) // SEQ_LEN_STEP * SEQ_LEN_STEP
    last = result.ladder[-1].max_point
    assert last is not None and last.workload.offload == "activations" and last.workload.tiled_mlp
    assert [r["name"] for r in result.to_dict()["ladder"]] == names
    assert "long-context rungs" in str(result)
    assert not largest_seq_len(source, gpu, Workload(batch_size=1), limit_tokens=1 << 20).ladder  # library: opt-in
