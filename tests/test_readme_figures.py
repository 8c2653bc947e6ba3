"""The README's sample outputs are produced by scripts/readme_figures.py, so they cannot go stale (issue 18)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
assert _spec is not None and _spec.loader is not None
readme_figures = importlib.util.module_from_spec(_spec)
sys.modules["readme_figures"] = readme_figures
_spec.loader.exec_module(readme_figures)

TINY = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
        "vocab_size": 300, "n_positions": 128}


def test_readme_has_figures_that_run_gpuplan() -> None:
    figs = readme_figures.figures((ROOT / "README.md").read_text(encoding="utf-8"))
    assert figs, "the README's sample output must be a generated figure"
    assert all(f.argv and f.argv[0] in ("estimate", "fit", "plan", "recommend", "serve") for f in figs)


def test_regenerate_runs_the_command_and_check_finds_a_stale_figure(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny model's estimate as a figure: written by running it, then current, then stale once edited."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    monkeypatch.setattr(readme_figures, "ROOT", tmp_path)
    text = ("intro\n<!-- readme-figure lines=3 -->\n```text\n$ gpuplan estimate config.json --gpu T4 --seq-len 16\n"
            "old figure\n```\nafter\n")
    calls: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> str:
        calls.append(argv)
        return readme_figures.run_cli(argv)

    new = readme_figures.regenerate(text, run)
    assert calls == [("estimate", "config.json", "--gpu", "T4", "--seq-len", "16")]
    body = new.split("```text\n")[1].split("```")[0].splitlines()
    assert body[0] == "$ gpuplan estimate config.json --gpu T4 --seq-len 16"
    assert body[1].startswith("config.json — train, batch 1, seq 16, amp-fp16") and body[-1] == "..." and len(body) == 5
    assert new.startswith("intro\n") and new.endswith("```\nafter\n")
    assert readme_figures.stale(new, run) == []
    edited = new.replace(body[2], body[2] + " 198.0 ms")
    assert len(readme_figures.stale(edited, run)) == 1


@pytest.mark.slow
def test_readme_figures_match_the_current_output() -> None:
    """The README's own figures (gpt2 on an RTX 4090: one trace, cached after the first run)."""
    diffs = readme_figures.stale((ROOT / "README.md").read_text(encoding="utf-8"))
    assert diffs == [], "README figures are stale; run python scripts/readme_figures.py\n" + "\n".join(diffs)
