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


TINY_MIXTRAL = dict(
    model_type="mixtral",
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=300,
    max_position_embeddings=256,
    num_local_experts=8,
    num_experts_per_tok=2,
)
"""A 4-block Mixtral with 8 experts per block, top-2 routing (built on fake tensors, no weights)."""


@pytest.fixture(scope="session")
def moe_ctx():  # type: ignore[no-untyped-def]
    """TINY_MIXTRAL traced once (micro-batch 2, seq 64, AMP bf16, AdamW) on H100-SXM, 2 nodes × 8."""
    from gpuplan.estimate import make_workload
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.parallel.evaluate import Context
    from gpuplan.parallel.profile import profile_model
    from gpuplan.parallel.topology import make_topology

    gpu = get_gpu("H100-SXM")
    src = HFConfigSource("tiny-mixtral", TINY_MIXTRAL, default_seq_len=64)
    prof = profile_model(src, make_workload(mode="train", batch_size=2, seq_len=64, precision="amp-bf16"), gpu)
    return Context(prof, make_topology(gpu, 16, nodes=2), gpu.usable_memory_bytes, 500 * 2**20)


def calibration_rows() -> dict[str, dict[str, str]]:
    import csv

    if not CALIBRATION.exists():
        pytest.skip(f"reference data {CALIBRATION} is not beside this checkout", allow_module_level=True)
    with CALIBRATION.open() as f:
        return {row["id"]: row for row in csv.DictReader(f)}
