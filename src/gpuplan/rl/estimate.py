"""``gpuplan.rl.rl``: one RL post-training step (GRPO / PPO / DAPO / DPO), phase by phase, per GPU.

Each figure comes from the rule that already owns it (rl/models.py: the planner for the trained models,
``estimate --mode infer`` for the forward-only passes; rl/rollout.py: ``serve``; rl/sync.py: the collectives);
this module only says which of them share a GPU during which phase (rl/phases.py adds them up).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuplan.hardware import resolve_gpu
from gpuplan.hardware.support import check_workload_on_gpu
from gpuplan.parallel.topology import make_topology
from gpuplan.rl.logprobs import log_prob_source
from gpuplan.rl.models import VALUE_HEAD_NOTE, Forward, Trained, forward, trained, value_model
from gpuplan.rl.phases import Residents, compose
from gpuplan.rl.result import RLResult
from gpuplan.rl.rollout import Rollout, rollout
from gpuplan.workload import SCALED_PRECISIONS, Workload

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.parallel.topology import Topology
    from gpuplan.rl.settings import RLSettings


def frozen_precision(gpu: GPU) -> str:
    """The reference and the reward model are held in 16 bits (verl builds its ref worker with
    ``torch_dtype=bfloat16``; TRL and OpenRLHF load them in the training dtype): bf16, fp16 without bf16."""
    return "bf16" if gpu.has_bf16 else "fp16"


def rl(settings: RLSettings, *, progress: Callable[[str], None] | None = None) -> RLResult:
    """Memory per GPU and seconds of every phase of one step of ``settings``, and whether it runs."""
    from gpuplan.models.base import refuse_pipeline
    from gpuplan.models.sources import resolve_model

    say = progress or (lambda _: None)
    gpu = resolve_gpu(settings.gpu)
    assert gpu is not None
    policy_w = settings.trainer_workload()
    check_workload_on_gpu(policy_w, gpu)  # the same refusal as every verb, before any trace
    source = resolve_model(settings.model)
    refuse_pipeline(source, "rl")
    topology = _trainer_topology(settings, gpu)
    n = settings.trainer_gpus
    seqs = settings.sequences_per_step
    mean = settings.mean_sequence_len  # time: padding removed; memory: the padded longest
    say(f"rl: tracing the policy's training step ({source.name})")
    policy = trained(source, policy_w, settings, gpu, topology, time_seq_len=mean)
    # the policy's forward: its base as the trainer holds it (QLoRA: the 4-bit base); the adapters are left out
    fwd_w = Workload(
        mode="infer",
        batch_size=settings.micro_batch,
        seq_len=settings.sequence_len,
        precision=_forward_precision(settings.precision, gpu),  # type: ignore[arg-type]
        load_in="4bit" if settings.peft == "qlora" else "none",
    )
    frozen_w = fwd_w.with_(precision=frozen_precision(gpu), load_in="none")
    # the log-prob passes: the forward and the framework's own ops on its logits (verl: the plain forward)
    log_probs = log_prob_source(source, settings.framework, settings.prompt_len)
    old: Forward | None = None
    if settings.generates or (settings.ref and settings.peft != "none"):
        say(f"rl: tracing the policy's log-prob forward ({settings.framework}'s)")
        old = forward(log_probs, fwd_w, seqs, gpu, topology, n, time_seq_len=mean, held_by=policy)
    ref: Forward | None = None
    if settings.ref:  # under PEFT the reference is the policy with its adapters off: the same forward
        ref = (
            old if settings.peft != "none" else forward(log_probs, frozen_w, seqs, gpu, topology, n, time_seq_len=mean)
        )
    if not settings.generates:
        old = None  # DPO: no old-policy pass
    reward = critic = critic_values = None
    if settings.reward_model is not None:
        say(f"rl: tracing the reward model ({settings.reward_model})")
        reward_source = value_model(resolve_model(settings.reward_model))
        reward = forward(reward_source, frozen_w, seqs, gpu, topology, n, time_seq_len=mean)
    if settings.critic is not None:
        say(f"rl: tracing the critic ({settings.critic})")
        critic_source = value_model(resolve_model(settings.critic))
        critic_w = policy_w.with_(peft="none")  # the value model trains whole (verl, OpenRLHF)
        critic = trained(critic_source, critic_w, settings, gpu, topology, time_seq_len=mean)
        critic_values = forward(critic_source, fwd_w, seqs, gpu, topology, n, time_seq_len=mean, held_by=critic)
    gen: Rollout | None = None
    if settings.generates:
        say(f"rl: sizing the {settings.rollout_engine} rollout engine")
        gen = rollout(source, settings, gpu)
    residents = Residents(
        policy=policy,
        ref=ref,
        reward=reward,
        critic=critic,
        ref_shares_policy=settings.peft != "none",
        ref_offloaded="ref" in settings.offload,
    )
    phases = compose(
        settings,
        gpu,
        residents,
        old=old,
        critic_values=critic_values,
        rollout=gen,
        cluster=make_topology(gpu, settings.gpus, nodes=settings.nodes),
    )
    usable = gpu.usable_memory_bytes
    reason = _reason(phases, usable, gen)
    return RLResult(
        settings=settings,
        model=source.name,
        gpu=gpu,
        phases=phases,
        usable_bytes=usable,
        reason=reason,
        assumptions=_assumptions(settings, policy, gen),
        rollout=gen,
    )


LOG_PROB_NOTES: dict[str, str] = {
    "verl": "verl's way (--framework verl): its full-vocabulary logits [micro-batch × (prompt + longest response), "
    "vocab] in 16 bits and nothing larger after them — remove-padding logits [tokens, vocab], log-probs by "
    "flash-attn's fused cross-entropy or a row-by-row log_softmax, entropy through torch.compile "
    "(volcengine/verl verl/workers/actor/dp_actor.py @0081137b, verl/utils/torch_functional.py @03c8cca1)",
    "trl": "TRL's way (--framework trl): logits of the completion's positions only (transformers' logits_to_keep = "
    "longest response + 1, the last dropped), one temperature-scaled copy, selective_log_softmax row by row in 16 "
    "bits, all traced (huggingface/trl trl/trainer/grpo_trainer.py @000bb3db); the old-policy pass is counted "
    "although TRL skips it when num_iterations is 1 and each generation feeds one optimizer step",
    "openrlhf": "OpenRLHF's way (--framework openrlhf): the actor upcasts the full-vocabulary logits to float32 "
    "(one fp32 copy beside the 16-bit logits until it replaces them), then gathers the labels' logits and takes "
    "the logsumexp 1024 rows at a time, all traced (OpenRLHF/OpenRLHF openrlhf/models/actor.py, "
    "openrlhf/models/utils.py, OpenRLHF PR #634)",
}


def log_prob_note(framework: str) -> str:
    """The assumption line of the log-prob passes, sized ``framework``'s way."""
    return (
        "log-prob passes (old policy, reference): the forward traced in the 16-bit compute dtype the trainer "
        "gathers each block in (FSDP mixed precision, DeepSpeed bf16; no autocast copy of every weight) beside the "
        "weight shards the trainer holds, sized " + LOG_PROB_NOTES[framework] + " (rl --framework verl|trl|"
        "openrlhf, default verl or the --emit framework)"
    )


