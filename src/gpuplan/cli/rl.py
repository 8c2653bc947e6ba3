"""``gpuplan rl MODEL --gpus N --gpu GPU --algorithm grpo|ppo|dapo|dpo --prompts-per-step P --samples-per-prompt K
--prompt-len L --response-len R [--max-response-len] [--train-global-batch G] [--train-micro-batch m]
[--peft lora|qlora ...] [--no-ref] [--critic MODEL] [--reward-model MODEL] [--placement colocate|split
--rollout-gpus K] [--rollout-engine vllm|sglang] [--rollout-tp T] [--rollout-memory-utilization U]
[--rollout-enforce-eager]
[--framework verl|trl|openrlhf]
[--offload params,optimizer,ref] [--checkpointing C] [--precision P] [--emit trl|verl|openrlhf] [--json]``.

Exit 0 when every phase of the step fits, 1 when one does not (or the rollout engine would not start),
2 on a usage error."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuplan.cli._workload import add_cache_argument, add_json_argument, add_model_argument, add_options
from gpuplan.report.verb_options import emit_options, rl_settings_fields, verb_options

if TYPE_CHECKING:
    from gpuplan.rl.result import RLResult
    from gpuplan.rl.settings import RLSettings

def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_options(parser, verb_options("rl"))  # described once (report/options.py): the web page's rl too
    add_options(parser, emit_options("rl"))
    add_json_argument(parser)
    add_cache_argument(parser)


def settings_from_args(args: argparse.Namespace) -> RLSettings:
    """The RLSettings the flags describe (every bad value one ConfigError line)."""
    from gpuplan.errors import ConfigError
    from gpuplan.rl.settings import RLSettings

    fields = rl_settings_fields(args.model, vars(args), spell=lambda n: "--" + n.replace("_", "-"))
    emit = getattr(args, "emit", None)
    if emit and fields.get("framework", emit) != emit:
        raise ConfigError(
            f"--framework {fields['framework']} conflicts with --emit {emit}: the log-probs are sized the way the "
            f"emitted framework computes them; drop --framework or pass --framework {emit}"
        )
    if emit:
        fields["framework"] = emit  # the emitted framework's log-prob pass
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
