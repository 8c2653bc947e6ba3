"""``gpuplan rl MODEL --gpus N --gpu GPU --algorithm grpo|ppo|dapo|dpo --prompts-per-step P --samples-per-prompt K
--prompt-len L --response-len R [--max-response-len] [--train-global-batch G] [--train-micro-batch m]
[--peft lora|qlora ...] [--no-ref] [--critic MODEL] [--reward-model MODEL] [--placement colocate|split
--rollout-gpus K] [--rollout-engine vllm|sglang] [--rollout-tp T] [--rollout-memory-utilization U]
[--rollout-enforce-eager]
[--offload params,optimizer,ref] [--checkpointing C] [--precision P] [--emit trl|verl|openrlhf] [--json]``.

Exit 0 when every phase of the step fits, 1 when one does not (or the rollout engine would not start),
2 on a usage error."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuplan.cli._workload import (
    _int,
    _names,
    _peft_fields,
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_peft_arguments,
)
from gpuplan.rl.settings import ALGORITHMS, PLACEMENTS, ROLLOUT_ENGINES
from gpuplan.workload import CHECKPOINTING, OPTIMIZERS, PRECISIONS

if TYPE_CHECKING:
    from gpuplan.rl.result import RLResult
    from gpuplan.rl.settings import RLSettings

EMIT_FRAMEWORKS: tuple[str, ...] = ("trl", "verl", "openrlhf")


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--gpus", type=_int, required=True, metavar="N", help="total GPUs")
    parser.add_argument("--nodes", type=_int, default=1, metavar="M", help="nodes the GPUs are on (default 1)")
    parser.add_argument("--gpu", required=True, metavar="GPU", help="catalog GPU (gpuplan gpus lists them)")
    parser.add_argument("--algorithm", default="grpo", choices=ALGORITHMS, help="default grpo")
    b = parser.add_argument_group("the batch (sequences = prompt + response)")
    b.add_argument(
        "--prompts-per-step",
        type=_int,
        required=True,
        metavar="P",
        help="prompts rolled out per step (DPO: preference pairs)",
    )
    b.add_argument(
        "--samples-per-prompt",
        type=_int,
        default=None,
        metavar="K",
        help="responses per prompt (default: GRPO 8, DAPO 16, PPO 1; DPO is a pair)",
    )
    b.add_argument("--prompt-len", type=_int, required=True, metavar="L", help="mean prompt tokens")
    b.add_argument("--response-len", type=_int, required=True, metavar="R", help="mean response tokens")
    b.add_argument(
        "--max-response-len",
        type=_int,
        default=None,
        metavar="R",
        help="longest response (default --response-len): the engine's and the trainer's length",
    )
    b.add_argument(
        "--train-global-batch",
        type=_int,
        default=None,
        metavar="G",
        help="sequences per optimizer step over all trainer GPUs (default: the whole rollout batch)",
    )
    b.add_argument(
        "--train-micro-batch",
        type=_int,
        default=None,
        metavar="m",
        help="sequences per forward/backward on one GPU (default 1; DPO 2)",
    )
    b.add_argument("--ppo-epochs", type=_int, default=1, metavar="E", help="passes over the batch per step")
    m = parser.add_argument_group("the models")
    add_peft_arguments(m)
    m.add_argument(
        "--no-ref",
        dest="ref",
        action="store_false",
        default=None,
        help="no frozen reference model (default: on for GRPO, PPO, DPO; off for DAPO)",
    )
    m.add_argument("--critic", default=None, metavar="MODEL", help="PPO's value model (default: the policy's)")
    m.add_argument(
        "--reward-model", default=None, metavar="MODEL", help="a model-based reward (default: none, rule-based rewards)"
    )
    p = parser.add_argument_group("placement and the rollout engine")
    p.add_argument(
        "--placement",
        default="colocate",
        choices=PLACEMENTS,
        help="colocate: the engine sleeps while the trainer runs; split: --rollout-gpus of their own",
    )
    p.add_argument("--rollout-gpus", type=_int, default=None, metavar="K", help="the engine's GPUs (split)")
    p.add_argument("--rollout-engine", default="vllm", choices=ROLLOUT_ENGINES, help="default vllm")
    p.add_argument("--rollout-tp", type=_int, default=1, metavar="T", help="the engine's tensor parallelism")
    p.add_argument(
        "--rollout-memory-utilization",
        type=float,
        default=None,
        metavar="U",
        help="vLLM gpu_memory_utilization / SGLang mem_fraction_static (default 0.5 colocated, 0.9 split)",
    )
    p.add_argument(
        "--rollout-max-num-seqs",
        type=_int,
        default=None,
        metavar="S",
        help="sequences one engine step holds (vLLM max_num_seqs; default: the engine's)",
    )
    p.add_argument(
        "--rollout-max-num-batched-tokens",
        type=_int,
        default=None,
        metavar="T",
        help="tokens one engine step processes (default: the engine's offline LLM class default)",
    )
    p.add_argument(
        "--rollout-enforce-eager",
        action="store_true",
        help="no CUDA graphs in the engine (verl rollout.enforce_eager, vLLM --enforce-eager, SGLang "
        "--disable-cuda-graph): no graph pool, eager decode steps",
    )
    t = parser.add_argument_group("trainer")
    t.add_argument(
        "--offload",
        type=_names,
        default=None,
        metavar="WHAT",
        help="params,optimizer,ref: held on the host between uses (FSDP / ZeRO-3 CPU offload)",
    )
    t.add_argument(
        "--checkpointing",
        default=None,
        metavar="C",
        help="|".join(CHECKPOINTING) + " (default full, as the RL frameworks' examples run)",
    )
    t.add_argument(
        "--precision",
        default=None,
        metavar="P",
        help="|".join(PRECISIONS) + " (default: amp-bf16 where the GPU has bf16, else amp-fp16)",
    )
    t.add_argument("--optimizer", default=None, metavar="O", help="|".join(OPTIMIZERS) + " (default adamw)")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="also the longest response that fits and, when the step does not fit, the cheapest change that does "
        "(LoRA, offload, a smaller rollout share, split placement)",
    )
    parser.add_argument(
        "--emit", default=None, choices=EMIT_FRAMEWORKS, help="print the framework's configuration for this step"
    )
    add_json_argument(parser)
    add_cache_argument(parser)


def settings_from_args(args: argparse.Namespace) -> RLSettings:
    """The RLSettings the flags describe (every bad value one ConfigError line)."""
    from gpuplan.hardware.support import default_precision_on
    from gpuplan.rl.settings import RLSettings

    fields: dict[str, Any] = {
        "model": args.model,
        "gpu": args.gpu,
        "gpus": args.gpus,
        "nodes": args.nodes,
        "algorithm": args.algorithm,
        "prompts_per_step": args.prompts_per_step,
        "samples_per_prompt": args.samples_per_prompt,
        "prompt_len": args.prompt_len,
        "response_len": args.response_len,
        "max_response_len": args.max_response_len,
        "train_global_batch": args.train_global_batch,
        "train_micro_batch": args.train_micro_batch,
        "ppo_epochs": args.ppo_epochs,
        "ref": args.ref,
        "critic": args.critic,
        "reward_model": args.reward_model,
        "placement": args.placement,
        "rollout_gpus": args.rollout_gpus,
        "rollout_engine": args.rollout_engine,
        "rollout_tp": args.rollout_tp,
        "rollout_memory_utilization": args.rollout_memory_utilization,
        "rollout_max_num_seqs": args.rollout_max_num_seqs,
        "rollout_max_num_batched_tokens": args.rollout_max_num_batched_tokens,
        "rollout_enforce_eager": args.rollout_enforce_eager,
        "offload": frozenset(args.offload or ()),
        "precision": args.precision or default_precision_on("train", args.gpu),
        **_peft_fields(args),
    }
    for name in ("checkpointing", "optimizer"):  # given ones only: RLSettings holds the defaults
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return RLSettings(**fields)


def with_emitted(result: RLResult, framework: str) -> RLResult:
    """``result`` with the framework's configuration in ``command`` (gpuplan.rl.emit)."""
    from gpuplan.rl.emit import emit_config

    return replace(result, command=emit_config(result.settings, result, framework))


