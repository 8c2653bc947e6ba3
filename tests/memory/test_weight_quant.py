"""Weight-only quantized weights (``--weight-quant``) count in the memory figures and the fit verdict,
with the one layout (gpuplan.memory.weight_quant) that the decode time reads too."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpuplan.errors import ConfigError
from gpuplan.estimate import estimate
from gpuplan.hardware import resolve_gpu
from gpuplan.memory.weight_quant import QUANT_GROUP_SIZE, bits_per_weight, quantized_weight_bytes
from gpuplan.perf.roofline import weight_bytes_factor


def test_layout_bytes_are_exact() -> None:
    # 1000 weights = 7 full groups of 128 + one started group: 8 groups of metadata
    assert quantized_weight_bytes(1000, "int4") == 500 + 8 * (2 + 2)  # 4-bit packed, fp16 scale + zero
    assert quantized_weight_bytes(1000, "int8") == 1000 + 8 * 2  # 1 byte, fp16 scale
    assert quantized_weight_bytes(1001, "int4") == 501 + 8 * 4  # an odd count still takes a whole byte
    assert quantized_weight_bytes(QUANT_GROUP_SIZE, "fp8") == QUANT_GROUP_SIZE + 2
    # the time model reads the same layout: bits per weight / 16 for a 16-bit weight
    assert bits_per_weight("int4") == 4.25 and weight_bytes_factor("int4") == 4.25 / 16
    assert bits_per_weight("int8") == 8.125 and weight_bytes_factor("none") == 1.0


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_quantized_weights_count_in_the_peak_and_the_fit(tiny_gpt2: str, scheme: str) -> None:
    """Issue #9 item 7: old main left peak, components and fit at 16-bit weights ("does NOT fit" beside
    "weights would take ..."). The parameters component is the exact quantized bytes; every peak drops
    by exactly what it saves (the weights live through the whole step); the fit follows."""
    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    work = {"mode": "generate", "batch_size": 2, "seq_len": 16, "new_tokens": 8, "precision": "bf16"}
    base = estimate(tiny_gpt2, gpu=h100, **work)  # type: ignore[arg-type]
    # a GPU on which the 16-bit weights just do not fit and the quantized ones do
    tight = replace(h100, cuda_total_memory_bytes=base.min_required_bytes - 1)
    quant = estimate(tiny_gpt2, gpu=tight, weight_quant=scheme, **work)  # type: ignore[arg-type]
    weights = quantized_weight_bytes(base.params_count, scheme)
    saved = base.components["parameters"] - weights
    assert base.components["parameters"] == base.step.param_bytes  # bf16 weights as traced
    assert quant.components["parameters"] == weights
    for name in ("tensor_peak_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "total_required_bytes",
                 "min_required_bytes"):
        assert getattr(base, name) - getattr(quant, name) == saved, name
    assert {k: v for k, v in quant.components.items() if k != "parameters"} == \
        {k: v for k, v in base.components.items() if k != "parameters"}
    assert quant.fits is True and quant.headroom_bytes == saved - 1
    d = quant.to_dict()
    assert d["weight_quant"] == {"scheme": scheme, "weight_bytes": weights,
                                 "traced_weight_bytes": base.step.param_bytes, "memory_saved_bytes": saved}
    assert d["generation"]["weight_quant"] == scheme
    assert any(f"weight-only {scheme}" in a and "counted in every figure" in a for a in quant.assumptions)
    assert "does NOT fit" not in str(quant)
    # decode reads the same weights the memory counts (plus the KV cache at the mean context)
    assert quant.timing is not None and quant.timing.generation is not None
    assert quant.timing.generation.bytes_per_decode_step >= weights
    assert quant.timing.generation.bytes_per_decode_step < weights + quant.components["kv_cache"]


def test_weight_quant_is_for_inference_only(tiny_gpt2: str) -> None:
    with pytest.raises(ConfigError, match="applies to --mode infer or generate, not train"):
        estimate(tiny_gpt2, mode="train", weight_quant="int4")


def test_unknown_scheme_is_one_line(tiny_gpt2: str) -> None:
    with pytest.raises(ConfigError, match="unknown weight quantization 'int3'"):
        estimate(tiny_gpt2, mode="infer", weight_quant="int3")  # type: ignore[arg-type]


REFERENCE_CSV = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "calibration.csv"
# bigcode/octocoder (StarCoder architecture), from the row's notes: 40 layers, 48 heads, n_embd 6144, MQA
OCTOCODER = {"model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"], "n_layer": 40, "n_head": 48,
             "n_embd": 6144, "n_inner": 24576, "n_positions": 8192, "vocab_size": 49152, "multi_query": True,
             "activation_function": "gelu_pytorch_tanh", "bos_token_id": 0, "eos_token_id": 0}


@pytest.mark.slow
def test_int8_generate_peak_against_the_published_octocoder_figure(tmp_path: Path) -> None:
    """shared/reference/calibration.csv row hfllm-octo-int8 (HF 'Optimizing LLMs for Speed and Memory',
    transformers docs @008f5c8c): torch.cuda.max_memory_allocated() = 15.22 GiB for octocoder loaded in
    8 bits, generating 60 tokens after a short prompt on an A100 40GB. Old main said 29.0 GiB (+91%).
    Tolerance 10%: bitsandbytes keeps the embeddings in fp16 and stores one fp32 scale per row (our
    layout: every weight 8-bit + an fp16 scale per 128), and LLM.int8's outlier decomposition adds
    temporaries we do not model."""
    if not REFERENCE_CSV.exists():
        pytest.skip(f"reference data not present ({REFERENCE_CSV.name} in ../shared/reference)")
    with REFERENCE_CSV.open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == "hfllm-octo-int8")
    assert row["quantity"] == "peak_allocated" and row["unit"] == "GiB"
    published = float(row["value"]) * 2**30
    (tmp_path / "config.json").write_text(json.dumps(OCTOCODER))
    est = estimate(str(tmp_path), mode="generate", batch_size=1, seq_len=20, new_tokens=60, precision="fp16",
                   gpu="A100-40GB-SXM", weight_quant="int8")
    assert est.params_count == pytest.approx(float(row["params"]), rel=0.01)
    assert est.peak_allocated_bytes == pytest.approx(published, rel=0.10)
    assert est.fits is True
