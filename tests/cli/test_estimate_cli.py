"""``gpuplan estimate`` on the command line: the JSON contract and one-line errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures"
TINY = FIXTURES / "tiny_models.py"


def gpuplan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplan.cli.main", *args], capture_output=True, text=True,
                          timeout=300)


def _one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_json_contract_fields(tmp_path: Path) -> None:
    result = gpuplan("estimate", f"{TINY}:mlp,mlp_inputs", "--batch-size", "4", "--gpu", "RTX-4090", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    for key in ("params_count", "peak_allocated_bytes", "peak_reserved_bytes", "total_required_bytes",
                "components", "peak_phase", "flops_per_step", "fits", "headroom_bytes", "step_time_s", "throughput"):
        assert key in data, key
    assert set(data["components"]) == {"parameters", "gradients", "optimizer_state", "activations", "temporaries",
                                       "kv_cache", "cuda_context", "workspaces", "allocator_overhead"}
    assert sum(data["components"].values()) == data["total_required_bytes"]
    assert data["peak_reserved_bytes"] >= data["peak_allocated_bytes"] > 0
    assert data["fits"] is True


def test_text_table_names_components_and_gpu() -> None:
    result = gpuplan("estimate", f"{TINY}:small_cnn", "--batch-size", "2", "--image-size", "32", "--gpu", "T4")
    assert result.returncode == 0, result.stderr
    for needle in ("parameters", "activations", "CUDA context", "total required", "T4"):
        assert needle in result.stdout


@pytest.mark.parametrize(("args", "needles"), [
    (["estimate", "gtp2"], ["unknown model 'gtp2'", "gpt2"]),
    (["estimate", "does/not/exist/config.json"], ["does not exist"]),
    (["estimate", f"{TINY}:broken"], ["broken()", "weights file missing"]),
    (["estimate", f"{TINY}:no_such_factory"], ["no callable 'no_such_factory'"]),
    (["estimate", f"{TINY}:data_dependent,data_dependent_inputs"], ["forward of", "failed under fake tensors",
                                                                    "_DataDependent", "_local_scalar_dense",
                                                                    "reads tensor values"]),
    (["estimate", "gpt2", "--batch-size", "0"], ["batch size 0 is out of range"]),
    (["estimate", "gpt2", "--seq-len", "1000000000000"], ["sequence length 1000000000000 is out of range"]),
    (["estimate", "gpt2", "--seq-len", "-5"], ["sequence length -5 is out of range"]),
    (["estimate", "gpt2", "--precision", "fp12"], ["unknown precision 'fp12'", "allowed"]),
    (["estimate", "gpt2", "--optimizer", "adamx"], ["unknown optimizer 'adamx'", "adamw"]),
    (["estimate", "gpt2", "--gpu", "H100-SMX"], ["H100-SXM"]),
    (["estimate", "gpt2", "--grad-accum", "4", "--mode", "infer"], ["--grad-accum 4 applies to --mode train"]),
])
def test_bad_input_is_one_line_exit_2(args: list[str], needles: list[str]) -> None:
    _one_line_error(gpuplan(*args), *needles)


def test_malformed_config_json(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    _one_line_error(gpuplan("estimate", str(bad)), "not valid JSON")
    bad.write_text(json.dumps({"hidden_size": 8}))
    _one_line_error(gpuplan("estimate", str(tmp_path)), "no 'model_type'")


def test_generate_needs_a_causal_lm() -> None:
    _one_line_error(gpuplan("estimate", "resnet18", "--mode", "generate"),
                    "--mode generate needs a causal language model")
