"""``gpuplan.rl``: each phase is the figure of the rule that owns it (one rule each), and the step's
invariants (more samples, split placement, LoRA), on the tiny GPT-2 language model of tests/fixtures."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.estimate import estimate
from gpuplan.parallel.forward import sharded_forward
from gpuplan.parallel.plan import plan
from gpuplan.parallel.topology import make_topology
from gpuplan.rl import RLSettings, rl
from gpuplan.rl.models import trainer_layout
from gpuplan.serve import serve
from gpuplan.workload import Workload

GPU = "H100-SXM"
SHAPE: dict[str, Any] = dict(
    prompts_per_step=4,
    samples_per_prompt=4,
    prompt_len=32,
    response_len=32,
    max_response_len=64,
    rollout_max_num_seqs=16,
    rollout_max_num_batched_tokens=256,
)


def make(model: str, **changes: Any) -> RLSettings:
    return RLSettings(**{"model": model, "gpu": GPU, "gpus": 2, **SHAPE, **changes})


def _planned(model: str, s: RLSettings, seq_len: int) -> Any:
    """plan's evaluation of the trainer's layout (FSDP2 over both GPUs) at ``seq_len`` tokens per sequence."""
    p = plan(
        model,
        gpus=2,
        gpu=GPU,
        dp=2,
        tp=1,
        pp=1,
        cp=1,
        fsdp=True,
        micro_batch_size=s.micro_batch,
        global_batch_size=s.global_batch,
        workload=s.trainer_workload(seq_len=seq_len),
        checkpointing_fixed=True,
    )
    same = [e for e in (p.best, *(e for e, _ in p.alternatives)) if e.layout == trainer_layout(s)]
    assert same, "plan did not evaluate the trainer's layout"
    return same[0]


def test_train_phase_is_the_planners_evaluation_of_the_trainer_layout(tiny_gpt2: str) -> None:
    """Memory at prompt + longest response (padded), time at prompt + mean response (padding removed)."""
    s = make(tiny_gpt2)
    train = rl(s).phase_map["train"]
    assert train.parts_bytes["this_phase"] == _planned(tiny_gpt2, s, 32 + 64).per_gpu_peak_bytes
    assert train.seconds == _planned(tiny_gpt2, s, 32 + 32).step_time_s * s.optimizer_steps


@pytest.mark.parametrize("eager", [False, True])
def test_rollout_phase_is_serve_for_the_same_engine_settings(tiny_gpt2: str, eager: bool) -> None:
    s = make(tiny_gpt2, rollout_memory_utilization=0.3, rollout_enforce_eager=eager)
    result = rl(s)
    assert result.rollout is not None
    alone = serve(
        tiny_gpt2,
        gpu=GPU,
        tp=1,
        engine="vllm",
        max_model_len=96,
        input_len=32,
        output_len=32,
        gpu_memory_utilization=0.3,
        llm_class=True,
        concurrency=result.rollout.batch,
        max_num_seqs=16,
        max_num_batched_tokens=256,
        enforce_eager=eager,
    )
    assert alone.settings.cuda_graphs is not eager
    assert result.phase_map["generate"].parts_bytes["engine"] == alone.budget.engine_bytes
    assert result.phase_map["train"].parts_bytes["engine_asleep"] == alone.budget.asleep_bytes
    assert result.rollout.engine.decode.seconds == alone.decode.seconds
    assert result.rollout.batch == min(math.ceil(16 / 2), alone.max_concurrency)  # 16 sequences on 2 replicas


def test_log_prob_phase_is_the_forward_trace_sharded(tiny_gpt2: str) -> None:
    """The policy's log-prob pass: the forward traced in the 16-bit compute dtype FSDP mixed precision gathers
    (amp-bf16 → bf16: no autocast cache of the weights), with the fp32 shards the trainer holds (the planner's
    figure for the same layout) in place of the traced weights, one GPU included; the frozen reference (its own
    bf16 model) is the same forward sharded evenly."""
    s = make(tiny_gpt2)
    result = rl(s)
    w = Workload(mode="infer", batch_size=1, seq_len=96, precision="bf16")
    step = estimate(tiny_gpt2, gpu=GPU, workload=w).step
    held = _planned(tiny_gpt2, s, 32 + 64).ranks[0].params_bytes
    assert held > step.param_bytes // 2  # fp32 shards: twice the bf16 half
    shard = sharded_forward(step, make_topology(result.gpu, 2), 2, held_bytes_per_gpu=held)
    assert result.phase_map["old_log_prob"].parts_bytes["this_phase"] == shard.bytes_per_gpu
    ref = sharded_forward(step, make_topology(result.gpu, 2), 2)
    assert result.phase_map["ref_log_prob"].parts_bytes["this_phase"] == ref.bytes_per_gpu


def test_log_prob_pass_is_each_frameworks_traced_forward(tiny_gpt2: str) -> None:
    """TRL keeps only the completion's logits, verl the whole 16-bit logits, OpenRLHF adds an fp32 copy of them:
    at micro-batch 8 (logits of 1.5 MB in 16 bits, a 20 MB allocator segment) the peaks order TRL < verl <
    OpenRLHF, and each phase is the direct trace of that framework's pass (rl/logprobs.py) sharded as the
    trainer holds it."""
    from gpuplan.models.sources import resolve_model
    from gpuplan.rl.logprobs import log_prob_source

    peaks = {}
    for fw in ("trl", "verl", "openrlhf"):
        s = make(tiny_gpt2, framework=fw, train_micro_batch=8)
        result = rl(s)
        w = Workload(mode="infer", batch_size=8, seq_len=96, precision="bf16")
        step = estimate(log_prob_source(resolve_model(tiny_gpt2), fw, 32), gpu=GPU, workload=w).step
        ref = sharded_forward(step, make_topology(result.gpu, 2), 2)
        assert result.phase_map["ref_log_prob"].parts_bytes["this_phase"] == ref.bytes_per_gpu
        peaks[fw] = result.phase_map["old_log_prob"].peak_bytes_per_gpu
    assert peaks["trl"] < peaks["verl"] < peaks["openrlhf"], peaks


def test_colocated_phases_carry_the_sleeping_engine_and_the_resident_trainer(tiny_gpt2: str) -> None:
    result = rl(make(tiny_gpt2))
    assert result.rollout is not None
    asleep = result.rollout.engine.budget.asleep_bytes
    for name in ("old_log_prob", "ref_log_prob", "train", "weight_sync"):
        assert result.phase_map[name].parts_bytes["engine_asleep"] == asleep
    gen = result.phase_map["generate"].parts_bytes
    assert gen["policy"] > 0 and gen["ref"] > 0  # FSDP shards stay during the rollout (no offload)
    offloaded = rl(make(tiny_gpt2, offload=frozenset({"params", "optimizer", "ref"})))
    assert offloaded.phase_map["generate"].parts_bytes["policy"] == 0
    assert "ref" not in offloaded.phase_map["generate"].parts_bytes


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(2, 12), more=st.integers(1, 6))
def test_more_samples_never_less_memory_or_time(tiny_gpt2: str, k: int, more: int) -> None:
    a, b = rl(make(tiny_gpt2, samples_per_prompt=k)), rl(make(tiny_gpt2, samples_per_prompt=k + more))
    assert b.peak_bytes_per_gpu >= a.peak_bytes_per_gpu
    assert b.step_time_s >= a.step_time_s
    for name, phase in a.phase_map.items():
        assert b.phase_map[name].peak_bytes_per_gpu >= phase.peak_bytes_per_gpu, name


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    trainer=st.sampled_from([1, 2]),
    rollout=st.sampled_from([1, 2]),
    u=st.sampled_from([0.3, 0.5, 0.8]),
    algorithm=st.sampled_from(["grpo", "ppo"]),
)
def test_split_never_more_memory_per_gpu_than_colocated(
    tiny_gpt2: str, trainer: int, rollout: int, u: float, algorithm: str
) -> None:
    """The same models and engine settings: split gives the engine GPUs of its own beside the same trainer GPUs."""
    shape = dict(gpus=trainer, rollout_memory_utilization=u, algorithm=algorithm, samples_per_prompt=2)
    colocated = rl(make(tiny_gpt2, **shape))
    split = rl(make(tiny_gpt2, **{**shape, "gpus": trainer + rollout}, placement="split", rollout_gpus=rollout))
    assert split.peak_bytes_per_gpu <= colocated.peak_bytes_per_gpu


SMALL_LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 4096,
    "max_position_embeddings": 256,
}
"""Weights well above one micro-batch's activations: on the tiny GPT-2 (172k parameters) the planner's allocator
slack (a fraction of the traced step's allocated bytes: 0.97 under LoRA, 0.20 without) outweighs the states LoRA
saves, a tiny-trace artefact rather than what LoRA does to a real model."""


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    import json

    path = tmp_path_factory.mktemp("models") / "small-llama.json"
    path.write_text(json.dumps(SMALL_LLAMA))
    return str(path)


@pytest.mark.slow  # ~25 s: the small LLaMA traced with and without LoRA
@pytest.mark.parametrize("algorithm", ["grpo", "dpo"])
def test_lora_never_more_memory_than_full(small_llama: str, algorithm: str) -> None:
    full = rl(make(small_llama, algorithm=algorithm, samples_per_prompt=None if algorithm == "dpo" else 4))
    lora = rl(replace(full.settings, peft="lora"))
    assert lora.peak_bytes_per_gpu <= full.peak_bytes_per_gpu
    for name, phase in lora.phase_map.items():
        assert phase.peak_bytes_per_gpu <= full.phase_map[name].peak_bytes_per_gpu, name


@pytest.mark.slow  # ~40 s: the small LLaMA traced with both heads, and a PPO step
def test_critic_and_reward_model_are_the_backbone_with_a_value_head(tiny_gpt2: str, small_llama: str) -> None:
    """verl builds both as AutoModelForTokenClassification with num_labels = 1 (rl/models.VALUE_HEAD_NOTE): the
    traced model is the LM's backbone and a hidden → 1 linear layer in place of the (untied) LM head, its output
    one value per token instead of the vocabulary's logits."""
    from gpuplan.models.sources import resolve_model
    from gpuplan.rl.models import value_model

    w = Workload(mode="infer", batch_size=2, seq_len=64, precision="bf16")
    lm = estimate(small_llama, gpu=GPU, workload=w)
    critic = estimate(value_model(resolve_model(small_llama)), gpu=GPU, workload=w)
    hidden, vocab = SMALL_LLAMA["hidden_size"], SMALL_LLAMA["vocab_size"]
    assert critic.step.params_count == lm.step.params_count - vocab * hidden + hidden + 1  # score weight + bias
    logits = 2 * 64 * vocab * 2  # the LM's bf16 [batch, tokens, vocab] output, absent from the critic's forward
    assert critic.step.tensor_peak_bytes <= lm.step.tensor_peak_bytes - 2 * (vocab * hidden - hidden - 1)
    assert lm.step.tensor_peak_bytes - critic.step.tensor_peak_bytes <= 2 * vocab * hidden + logits
    result = rl(make(tiny_gpt2, algorithm="ppo", samples_per_prompt=1, reward_model=tiny_gpt2))
    reward = sharded_forward(
        estimate(value_model(resolve_model(tiny_gpt2)), gpu=GPU, workload=w.with_(batch_size=1, seq_len=96)).step,
        make_topology(result.gpu, 2),
        2,
    )
    assert result.phase_map["reward"].parts_bytes["this_phase"] == reward.bytes_per_gpu
    assert any("value head" in a for a in result.assumptions)
