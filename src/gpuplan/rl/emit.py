"""Launch configurations for the RL frameworks that run a ``gpuplan rl`` step: TRL (``GRPOConfig`` /
``DPOConfig`` YAML for ``trl.TrlParser`` plus the ``accelerate launch`` line, and ``trl vllm-serve`` when split),
verl (``python3 -m verl.trainer.main_ppo`` with Hydra overrides) and OpenRLHF (``python3 -m
openrlhf.cli.train_ppo_ray``). Strings only; nothing is launched.

Every key and flag below was read in the framework's own source, at the versions named in ``SOURCES`` (the
tests parse the output with those loaders where installed, and check every key against lists extracted from
the same files: tests/rl/data/framework_keys.json). Where a framework has no setting for what the settings ask
(a split placement in verl's synchronous trainer, PPO in TRL's vLLM trainers, policy-parameter offload in
OpenRLHF...), ``emit_config`` refuses with one line naming the frameworks that can.

The emitted configuration reproduces what ``gpuplan rl`` modelled (gpuplan.rl.models): the trainer sharded
over its GPUs (FSDP2; DeepSpeed ZeRO-3 with CPU offload when ``--offload params|optimizer``), the rollout engine
asleep while the trainer runs when colocated (vLLM sleep mode), the reference skipped under PEFT (the base
model with the adapter disabled). Data, reward functions and learning rates are the user's: the header says
which lines to add.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Final, Protocol

from gpuplan.errors import ConfigError
from gpuplan.workload import ALL_LINEAR

if TYPE_CHECKING:
    from gpuplan.rl.settings import RLSettings

FRAMEWORKS: Final[tuple[str, ...]] = ("trl", "verl", "openrlhf")
SOURCES: Final[dict[str, str]] = {
    # the released package each framework's keys were read from, and the git commit holding the same names
    "trl": "trl 1.16.0 (PyPI): trl/trainer/grpo_config.py, dpo_config.py, model_config.py, scripts/vllm_serve.py; "
    "same fields at huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8",
    "verl": "verl 0.9.1 (PyPI): verl/trainer/config/_generated_ppo_trainer.yaml; "
    "same keys at verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9",
    "openrlhf": "openrlhf 0.11.2 (PyPI): openrlhf/cli/train_ppo_ray.py (the dotted flags since 0.10.1); "
    "same flags at OpenRLHF/OpenRLHF@3c3be6234e0cb353e76bb8019947db9dfe99fca7 (v0.11.0)",
}
KL_COEF: Final = 0.001
"""The KL weight when a reference is kept: DeepSeek-R1's value, which TRL's GRPOConfig.beta help text cites
(a positive beta is what makes TRL load the reference; 0 skips it)."""
DAPO_CLIP_HIGH: Final = 0.28
"""DAPO's clip-higher bound (Yu et al. 2025, section 3.1: epsilon_low 0.2, epsilon_high 0.28)."""
TRL_OPTIMIZERS: Final[dict[str, str]] = {
    # transformers OptimizerNames values; the memory of each is what gpuplan traced for the same name
    "adamw": "adamw_torch",
    "adam": "adamw_torch",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
}


class Answer(Protocol):
    """What the emitters read of ``gpuplan rl``'s answer (gpuplan.rl.result.RLResult): a header line."""

    @property
    def fits(self) -> bool: ...

    @property
    def step_time_s(self) -> float: ...


def emit_config(settings: RLSettings, result: Answer | None, framework: str) -> str:
    """The launch configuration of ``framework`` (trl | verl | openrlhf) for ``settings`` as text; ConfigError
    (one line naming what can) when that framework has no setting for what ``settings`` asks."""
    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown --emit {framework!r} (allowed: {', '.join(FRAMEWORKS)})")
    refused = refusal(settings, framework)
    if refused is not None:
        raise ConfigError(refused)
    head = [f"# {framework}: {SOURCES[framework]}"]
    if result is not None:
        verdict = "fits" if result.fits else "does NOT fit"
        head.append(f"# gpuplan rl: {verdict}; {result.step_time_s:.1f} s per step (estimate)")
    head += [f"# note: {note}" for note in _engine_notes(settings, framework)]
    body = {"trl": _trl, "verl": _verl, "openrlhf": _openrlhf}[framework](settings)
    return "\n".join(head) + "\n" + body