def _forward_precision(precision: str, gpu: GPU) -> str:
    """The compute dtype of the trainer's forward: FSDP mixed precision (verl's ``param_dtype`` bf16, accelerate's
    FSDP2 ``MixedPrecisionPolicy``) and DeepSpeed bf16 gather each block's weights in 16 bits, so the pass is traced
    in 16 bits — not under autocast, whose cache would keep a 16-bit copy of every fp32 weight — and the fp32
    shards are counted as held (``rl.models.forward(held_by=)``); the scaled formats (torchao float8, MXFP8,
    NVFP4) are training recipes, so their forward is in 16 bits too."""
    if precision in SCALED_PRECISIONS:
        return frozen_precision(gpu)
    return Workload(mode="train", precision=precision).module_dtype_precision or precision  # type: ignore[arg-type]


def _trainer_topology(settings: RLSettings, gpu: GPU) -> Topology:
    """The trainer's GPUs: whole nodes of the cluster where they fill them, else as many per node as divide
    both (split placement leaves the rollout the rest)."""
    per_node = settings.gpus // settings.nodes
    n = settings.trainer_gpus
    return make_topology(gpu, n, gpus_per_node=math.gcd(n, per_node))


def _reason(phases: tuple[object, ...], usable: int, gen: Rollout | None) -> str | None:
    from gpuplan.units import format_bytes

    if gen is not None and not gen.ok:
        why = gen.engine.reason or "its KV cache holds no sequence of prompt + response tokens"
        for flag in ("--gpu-memory-utilization", "--max-num-seqs"):  # the flags of this verb
            why = why.replace(flag, "--rollout-" + flag[2:].replace("gpu-", ""))
        return f"the {gen.engine.settings.engine} rollout engine does not start: {why}"
    worst = max(phases, key=lambda p: p.peak_bytes_per_gpu)  # type: ignore[attr-defined]
    if worst.peak_bytes_per_gpu > usable:  # type: ignore[attr-defined]
        return (
            f"{worst.name} needs {format_bytes(worst.peak_bytes_per_gpu)} per GPU, "  # type: ignore[attr-defined]
            f"{format_bytes(usable)} usable"
        )
    return None


