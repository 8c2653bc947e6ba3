"""The model the user's program really runs, built from the one the source describes.

A source builds the architecture (``ModelSource.build``); fine-tuning and quantized checkpoints
change it before the step starts: quantized base weights replace the linear layers' weights
(``trace/quantized.py``), and PEFT wraps targeted layers with adapters (``trace/peft.py``). The
order is the one people write: load the (quantized) base model, then ``get_peft_model`` on it —
QLoRA is both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload


def adapt_model(model: nn.Module, source: ModelSource, workload: Workload) -> nn.Module:
    """``model`` as the workload runs it (unchanged when it asks for neither quantization nor PEFT)."""
    if source.kind == "pipeline":  # each component as the pipeline loads it (trace/pipeline.py)
        from gpuplan.trace.pipeline import adapt_pipeline

        return adapt_pipeline(model, source, workload)
    from gpuplan.trace.float8 import convert_for_precision
    from gpuplan.trace.quantized import quantize_for_workload

    model = quantize_for_workload(model, source, workload)
    model = convert_for_precision(model, workload)
    if workload.uses_peft:
        from gpuplan.trace.peft import apply_peft

        model = apply_peft(model, source, workload)
    if workload.tiled_mlp and workload.trains:
        from gpuplan.trace.tiled_mlp import tile_mlps

        tile_mlps(model, workload, source.name)
    return model
