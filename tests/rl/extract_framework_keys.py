"""Write tests/rl/data/framework_keys.json: every setting name the RL frameworks accept, read from their
installed source, so that tests/rl/test_emit.py checks the emitted configurations without the frameworks.

    .venv-rlcfg/bin/python tests/rl/extract_framework_keys.py     (the environment of test_emit.py's module doc)

- TRL: the dataclass fields of GRPOConfig, DPOConfig, ModelConfig and trl/scripts/vllm_serve.py's
  ScriptArguments.
- verl: every leaf of verl/trainer/config/_generated_ppo_trainer.yaml (the composed ppo_trainer config verl
  generates and ships) with its default.
- OpenRLHF: every flag of openrlhf/cli/train_ppo_ray.py's parser, whether it is a switch, and its nargs.
Each list records the package version and the sha256 of the file it was read from.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).parent / "data" / "framework_keys.json"


def _root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _source(package: str, *files: Path) -> str:
    root = _root(package).parent
    digests = ", ".join(
        f"{f.relative_to(root)} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()[:16]}" for f in files
    )
    return f"{package} {importlib.metadata.version(package)} (PyPI): {digests}"


def trl() -> dict[str, Any]:
    from trl import DPOConfig, GRPOConfig, ModelConfig
    from trl.scripts.vllm_serve import ScriptArguments

    root = _root("trl")
    files = [
        root / "trainer" / "grpo_config.py",
        root / "trainer" / "dpo_config.py",
        root / "trainer" / "model_config.py",
        root / "scripts" / "vllm_serve.py",
    ]
    return {
        "source": _source("trl", *files),
        **{
            cls.__name__: sorted(f.name for f in dataclasses.fields(cls))
            for cls in (GRPOConfig, DPOConfig, ModelConfig)
        },
        "vllm_serve": sorted(f.name for f in dataclasses.fields(ScriptArguments)),
    }


def verl() -> dict[str, Any]:
    path = _root("verl") / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    leaves: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            leaves[prefix] = node

    walk(yaml.safe_load(path.read_text()), "")
    return {"source": _source("verl", path), "keys": leaves}


def openrlhf() -> dict[str, Any]:
    path = _root("openrlhf") / "cli" / "train_ppo_ray.py"
    flags: dict[str, dict[str, Any]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names:
            continue  # the f-string flags of the optimizer groups (--actor.adam.lr ...): never emitted
        kw = {k.arg: k.value for k in node.keywords}
        action = kw.get("action")
        switch = isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")
        nargs = kw.get("nargs")
        flags[names[0]] = {"switch": switch, "nargs": nargs.value if isinstance(nargs, ast.Constant) else None}
    return {"source": _source("openrlhf", path), "flags": dict(sorted(flags.items()))}


def main() -> None:
    OUT.parent.mkdir(exist_ok=True)
    data = {"trl": trl(), "verl": verl(), "openrlhf": openrlhf()}
    OUT.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
