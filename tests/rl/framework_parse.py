"""Parse ``gpuplan rl --emit`` outputs with the frameworks' own loaders (run by the frameworks' Python, the
``.venv-rlcfg`` of tests/rl/test_emit.py, not gpuplan's).

Usage: ``python framework_parse.py '[{"trl": TEXT, "verl": TEXT, "openrlhf": TEXT}, ...]'`` (any subset per
case); prints a JSON list with, per case and framework, the values the framework's loader resolved, or
{"error": its message}.

- TRL: the YAML through ``trl.TrlParser((GRPOConfig | DPOConfig, ModelConfig)).parse_args_and_config``; the
  ``accelerate launch`` line through accelerate's ``launch_command_parser``; ``trl vllm-serve`` through
  ``trl.scripts.vllm_serve.make_parser``.
- verl: the overrides composed onto ``verl/trainer/config/ppo_trainer.yaml`` by Hydra (struct mode: an unknown
  key is an error), then ``verl.utils.config.validate_config`` as ``verl.trainer.main_ppo`` calls it.
- OpenRLHF: the main block of ``openrlhf/cli/train_ppo_ray.py`` (its argparse parser and its argument checks)
  with ``train`` replaced by a function that records the arguments.

Kept free of gpuplan imports: the frameworks' environment does not have gpuplan installed.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import shlex
import sys
import tempfile
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def commands(text: str) -> list[list[str]]:
    """The commands of an emitted text: comments dropped, continuations joined, VAR=value prefixes and a
    trailing ``&`` removed."""
    joined = "\n".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\\n", " ")
    out = []
    for line in filter(str.strip, joined.splitlines()):
        argv = shlex.split(line)
        while argv and "=" in argv[0] and argv[0].split("=")[0].isupper():
            argv = argv[1:]
        out.append(argv[:-1] if argv[-1] == "&" else argv)
    return out


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def trl(text: str) -> dict[str, Any]:
    import transformers.training_args as training_args
    from accelerate.commands.launch import launch_command_parser
    from trl import DPOConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.vllm_serve import make_parser

    # bf16=True is checked against the GPU present; this machine has none. The GPU check is the one thing a
    # CPU host cannot pass (every other check runs).
    training_args.is_torch_bf16_gpu_available = lambda: True  # type: ignore[attr-defined]
    head, _, launch = text.partition("# --- launch ---\n")
    kind = "dpo" if "# --- dpo.yaml ---" in head else "grpo"
    config_cls = DPOConfig if kind == "dpo" else GRPOConfig
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{kind}.yaml"
        path.write_text(head.split(f"# --- {kind}.yaml ---\n", 1)[1])
        train_args, model_args = TrlParser((config_cls, ModelConfig)).parse_args_and_config(
            ["--config", str(path), "--output_dir", tmp]
        )
    out: dict[str, Any] = {"config": _plain(vars(train_args)), "model": _plain(vars(model_args))}
    for argv in commands(launch):
        if argv[:2] == ["trl", "vllm-serve"]:
            (server,) = make_parser().parse_args_and_config(argv[2:])
            out["server"] = _plain(vars(server))
        elif argv[:2] == ["accelerate", "launch"]:
            out["accelerate"] = _plain(vars(launch_command_parser().parse_args(argv[2:])))
    return out


def verl(text: str) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    (argv,) = commands(text)
    if argv[:3] != ["python3", "-m", "verl.trainer.main_ppo"]:
        return {"error": f"not a verl.trainer.main_ppo command: {argv[:3]}"}
    config_dir = _package_dir("verl") / "trainer" / "config"
    overrides = argv[3:]
    with tempfile.TemporaryDirectory() as stand_in:
        # validate_config builds the critic's HFModelConfig, which loads its config and tokenizer: offline
        # here, the critic's path is swapped for a local stand-in (a config.json and a one-word tokenizer)
        _stand_in_model(Path(stand_in))
        swapped = [f"critic.model.path={stand_in}" if a.startswith("critic.model.path=") else a for a in overrides]
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            config = compose("ppo_trainer", overrides=swapped)
        return {
            **_validate_verl(config, overrides),
            "swapped": [a.split("=", 1)[0] for a in overrides if a.startswith("critic.model.path=")],
        }


def _stand_in_model(folder: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=2,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(folder)
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[UNK]").save_pretrained(folder)


def _validate_verl(config: Any, overrides: list[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    lora_ranks: list[int] = []
    if importlib.util.find_spec("vllm") is None:
        # validate_config asks vLLM which LoRA ranks it serves; without vLLM here that one check is recorded
        # (the rank it would ask about) instead of run
        stub = types.ModuleType("verl.workers.rollout.vllm_rollout.utils")
        stub.get_vllm_max_lora_rank = lora_ranks.append  # type: ignore[attr-defined]
        sys.modules[stub.__name__] = stub
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    resolved = OmegaConf.to_container(config, resolve=False)
    return {
        "overrides": {a.split("=", 1)[0]: _select(resolved, a.split("=", 1)[0]) for a in overrides},
        "use_reference_policy": bool(need_reference_policy(config)),
        "use_critic": bool(need_critic(config)),
        "lora_rank_not_checked_without_vllm": lora_ranks,
    }


def _select(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree[part]
    return _plain(tree)


def openrlhf(text: str) -> dict[str, Any]:
    import argparse
    import datetime
    import os

    (argv,) = commands(text)
    if argv[:3] != ["python3", "-m", "openrlhf.cli.train_ppo_ray"]:
        return {"error": f"not an openrlhf.cli.train_ppo_ray command: {argv[:3]}"}
    root = _package_dir("openrlhf")
    tree = ast.parse((root / "cli" / "train_ppo_ray.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    spec = importlib.util.spec_from_file_location("openrlhf.utils.config", root / "utils" / "config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["openrlhf.utils.config"] = module  # hierarchize alone, without openrlhf.utils' heavy imports
    seen: list[SimpleNamespace] = []
    code = compile(ast.Module(body=block.body, type_ignores=[]), "train_ppo_ray.main", "exec")
    old_argv = sys.argv
    sys.argv = ["train_ppo_ray.py", *argv[3:]]
    try:
        exec(code, {"argparse": argparse, "os": os, "datetime": datetime.datetime, "train": seen.append})
    finally:
        sys.argv = old_argv
    (args,) = seen
    return {"args": _plain(args)}


def _plain(value: Any) -> Any:
    if isinstance(value, SimpleNamespace):
        return {k: _plain(v) for k, v in vars(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def main() -> int:
    cases = json.loads(sys.argv[1])
    out: list[dict[str, Any]] = []
    for texts in cases:
        parsed: dict[str, Any] = {}
        for name, text in texts.items():
            try:
                with contextlib.redirect_stdout(sys.stderr):  # the loaders print (verl's validate_config does)
                    parsed[name] = {"trl": trl, "verl": verl, "openrlhf": openrlhf}[name](text)
            except (SystemExit, Exception) as exc:  # the loader's refusal is the answer
                parsed[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out.append(parsed)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