def _engine_notes(s: RLSettings, framework: str) -> list[str]:
    """Engine knobs gpuplan sized that the framework leaves at vLLM's defaults (verl alone sets them)."""
    if framework == "verl":
        return []
    knobs = [(s.rollout_max_num_seqs, "max_num_seqs"), (s.rollout_max_num_batched_tokens, "max_num_batched_tokens")]
    notes = [
        f"{framework} has no vLLM {name} setting: its engine runs vLLM's default, gpuplan sized {value}"
        for value, name in knobs
        if value is not None
    ]
    if framework == "trl" and s.rollout_enforce_eager and s.placement == "colocate":
        # GRPOConfig (trl 1.16.0) has no enforce_eager field; only `trl vllm-serve` (split) takes one
        notes.append(
            "trl's colocated engine has no enforce_eager setting: it captures vLLM's CUDA graphs, gpuplan sized "
            "none (--rollout-enforce-eager)"
        )
    return notes


# ------------------------------------------------------------------------------------------- refusals
def refusal(s: RLSettings, framework: str) -> str | None:
    """One line saying why ``framework`` cannot run ``s`` as gpuplan modelled it, or None."""
    why = _REFUSALS[framework](s)
    if why is None:
        return None
    others = [f for f in FRAMEWORKS if f != framework and _REFUSALS[f](s) is None]
    hint = ("; use " + " or ".join(f"--emit {f}" for f in others)) if others else ""
    return f"--emit {framework} cannot express it: {why}{hint}"


def _common_refusal(s: RLSettings, name: str, precisions: tuple[str, ...]) -> str | None:
    if s.precision not in precisions:
        return f"{name} trains in {' or '.join(precisions)}, not --precision {s.precision}"
    if s.checkpointing not in ("none", "full"):
        return (
            f"{name} checkpoints whole decoder layers only (gradient checkpointing on or off), not "
            f"--checkpointing {s.checkpointing}"
        )
    if s.rollout_engine != "vllm" and name != "verl":
        return f"{name} rolls out with vLLM only, not --rollout-engine {s.rollout_engine}"
    return None


def _trl_refusal(s: RLSettings) -> str | None:
    if s.algorithm == "ppo":
        return "TRL's vLLM rollout belongs to GRPOTrainer; its PPOTrainer generates with transformers"
    if s.algorithm == "dpo" and not s.ref:
        return "TRL's DPOTrainer reads the reference's log-probabilities; --no-ref has no DPOConfig setting"
    common = _common_refusal(s, "TRL", ("amp-bf16", "amp-fp16", "fp32"))
    if common:
        return common
    if "ref" in s.offload:
        return "TRL has no reference-offload setting (--offload ref)"
    if s.optimizer not in TRL_OPTIMIZERS:
        return f"transformers has no optimizer matching --optimizer {s.optimizer}"
    if s.lora_alpha != int(s.lora_alpha):
        return f"TRL's ModelConfig.lora_alpha is a whole number, not {s.lora_alpha:g}"
    if s.placement == "split":
        per_node = s.gpus // s.nodes
        if s.engine_gpus > per_node or (s.nodes > 1 and s.engine_gpus != per_node):
            return (
                f"`trl vllm-serve` runs on one node: with {s.nodes} nodes the rollout takes one whole node "
                f"({per_node} GPUs), not --rollout-gpus {s.engine_gpus}"
            )
    return None


def _verl_refusal(s: RLSettings) -> str | None:
    if s.algorithm == "dpo":
        return "verl's main_ppo trains on rollouts; it has no offline DPO trainer"
    if s.placement == "split":
        return (
            "verl's main_ppo runs the hybrid engine only (rollout colocated with the actor); split rollout "
            "is its fully-async recipe"
        )
    common = _common_refusal(s, "verl", ("amp-bf16",))
    if common:
        return common
    if s.peft == "qlora":
        return "verl's FSDP workers load the base model in 16 bits; --peft qlora has no verl setting"
    if s.peft == "dora":
        return "verl's LoRA settings have no DoRA switch"
    if s.peft != "none" and s.lora_dropout:
        return f"verl's LoRA settings have no dropout (--lora-dropout {s.lora_dropout:g}); pass 0"
    if s.optimizer not in ("adamw", "adam"):
        return f"verl's FSDP actor optimizer is AdamW, not --optimizer {s.optimizer}"
    if s.global_batch % s.samples:
        return (
            f"verl counts actor.ppo_mini_batch_size in prompts (× rollout.n = {s.samples}): "
            f"--train-global-batch {s.global_batch} is not a multiple of {s.samples}"
        )
    return None


