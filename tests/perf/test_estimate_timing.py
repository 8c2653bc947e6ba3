"""estimate(..., gpu=...) carries the cost model's step time, throughput and MFU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.estimate import estimate


def test_estimate_with_gpu_has_time_throughput_mfu() -> None:
    est = estimate("gpt2", mode="train", batch_size=2, seq_len=128, precision="amp-bf16", gpu="A100-80GB-SXM")
    assert est.step_time_s is not None and est.step_time_s > 0
    assert est.throughput is not None and est.throughput["unit"] == "tokens/s"
    assert est.throughput["value"] == pytest.approx(2 * 128 / est.step_time_s)
    assert est.mfu is not None and 0 < est.mfu < 1
    assert any(a.startswith("efficiency:") for a in est.assumptions)
    d = est.to_dict()
    assert d["step_time_s"] == est.step_time_s
    assert d["time"]["kernels"] > 0
    assert "step time" in str(est)


def test_estimate_without_gpu_has_no_time() -> None:
    est = estimate("gpt2", mode="infer", batch_size=1, seq_len=32)
    assert est.step_time_s is None and est.throughput is None and est.mfu is None


def test_every_time_figure_of_a_result_is_one_calculation() -> None:
    """Issue #9 item 3: the timing is typed (``Estimate.timing``), and the JSON's time split,
    tokens/s, samples/s and throughput all come from it."""
    est = estimate("gpt2", mode="generate", batch_size=2, seq_len=32, new_tokens=8, gpu="A100-80GB-SXM")
    assert est.timing is not None and est.timing.generation is not None
    d = est.to_dict()
    assert d["step_time_s"] == est.timing.time.total_s == pytest.approx(sum(d["time"]["by_phase_s"].values()))
    assert sum(d["time"]["by_op_class_s"].values()) == pytest.approx(d["step_time_s"])
    assert d["throughput"] == {"value": est.timing.generation.new_tokens_per_s, "unit": "tokens/s"}
    assert d["throughput"]["value"] == pytest.approx(2 * 8 / d["step_time_s"])
    assert d["generation"]["prefill_s"] == d["time"]["by_phase_s"]["prefill"]
    assert d["samples_per_s"] == pytest.approx(2 / d["step_time_s"])
    assert "extra" not in d


@pytest.mark.slow
def test_the_python_api_passes_a_users_mypy_strict(tmp_path: Path) -> None:
    """Typed seams: ``gpuplan.estimate`` is the function for a type checker, its workload keywords are
    Literals (a misspelt mode is a type error), and the result's fields are typed."""
    good = tmp_path / "good.py"
    good.write_text(
        "import gpuplan\n"
        "est = gpuplan.estimate('gpt2', mode='train', batch_size=8, gpu='H100-SXM')\n"
        "t: float | None = est.step_time_s\n"
        "if est.throughput is not None:\n"
        "    v: float = est.throughput['value']\n"
        "fits: bool | None = est.fits\n"
    )
    bad = tmp_path / "bad.py"
    bad.write_text("import gpuplan\ngpuplan.estimate('gpt2', mode='trian', batch_size=8)\n")
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "MYPYPATH": str(src)}
    # gpuplan is checked as a user's mypy sees it; torch and transformers (imported inside functions)
    # are skipped to keep the test to seconds
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nincremental = False\n"
                      "[mypy-torch.*,transformers.*,numpy.*,safetensors.*]\nfollow_imports = skip\n")

    def mypy(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--follow-imports=silent",
                               str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)

    ok = mypy(good)
    assert ok.returncode == 0, ok.stdout
    wrong = mypy(bad)
    assert wrong.returncode == 1 and "mode" in wrong.stdout and "trian" in wrong.stdout, wrong.stdout
