"""The serving engines are an ``Engine`` / ``LocalEngine`` protocol (serve/engines.py), not branches on their
names (issue 19 item 3: 20 branches in serve/; before this change 3 comparisons and 3 name-keyed tables were
left, now none)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuplan.errors import ConfigError
from gpuplan.serve import engines

SERVE = Path(engines.__file__).parent
NAMES = frozenset(engines.ENGINES)


def _names(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names(e) for e in node.elts)


def test_no_module_of_serve_branches_on_an_engines_name() -> None:
    found = []
    for path in sorted(SERVE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and (_names(node.left) or any(_names(c) for c in node.comparators)):
                found.append((path.name, node.lineno, "comparison"))
            if isinstance(node, ast.Dict) and any(k is not None and _names(k) for k in node.keys):
                found.append((path.name, node.lineno, "table keyed by engine name"))
    assert found == []


@pytest.mark.parametrize("name", engines.PAGED_ENGINES)
def test_every_paged_engine_states_its_graphs_switch_and_features(name: str) -> None:
    engine = engines.get_engine(name)
    assert engines.eager_flag(name) == engine.eager_flag
    assert engine.features <= {"lora", "draft", "mtp"}
    for feature in ("lora", "draft", "mtp"):
        if feature in engine.features:
            engines.check_feature(name, feature, "--flag")
        else:
            with pytest.raises(ConfigError, match=f"--flag is modelled for --engine .* only, not {name}"):
                engines.check_feature(name, feature, "--flag")
    assert engines.refusal("vllm", "draft") == engines.VLLM_DRAFT_REFUSAL and engines.refusal("sglang", "mtp") is None


@pytest.mark.parametrize("name", engines.LOCAL_ENGINES)
def test_every_local_engine_states_its_output_buffer_and_launch_note(name: str) -> None:
    engine = engines.get_local_engine(name)
    assert engine.launch_note and isinstance(engine.outputs_embeddings, bool)
    # Ollama's runner asks for embeddings (ollama #8310: 0.50 MiB, not 0.49, for a 128,256-token vocabulary)
    assert engine.outputs_embeddings == (name == "ollama")
