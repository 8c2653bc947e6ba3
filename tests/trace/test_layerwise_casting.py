"""diffusers' layerwise casting (``--weight-quant fp8-storage``, trace/pipeline.py ``layerwise_fp8``): the weights
the layer holds between calls are the load-time fp8 storages — what ``Memory after loading`` counts — and a call
computes in the compute dtype. (Before, each call put a new fp8 tensor in place of the loaded one, so a traced
FLUX.1-dev counted 8 GiB of fp8 weights as tensors the step made: the after-loading row was −35%.)"""

from __future__ import annotations

import torch
from torch import nn

from gpuplan.trace.pipeline import layerwise_fp8


def test_the_loaded_fp8_weights_stay_and_the_call_computes_in_bf16() -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)).to(torch.bfloat16)
    assert layerwise_fp8(model, compute_dtype=torch.bfloat16) == 2  # the norm is skipped (diffusers' patterns)
    loaded = {name: (p, p.untyped_storage().data_ptr()) for name, p in model.named_parameters()}
    assert {name: p.dtype for name, (p, _) in loaded.items()} == {
        "0.weight": torch.float8_e4m3fn, "0.bias": torch.float8_e4m3fn, "1.weight": torch.bfloat16,
        "1.bias": torch.bfloat16, "2.weight": torch.float8_e4m3fn, "2.bias": torch.float8_e4m3fn}
    out = model(torch.randn(4, 16, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16
    for name, p in model.named_parameters():
        assert p is loaded[name][0] and p.untyped_storage().data_ptr() == loaded[name][1], name