def _openrlhf_refusal(s: RLSettings) -> str | None:
    if s.algorithm == "dpo":
        return "train_ppo_ray trains on rollouts; DPO is OpenRLHF's separate openrlhf.cli.train_dpo"
    common = _common_refusal(s, "OpenRLHF", ("amp-bf16", "amp-fp16"))
    if common:
        return common
    if "params" in s.offload:
        return (
            "OpenRLHF offloads the Adam states (--ds.adam_offload) and the reference (--ref.offload), "
            "not the policy's parameters (--offload params)"
        )
    if s.peft == "dora":
        return "OpenRLHF's LoRA settings have no DoRA switch"
    if s.optimizer not in ("adamw", "adam"):
        return f"OpenRLHF's DeepSpeed optimizer is Adam(W), not --optimizer {s.optimizer}"
    if s.lora_alpha != int(s.lora_alpha):
        return f"OpenRLHF's --ds.lora.alpha is a whole number, not {s.lora_alpha:g}"
    if s.placement == "split":
        if s.critic is not None or s.reward_model is not None:
            return (
                "outside --train.colocate_all OpenRLHF gives the critic and the reward model GPUs of their "
                "own; gpuplan's split placement keeps every trainer model on the trainer GPUs"
            )
        per_node = s.gpus // s.nodes
        if s.trainer_gpus > per_node and s.trainer_gpus % per_node:
            return (
                f"the actor's {s.trainer_gpus} GPUs are not whole nodes of {per_node} "
                "(--actor.num_nodes × --actor.num_gpus_per_node)"
            )
    return None


_REFUSALS: Final = {"trl": _trl_refusal, "verl": _verl_refusal, "openrlhf": _openrlhf_refusal}


# ------------------------------------------------------------------------------------------------ TRL
def _hf_name(model: str) -> str:
    """The Hub id the frameworks load: a catalog name's ``hf_id``, anything else as given."""
    from gpuplan.models.catalog import get_catalog_model, is_catalog_name

    return get_catalog_model(model).hf_id if is_catalog_name(model) else model


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))


def _lines(command: str, args: list[str]) -> str:
    return " \\\n    ".join([command, *args]) + "\n"


