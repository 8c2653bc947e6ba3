"""The CPU-only torch build and the CUDA build give the same answer (issue 2).

Users plan GPUs from laptops with CPU builds. ``scripts/test`` creates ``.venv-cpu`` with the
small CPU-only torch 2.13.0 and sets GPUPLAN_CPU_PYTHON; the main environment has the CUDA build
2.14.1 (running without a GPU). Both must give the same ``peak_allocated_bytes`` for a GPU target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json
from gpuplan.estimate import estimate
cases = {
    "gpt2-train": ("gpt2", dict(mode="train", batch_size=2, seq_len=128, precision="amp-bf16")),
    "llama-generate": ("llama-3.2-1b", dict(mode="generate", batch_size=1, seq_len=64, new_tokens=8,
                                            precision="bf16")),
}
print(json.dumps({k: estimate(m, gpu="H100-SXM", **kw).peak_allocated_bytes for k, (m, kw) in cases.items()}))
"""


def _run(python: str) -> dict[str, int]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    out = subprocess.run([python, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not os.environ.get("GPUPLAN_CPU_PYTHON"),
                    reason="GPUPLAN_CPU_PYTHON (a CPU-only torch environment) is set by scripts/test")
def test_cpu_only_build_equals_cuda_build() -> None:
    cpu_python = os.environ["GPUPLAN_CPU_PYTHON"]
    probe = "import torch; print(torch.__version__, torch.backends.cuda.is_built())"
    versions = subprocess.run([cpu_python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert versions[1] == "False", f"{cpu_python} is not a CPU-only torch build: {versions}"
    cpu = _run(cpu_python)
    cuda_build = _run(sys.executable)
    assert cpu == cuda_build
    assert all(v > 0 for v in cpu.values())
