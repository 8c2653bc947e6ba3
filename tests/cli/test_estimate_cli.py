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


@pytest.mark.slow
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


@pytest.mark.slow
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
    (["estimate", "gpt2", "--seq-len", "1000000000000"], ["sequence length 1,000,000,000,000 is out of range"]),
    (["estimate", "gpt2", "--seq-len", "-5"], ["sequence length -5 is out of range"]),
    (["estimate", "gpt2", "--precision", "fp12"], ["unknown precision 'fp12'", "allowed"]),
    (["estimate", "gpt2", "--optimizer", "adamx"], ["unknown optimizer 'adamx'", "adamw"]),
    (["estimate", "gpt2", "--gpu", "H100-SMX"], ["H100-SXM"]),
    (["estimate", "gpt2", "--grad-accum", "4", "--mode", "infer"], ["--grad-accum 4 applies to --mode train"]),
])
@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(args: list[str], needles: list[str]) -> None:
    _one_line_error(gpuplan(*args), *needles)


def test_malformed_config_json(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    _one_line_error(gpuplan("estimate", str(bad)), "not valid JSON")
    bad.write_text(json.dumps({"hidden_size": 8}))
    _one_line_error(gpuplan("estimate", str(tmp_path)), "no 'model_type'")


@pytest.mark.slow
def test_generate_needs_a_causal_lm() -> None:
    _one_line_error(gpuplan("estimate", "resnet18", "--mode", "generate"),
                    "--mode generate needs a causal language model")




@pytest.mark.slow
def test_the_verdict_line_explains_itself(tiny_gpt2: str) -> None:
    """Friction (issue #9): old main printed "total required", "usable" and "fits" together with the
    reconciliation at the bottom. The verdict names what the step needs, of how much, and the cache."""
    from dataclasses import replace

    from gpuplan.estimate import estimate
    from gpuplan.hardware import resolve_gpu
    from gpuplan.report.text import verdict_line
    from gpuplan.units import format_bytes

    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    probe = estimate(tiny_gpt2, mode="infer", batch_size=64, seq_len=128, gpu=h100)
    assert probe.min_required_bytes < probe.total_required_bytes
    between = replace(h100, cuda_total_memory_bytes=(probe.min_required_bytes + probe.total_required_bytes) // 2)
    est = estimate(tiny_gpt2, mode="infer", batch_size=64, seq_len=128, gpu=between)
    line = verdict_line(est)
    assert line == (f"H100-SXM: fits: needs {format_bytes(est.min_required_bytes)} of "
                    f"{format_bytes(between.usable_memory_bytes)} usable (the allocator would cache up to "
                    f"{format_bytes(est.total_required_bytes)} on a larger GPU); "
                    f"headroom {format_bytes(est.headroom_bytes or 0)}")
    assert line in str(est)
    short = replace(h100, cuda_total_memory_bytes=est.min_required_bytes - 2**20)
    assert verdict_line(estimate(tiny_gpt2, mode="infer", batch_size=64, seq_len=128, gpu=short)).endswith(
        "; short by 1.00 MiB")


def test_small_models_get_tables_in_a_unit_where_no_row_reads_zero(tiny_gpt2: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Friction (issue #9): the activation table of a small model printed 0.00 GiB rows."""
    from gpuplan.cli.main import main

    assert main(["estimate", tiny_gpt2, "--batch-size", "2", "--seq-len", "16", "--gpu", "T4"]) == 0
    text = capsys.readouterr().out
    tables = [block for block in text.split("\n\n") if "-----" in block]
    assert len(tables) == 2  # components, activation memory by module
    units = []
    for block in tables:
        lines = block.splitlines()
        rule = next(i for i, line in enumerate(lines) if line.startswith("-----"))
        header, rows = lines[rule - 1], lines[rule + 1:]
        units.append(header.split()[1])
        assert units[-1] in ("GiB", "MiB", "KiB", "B"), header
        for row in rows:
            assert row.split()[-1 if "activation memory" in block else -2] != "0.00", row
    assert units[1] != "GiB"  # a tiny model's activations are KiB/MiB


def test_weight_quant_in_the_json(tiny_gpt2: str, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuplan.cli.main import main
    from gpuplan.memory.weight_quant import quantized_weight_bytes

    argv = ["estimate", tiny_gpt2, "--mode", "generate", "--batch-size", "1", "--seq-len", "8", "--new-tokens", "4",
            "--precision", "fp16", "--weight-quant", "int4", "--gpu", "T4", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["components"]["parameters"] == data["weight_quant"]["weight_bytes"] == \
        quantized_weight_bytes(data["params_count"], "int4")
    assert sum(data["components"].values()) == data["total_required_bytes"]
    assert main(["estimate", tiny_gpt2, "--weight-quant", "int8"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "applies to --mode infer or generate" in err
