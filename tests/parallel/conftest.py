from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# the shared reference data sits beside the repository checkout (../shared), never at a fixed machine path
CALIBRATION = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "calibration.csv"


@pytest.fixture(scope="session")
def gpt2_ctx():  # type: ignore[no-untyped-def]
    """gpt2 traced once (3 blocks, micro-batch 4, seq 1024, AMP bf16, AdamW) on H100-SXM, 4 nodes × 8."""
    from gpuplan.estimate import make_workload
    from gpuplan.hardware import get_gpu
    from gpuplan.memory.overheads import overheads_for
    from gpuplan.models.sources import resolve_model
    from gpuplan.parallel.evaluate import Context
    from gpuplan.parallel.profile import profile_model
    from gpuplan.parallel.topology import make_topology

    gpu = get_gpu("H100-SXM")
    prof = profile_model(
        resolve_model("gpt2"),
        make_workload(mode="train", batch_size=4, seq_len=1024, precision="amp-bf16"),
        gpu,
    )
    over = overheads_for(arch=gpu.arch, vendor=gpu.vendor, compute_capability=gpu.compute_capability, trains=True)
    topo = make_topology(gpu, 32, nodes=4)
    return Context(prof, topo, gpu.usable_memory_bytes, over.cuda_context_bytes + over.workspace_bytes)


def calibration_rows() -> dict[str, dict[str, str]]:
    import csv

    if not CALIBRATION.exists():
        pytest.skip(f"reference data {CALIBRATION} is not beside this checkout", allow_module_level=True)
    with CALIBRATION.open() as f:
        return {row["id"]: row for row in csv.DictReader(f)}
