"""benchmarks/gpu_accuracy.py: without a GPU it exits 0; its workload list covers what the issue
asks; its table computes errors and medians from `gpuplan measure --json` results."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_accuracy", ROOT / "benchmarks" / "gpu_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_accuracy"] = module
    spec.loader.exec_module(module)
    return module


def test_without_gpu_says_so_and_exits_0(suite, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
                                         ) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert suite.main([]) == 0
    assert "no CUDA GPU here" in capsys.readouterr().out


def test_workloads_cover_the_issue(suite) -> None:  # type: ignore[no-untyped-def]
    cases = suite.gpu_cases("/x/llama/config.json")
    assert len(cases) >= 12
    models = {c.model for c in cases}
    assert {"resnet50", "vit_b_16", "bert-base-uncased", "gpt2", "/x/llama/config.json"} <= models
    flags = [" ".join(c.flags) for c in cases]
    for needle in ("--mode train", "--mode generate", "--precision amp-bf16", "--precision bf16",
                   "--checkpointing full"):
        assert any(needle in f for f in flags), needle
    assert any("--precision" not in f or "--precision fp32" in f for f in flags)  # fp32
    batches = {c.model: set() for c in cases}
    for c in cases:
        batches[c.model].add(c.flags[c.flags.index("--batch-size") + 1])
    assert any(len(b) >= 2 for b in batches.values())  # two batch sizes of one model


def test_llama_config_is_sized_to_the_gpu(suite) -> None:  # type: ignore[no-untyped-def]
    big = suite.llama_config(141 * 2**30)
    small = suite.llama_config(24 * 2**30)
    assert big["num_hidden_layers"] == 15 and small["num_hidden_layers"] == 2
    assert big["model_type"] == "llama" and big["num_key_value_heads"] < big["num_attention_heads"]


def test_table_errors_and_medians(suite) -> None:  # type: ignore[no-untyped-def]
    def row(name: str, est: float, meas: float) -> object:
        r = suite.Row(suite._case(name, "m", "--batch-size 1"), status="ok")
        r.result = {"comparison": [{"quantity": "peak reserved", "unit": "bytes", "estimated": est,
                                    "measured": meas, "error": (est - meas) / meas}]}
        return r

    failed = suite.Row(suite._case("broken", "m", "--batch-size 1"), status="exit 1: CUDA out of memory")
    text, summary = suite.table([row("a", 110, 100), row("b", 95, 100), row("c", 100, 100), failed],
                                (("peak reserved", "peak reserved"),))
    assert summary["peak reserved"]["rows"] == 3
    assert summary["peak reserved"]["median_abs_error"] == pytest.approx(0.05)
    assert summary["peak reserved"]["worst_abs_error"] == pytest.approx(0.10)
    assert "| broken | n/a | n/a | n/a | exit 1: CUDA out of memory |" in text
    assert "+10.0%" in text and "-5.0%" in text