def trl_config(s: RLSettings) -> dict[str, Any]:
    """The YAML that ``trl.TrlParser((GRPOConfig | DPOConfig, ModelConfig))`` reads (``--config FILE``)."""
    cfg: dict[str, Any] = {"model_name_or_path": _hf_name(s.model)}
    if s.algorithm == "dpo":
        # DPOConfig counts pairs: a gpuplan DPO micro-batch of m sequences is m / 2 pairs (settings refuse odd m)
        cfg.update(per_device_train_batch_size=s.micro_batch // 2, max_length=s.sequence_len)
    else:
        colocated = s.placement == "colocate"
        cfg.update(use_vllm=True, vllm_mode="colocate" if colocated else "server")
        if colocated:
            # the server's utilization and TP are flags of `trl vllm-serve` (see _trl)
            cfg.update(
                vllm_gpu_memory_utilization=s.utilization,
                vllm_tensor_parallel_size=s.rollout_tp,
                vllm_enable_sleep_mode=True,
            )  # the engine asleep while the trainer runs, as modelled
        cfg.update(
            vllm_max_model_length=s.sequence_len,
            num_generations=s.samples,
            per_device_train_batch_size=s.micro_batch,
            generation_batch_size=s.sequences_per_step,
            num_iterations=s.ppo_epochs,
            max_completion_length=s.longest_response,
            beta=KL_COEF if s.ref else 0.0,
        )
        if s.algorithm == "dapo":
            cfg.update(loss_type="dapo", epsilon_high=DAPO_CLIP_HIGH, mask_truncated_completions=True)
    mp = _mixed(s.precision)
    cfg.update(
        gradient_accumulation_steps=s.grad_accum,
        bf16=mp == "bf16",
        fp16=mp == "fp16",
        gradient_checkpointing=s.checkpointing == "full",
        optim=TRL_OPTIMIZERS[s.optimizer],
    )
    if s.peft != "none":
        cfg.update(use_peft=True, lora_r=s.lora_rank, lora_alpha=int(s.lora_alpha), lora_dropout=s.lora_dropout)
        if s.lora_targets:  # none named: PEFT's default for the architecture, TRL's and gpuplan's alike
            # a plain string: PEFT expands only the string "all-linear", not a list holding it
            cfg["lora_target_modules"] = lora_targets(s)
        if s.peft == "qlora":
            cfg.update(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        if s.peft == "dora":
            cfg["use_dora"] = True
    return cfg


def _mixed(precision: str) -> str:
    from gpuplan.parallel.emit import mixed_precision

    return mixed_precision(precision)


def trl_accelerate_args(s: RLSettings) -> list[str]:
    """``accelerate launch`` flags for the trainer processes: FSDP2 over the trainer GPUs, DeepSpeed ZeRO-3 with
    its CPU offload when offload is asked (the layout gpuplan.rl.models sized)."""
    nodes = s.nodes - 1 if s.placement == "split" and s.nodes > 1 else s.nodes  # the server has a node
    args = [f"--num_processes {s.trainer_gpus}", f"--num_machines {nodes}", f"--mixed_precision {_mixed(s.precision)}"]
    if nodes > 1:
        args += ["--machine_rank $NODE_RANK", "--main_process_ip $MASTER_ADDR", "--main_process_port 29500"]
    offload_params, offload_optimizer = "params" in s.offload, "optimizer" in s.offload
    if offload_params or offload_optimizer:
        args += [
            "--use_deepspeed",
            "--zero_stage 3",
            "--zero3_init_flag true",
            f"--offload_param_device {'cpu' if offload_params else 'none'}",
            f"--offload_optimizer_device {'cpu' if offload_optimizer else 'none'}",
        ]
    elif s.trainer_gpus > 1:
        args += [
            "--use_fsdp",
            "--fsdp_version 2",
            "--fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP",
            "--fsdp_reshard_after_forward true",
            "--fsdp_state_dict_type SHARDED_STATE_DICT",
        ]
    return args


def trl_server_command(s: RLSettings) -> str:
    """``trl vllm-serve`` on the rollout GPUs (split placement): TP within the server, data-parallel copies."""
    devices = ",".join(str(i) for i in range(s.engine_gpus))
    return (
        f"CUDA_VISIBLE_DEVICES={devices} trl vllm-serve --model {shlex.quote(_hf_name(s.model))} "
        f"--tensor_parallel_size {s.rollout_tp} --data_parallel_size {s.engine_gpus // s.rollout_tp} "
        f"--gpu_memory_utilization {s.utilization:g} --max_model_len {s.sequence_len}"
        + (" --enforce_eager true" if s.rollout_enforce_eager else "")
    )


def _trl(s: RLSettings) -> str:
    kind = "DPO" if s.algorithm == "dpo" else "GRPO"
    script = "train_dpo.py" if s.algorithm == "dpo" else "train_grpo.py"
    lines = [
        f"# {script}: your script reading this file with trl.TrlParser(({kind}Config, ModelConfig)), as "
        f"trl/scripts/{script.removeprefix('train_')} does; add the dataset and reward functions there"
    ]
    if s.reward_model is not None:
        lines.append(f"# reward model: GRPOTrainer(reward_funcs=[{_hf_name(s.reward_model)!r}, ...])")
    lines.append(f"# --- {kind.lower()}.yaml ---")
    out = "\n".join(lines) + "\n" + _yaml(trl_config(s)) + "# --- launch ---\n"
    launch = "accelerate launch " + " ".join(trl_accelerate_args(s)) + f" {script} --config {kind.lower()}.yaml"
    if s.placement == "split":
        first = s.engine_gpus
        devices = ",".join(str(i) for i in range(first, first + s.trainer_gpus))
        if s.nodes == 1:
            launch = f"CUDA_VISIBLE_DEVICES={devices} " + launch
        return out + trl_server_command(s) + " &\n" + launch + "\n"
    return out + launch + "\n"


# ----------------------------------------------------------------------------------------------- verl
def verl_overrides(s: RLSettings) -> dict[str, Any]:
    """Hydra overrides of ``verl/trainer/config/ppo_trainer.yaml`` (key -> value)."""
    m, ckpt = s.micro_batch, s.checkpointing == "full"
    o: dict[str, Any] = {
        "algorithm.adv_estimator": "gae" if s.algorithm == "ppo" else "grpo",
        "data.train_batch_size": s.prompts_per_step,
        "data.max_prompt_length": s.prompt_len,
        "data.max_response_length": s.longest_response,
        "actor_rollout_ref.model.path": _hf_name(s.model),
        "actor_rollout_ref.model.enable_gradient_checkpointing": ckpt,
        "actor_rollout_ref.rollout.name": s.rollout_engine,
        "actor_rollout_ref.rollout.n": s.samples,
        "actor_rollout_ref.rollout.gpu_memory_utilization": s.utilization,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": s.rollout_tp,
        "actor_rollout_ref.rollout.free_cache_engine": True,  # the engine sleeps while the actor trains
        # always stated: verl then runs the engine gpuplan sized, whatever its default
        "actor_rollout_ref.rollout.enforce_eager": s.rollout_enforce_eager,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": m,
        **{
            f"actor_rollout_ref.rollout.{name}": value
            for name, value in (
                ("max_num_seqs", s.rollout_max_num_seqs),
                ("max_num_batched_tokens", s.rollout_max_num_batched_tokens),
            )
            if value is not None
        },
        # ppo_mini_batch_size counts prompts; verl multiplies it by rollout.n (refusal checks the division)
        "actor_rollout_ref.actor.ppo_mini_batch_size": s.global_batch // s.samples,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": m,
        "actor_rollout_ref.actor.ppo_epochs": s.ppo_epochs,
        "actor_rollout_ref.actor.use_kl_loss": bool(s.ref),  # what makes verl build the reference worker
        "actor_rollout_ref.actor.fsdp_config.param_offload": "params" in s.offload,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "optimizer" in s.offload,
    }
    if s.ref:
        o.update(
            {
                "actor_rollout_ref.actor.kl_loss_coef": KL_COEF,
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": m,
                "actor_rollout_ref.ref.fsdp_config.param_offload": "ref" in s.offload,
            }
        )
    if s.algorithm == "dapo":
        o.update(
            {
                "actor_rollout_ref.actor.clip_ratio_high": DAPO_CLIP_HIGH,
                "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
            }
        )
    if s.peft == "lora":
        o.update(
            {
                "actor_rollout_ref.model.lora_rank": s.lora_rank,
                "actor_rollout_ref.model.lora_alpha": s.lora_alpha,
                "actor_rollout_ref.model.target_modules": lora_targets(s),
            }
        )
    if s.critic is not None:
        o.update(
            {
                "critic.model.path": _hf_name(s.critic),
                "critic.model.enable_gradient_checkpointing": ckpt,
                "critic.ppo_micro_batch_size_per_gpu": m,
                "critic.fsdp.param_offload": "params" in s.offload,
                "critic.fsdp.optimizer_offload": "optimizer" in s.offload,
            }
        )
    if s.reward_model is not None:
        o.update(
            {
                "reward.reward_model.enable": True,
                "reward.reward_model.model_path": _hf_name(s.reward_model),
                "reward.reward_model.rollout.name": s.rollout_engine,
            }
        )
    o.update({"trainer.n_gpus_per_node": s.gpus // s.nodes, "trainer.nnodes": s.nodes})
    return o


def lora_targets(s: RLSettings) -> str | list[str]:
    """The LoRA targets as gpuplan traced them: ``all-linear``, the names given, or (none given) PEFT's default
    for the architecture spelled out, since verl's and OpenRLHF's own default is all-linear."""
    if s.lora_targets == (ALL_LINEAR,):
        return ALL_LINEAR
    if s.lora_targets:
        return list(s.lora_targets)
    from gpuplan.models.sources import resolve_model
    from gpuplan.trace.peft import default_lora_targets

    source = resolve_model(s.model)
    model_type = getattr(source, "config_dict", {}).get("model_type")
    targets = default_lora_targets(model_type)
    if targets is None:
        raise ConfigError(
            f"PEFT has no default LoRA targets for {s.model} (model_type {model_type!r}); pass "
            f"--lora-targets NAME[,NAME...] or {ALL_LINEAR}"
        )
    return targets


def _words(value: str | list[str]) -> str:
    return value if isinstance(value, str) else " ".join(value)


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _verl(s: RLSettings) -> str:
    head = "# add data.train_files=... data.val_files=... and the reward function (reward.custom_reward_function.*)\n"
    args = [shlex.quote(f"{k}={_hydra_value(v)}") for k, v in verl_overrides(s).items()]
    return head + _lines("python3 -m verl.trainer.main_ppo", args)


# ------------------------------------------------------------------------------------------- OpenRLHF
def openrlhf_args(s: RLSettings) -> list[tuple[str, Any]]:
    """``train_ppo_ray`` flags, in order; ``True`` marks a switch (store_true)."""
    per_node = s.gpus // s.nodes
    colocated = s.placement == "colocate"
    trainer_nodes = s.nodes if colocated else max(1, s.trainer_gpus // per_node)
    trainer_per_node = per_node if colocated else min(per_node, s.trainer_gpus)
    a: list[tuple[str, Any]] = [("--actor.model_name_or_path", _hf_name(s.model))]
    groups = (
        ["actor"]
        + (["ref"] if s.ref else [])
        + (["critic"] if s.critic else [])
        + (["reward"] if s.reward_model else [])
    )
    for g in groups:
        a += [(f"--{g}.num_nodes", trainer_nodes), (f"--{g}.num_gpus_per_node", trainer_per_node)]
    if colocated:
        a += [("--train.colocate_all", True), ("--vllm.enable_sleep", True)]  # engine asleep while training
    elif s.ref:
        a.append(("--train.colocate_actor_ref", True))
    a += [
        ("--vllm.num_engines", s.engine_gpus // s.rollout_tp),
        ("--vllm.tensor_parallel_size", s.rollout_tp),
        ("--vllm.gpu_memory_utilization", s.utilization),
        *([("--vllm.enforce_eager", True)] if s.rollout_enforce_eager else []),
        ("--algo.advantage.estimator", "gae" if s.algorithm == "ppo" else "group_norm"),
        ("--rollout.n_samples_per_prompt", s.samples),
        ("--rollout.batch_size", s.prompts_per_step),
        ("--rollout.micro_batch_size", s.micro_batch),
        ("--train.batch_size", s.global_batch),
        ("--train.micro_batch_size", s.micro_batch),
        ("--train.max_epochs", s.ppo_epochs),
        ("--data.max_len", s.sequence_len),
        ("--rollout.max_new_tokens", s.longest_response),
        ("--ds.zero_stage", 3),
        ("--ds.param_dtype", _mixed(s.precision)),
    ]
    if s.ref:
        a += [("--algo.kl.init_coef", KL_COEF), ("--algo.kl.use_loss", True), ("--algo.kl.estimator", "k3")]
    else:
        a.append(("--algo.kl.init_coef", 0))  # no reference actor group is made (train_ppo_ray.train)
    if s.algorithm == "dapo":
        a.append(("--actor.eps_clip_low_high", f"0.2 {DAPO_CLIP_HIGH}"))
    if s.critic is not None:
        a.append(("--critic.model_name_or_path", _hf_name(s.critic)))
    if s.reward_model is not None:
        a.append(("--reward.model_name_or_path", _hf_name(s.reward_model)))
    else:
        a.append(("--reward.remote_url", "reward_func.py"))  # a rule-based reward: a file with reward_func
    if s.checkpointing == "full":
        a.append(("--actor.gradient_checkpointing_enable", True))
    if "optimizer" in s.offload:
        a.append(("--ds.adam_offload", True))
    if "ref" in s.offload:
        a.append(("--ref.offload", True))
    if s.peft != "none":
        a += [
            ("--ds.lora.rank", s.lora_rank),
            ("--ds.lora.alpha", int(s.lora_alpha)),
            ("--ds.lora.dropout", s.lora_dropout),
            ("--ds.lora.target_modules", _words(lora_targets(s))),
        ]
        if s.peft == "qlora":
            a.append(("--ds.load_in_4bit", True))
    return a


def _openrlhf(s: RLSettings) -> str:
    head = "# add --data.prompt_dataset ... and the reward (reward_func.py, or --reward.model_name_or_path)\n"
    args = []
    for flag, value in openrlhf_args(s):
        if value is True:
            args.append(flag)
        elif isinstance(value, str) and " " in value and flag.endswith(("target_modules", "low_high")):
            args.append(f"{flag} {value}")  # nargs: several words
        else:
            args.append(f"{flag} {shlex.quote(_hydra_value(value))}")
    return head + _lines("python3 -m openrlhf.cli.train_ppo_ray", args)
