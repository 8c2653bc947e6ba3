"""The public interface stays put: ``gpuplan.__all__`` and every verb's flags and choices.

DESIGN.md: "These verbs and flags are the public interface; scripts depend on them, so keep them
stable and add rather than rename." The expectation is checked in (``tests/public_api.json``). Adding a
name, flag or choice passes; removing or renaming one fails and says what changed. After an intended
addition, record it with ``.venv/bin/python -m tests.test_public_api --write``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import gpuplan
from gpuplan.cli.main import VERBS, build_parser

EXPECTED = Path(__file__).with_name("public_api.json")


def _parser_surface(parser: argparse.ArgumentParser, prefix: str, out: dict[str, Any]) -> None:
    """Option strings and choice lists of ``parser``, recursing into sub-commands (``gpus show``)."""
    options: list[str] = []
    choices: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _parser_surface(sub, f"{prefix} {name}", out)
            continue
        options += action.option_strings
        if action.choices is not None:
            key = action.option_strings[-1] if action.option_strings else action.dest
            choices[key] = sorted(str(c) for c in action.choices)
    out[prefix] = {"options": sorted(options), "choices": choices}


def workload_values() -> dict[str, list[str]]:
    """The values each workload flag advertises (validated in gpuplan.workload, not by argparse)."""
    from gpuplan import workload as w

    flags = {"--mode": w.MODES, "--precision": w.PRECISIONS, "--optimizer": w.OPTIMIZERS,
             "--checkpointing": w.CHECKPOINTING, "--attention": w.ATTENTIONS, "--optimizer-impl": w.OPTIMIZER_IMPLS,
             "--zero-grad": w.ZERO_GRADS, "--loss": w.LOSSES, "--offload": w.PIPELINE_OFFLOADS}
    return {flag: sorted(values) for flag, values in flags.items()}


def current_surface() -> dict[str, Any]:
    verbs: dict[str, Any] = {}
    top = build_parser()
    _parser_surface_top = {a for action in top._actions for a in action.option_strings}
    for verb in VERBS:
        parser = build_parser(verb)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        _parser_surface(sub.choices[verb], verb, verbs)
    return {
        "__all__": sorted(gpuplan.__all__),
        "verbs": sorted(VERBS),
        "top_level_options": sorted(_parser_surface_top),
        "commands": verbs,
        "workload_values": workload_values(),
    }


def _missing(expected: dict[str, Any], current: dict[str, Any]) -> list[str]:
    lost = [f"gpuplan.__all__ lost {name!r}" for name in expected["__all__"] if name not in current["__all__"]]
    lost += [f"verb {verb!r} is gone" for verb in expected["verbs"] if verb not in current["verbs"]]
    lost += [f"gpuplan lost the option {opt}" for opt in expected["top_level_options"]
             if opt not in current["top_level_options"]]
    for flag, values in expected["workload_values"].items():
        lost += [f"workload flag {flag}: value {value!r} is gone" for value in values
                 if value not in current["workload_values"].get(flag, [])]
    for command, surface in expected["commands"].items():
        now = current["commands"].get(command)
        if now is None:
            lost.append(f"command 'gpuplan {command}' is gone")
            continue
        lost += [f"gpuplan {command}: option {opt} is gone" for opt in surface["options"]
                 if opt not in now["options"]]
        for key, values in surface["choices"].items():
            kept = now["choices"].get(key)
            if kept is None:
                lost.append(f"gpuplan {command} {key}: no longer has a fixed list of choices {values}")
                continue
            lost += [f"gpuplan {command} {key}: choice {value!r} is gone" for value in values if value not in kept]
    return lost


def test_public_names_and_cli_flags_are_never_removed_or_renamed() -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    lost = _missing(expected, current_surface())
    assert not lost, (
        "the public interface lost names (DESIGN.md: add, never rename). Put them back (an alias is fine); "
        "if the removal is really intended, update tests/public_api.json:\n  " + "\n  ".join(lost)
    )


def test_the_checker_notices_a_renamed_flag_and_a_dropped_choice() -> None:
    current = current_surface()
    renamed = json.loads(json.dumps(current))
    renamed["commands"]["estimate"]["options"].append("--batch")
    renamed["commands"]["estimate"]["choices"]["--mode"].append("pretrain")
    assert _missing(renamed, current) == ["gpuplan estimate: option --batch is gone",
                                          "gpuplan estimate --mode: choice 'pretrain' is gone"]
    assert _missing(current, current) == []


def test_public_names_resolve() -> None:
    for name in gpuplan.__all__:
        assert hasattr(gpuplan, name), name
    assert list(gpuplan.__all__) == sorted(gpuplan.__all__)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    EXPECTED.write_text(json.dumps(current_surface(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