def run(args: argparse.Namespace) -> int:
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.rl import rl

    settings = settings_from_args(args)
    if args.emit:
        from gpuplan.errors import ConfigError
        from gpuplan.rl.emit import refusal

        refused = refusal(settings, args.emit)
        if refused is not None:
            raise ConfigError(refused)  # exit 2 before the step is sized
    progress = Progress(f"rl: sizing {args.model}", enabled=wanted(args.json))
    with progress:
        result = rl(settings, progress=progress)
        fitted = _fit(settings, result, progress) if args.fit else None
    if args.emit:
        result = with_emitted(result, args.emit)
    data = result.to_dict()
    if fitted is not None:
        data["fit"] = fitted
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(result)
        if fitted is not None:
            from gpuplan.report.rl import render_fit

            print(render_fit(fitted))
    return 0 if result.fits else 1


def _fit(settings: RLSettings, result: RLResult, progress: Any) -> dict[str, Any]:
    from gpuplan.report.rl import fit_to_dict
    from gpuplan.rl import rl
    from gpuplan.rl.fit import RESPONSE_STEP, ladder, largest_response_len

    progress("rl --fit: the longest response that fits")
    longest = largest_response_len(settings, rl)
    rungs = () if result.fits else ladder(settings, rl)
    return fit_to_dict(rungs, longest, RESPONSE_STEP)