def _assumptions(settings: RLSettings, policy: Trained, gen: Rollout | None) -> tuple[str, ...]:
    from gpuplan.rl.models import trainer_layout

    layout = trainer_layout(settings)
    out = [
        f"trainer: {layout.describe()} over {settings.trainer_gpus} GPU(s), micro-batch {settings.micro_batch} "
        f"sequences of {settings.sequence_len} tokens (prompt + longest response, padded) for the memory and of "
        f"{settings.mean_sequence_len} (prompt + mean response: padding removed, as verl's use_remove_padding and "
        "OpenRLHF's --packing_samples run) for the time, "
        f"{settings.grad_accum} micro-batch(es) per optimizer step, {settings.optimizer_steps} optimizer step(s) per "
        "RL step: the planner's evaluator on the exact traced step",
        "the policy loss is traced as the causal LM's cross entropy over the full vocabulary (the same logits, "
        "log-softmax and gather a token-level RL loss computes)",
        log_prob_note(settings.framework),
        *policy.profile.assumptions,
    ]
    if settings.critic is not None or settings.reward_model is not None:
        out.append(VALUE_HEAD_NOTE)
    if settings.ref and settings.peft != "none":
        out.append("reference: the policy with its adapters disabled (verl, TRL under PEFT): no second copy")
    if gen is not None:
        e = gen.engine.settings
        out.append(
            f"rollout: {e.engine} tp {e.tp} × {gen.replicas} replica(s), memory utilization "
            f"{e.gpu_memory_utilization:g}, max_num_seqs {e.max_num_seqs}, {gen.sequences_per_replica} "
            f"sequences per replica decoded {gen.batch} at a time in {gen.waves} wave(s), "
            + ("CUDA graphs on" if e.cuda_graphs else "CUDA graphs off (enforce_eager: eager decode steps)")
        )
        if settings.placement == "colocate":
            out.append(
                "colocated: the engine sleeps during the trainer's phases (vLLM enable_sleep_mode=True and "
                "LLM.sleep(level=1|2) / wake_up; SGLang enable_memory_saver=True and "
                "release_memory_occupation / resume_memory_occupation): weights and KV cache freed, CUDA "
                "graphs and non-torch memory kept; the trainer's shards stay resident during the rollout "
                "unless offloaded"
            )
    out.append(
        "step time: the phases one after another (verl's and OpenRLHF's synchronous default; an "
        "asynchronous split overlaps generation with training)"
    )
    return tuple(out)
