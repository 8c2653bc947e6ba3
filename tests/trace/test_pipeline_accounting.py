"""Exact accounting for diffusion pipelines (issue 21): a tiny pipeline traced on fake tensors equals the same
program run for real on the CPU, storage by storage — the whole generation's peak, every phase's peak (one per
component: what each offload mode's GPU-resident set is computed from), and with LoRA training of the denoiser.

The tiny FLUX pipeline has 4 double and 4 single blocks, so its fake side is traced at 3 and 2 blocks and
scaled (the scaling is covered too); the tiny Wan pipeline covers video (3-D VAE, a second guidance pass).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.memory.pipeline_offload import place
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload

TINY = Path(__file__).parent.parent / "fixtures" / "pipelines"
CASES = [
    ("tiny-flux", Workload(mode="infer", image_size=64, steps=3)),
    ("tiny-flux", Workload(mode="train", image_size=64, peft="lora", lora_rank=4, precision="bf16")),
    # LoRA + full checkpointing on cached inputs: the peak is in backward while the loss is alive, whose storage on
    # the CPU is mse_loss's unreduced buffer (trace/tracker.py _loss_on_unreduced_buffer; was 1,020 B short)
    ("tiny-flux", Workload(mode="train", image_size=64, peft="lora", cache_latents=True, cache_text_embeddings=True,
                           checkpointing="full")),
    ("tiny-wan", Workload(mode="infer", image_size=32, frames=5, steps=2)),
    # the dequantizing formats (their per-layer transients are real tensors on both sides): a GGUF transformer,
    # torchao int8 weight-only on the transformer and T5, torchao float8 weight-only
    ("tiny-flux", Workload(mode="infer", image_size=64, steps=2, precision="bf16", gguf_type="Q4_1")),
    ("tiny-flux", Workload(mode="infer", image_size=64, steps=2, precision="bf16", component_quant="int8",
                           quantize_components=("transformer", "text_encoder_2"))),
    ("tiny-flux", Workload(mode="infer", image_size=64, steps=2, precision="bf16", component_quant="fp8")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "workload"), CASES, ids=[
    f"{c.values[0]}-{c.values[1].mode}-{i}" if hasattr(c, "values") else f"{c[0]}-{c[1].mode}-{i}"
    for i, c in enumerate(CASES)])
def test_fake_pipeline_trace_equals_real_cpu_run(name: str, workload: Workload) -> None:
    model = str(TINY / name)
    fake = trace_step(model, workload, cuda=False, fake=True)
    real = trace_step(model, workload, cuda=False, fake=False)
    if name == "tiny-flux":
        assert fake.block_counts == {"transformer.num_layers": 4, "transformer.num_single_layers": 4}, fake.notes
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes, (fake.peak_phase, real.peak_phase)
    assert fake.params_count == real.params_count
    assert fake.child_param_bytes == real.child_param_bytes
    if workload.trains:
        assert fake.gradient_bytes == real.gradient_bytes > 0
        assert fake.optimizer_state_bytes == real.optimizer_state_bytes > 0
        return
    # every phase's peak (one per component) is exact too, so each offload mode's GPU-resident set is
    assert fake.phase_peaks == real.phase_peaks
    assert set(fake.phase_peaks) >= {"denoise", "vae_decode"}
    for offload in ("none", "model", "sequential", "group"):
        args = {"offload": offload, "denoiser": "transformer", "denoiser_calls": 3}
        assert fake.run is not None and real.run is not None
        a = place(phase_peaks=fake.phase_peaks, component_bytes=fake.child_param_bytes,
                  child_weights=fake.run.child_weights, **args)  # type: ignore[arg-type]
        b = place(phase_peaks=real.phase_peaks, component_bytes=real.child_param_bytes,
                  child_weights=real.run.child_weights, **args)  # type: ignore[arg-type]
        assert a == b
        assert a.tensor_peak_bytes <= fake.tensor_peak_bytes


def test_offload_residency_rules() -> None:
    """Each mode's GPU-resident weights on a hand-made pipeline: model keeps the running component, sequential
    its largest module, group its non-block weights and two blocks; host RAM as each mode holds it."""
    weights = {"text_encoder": [100, 10, 100, 0], "transformer": [1000, 50, 200, 100], "vae": [50, 5, 50, 0]}
    sizes = {k: v[0] for k, v in weights.items()}
    live = 1150  # all weights on the GPU
    peaks = {"encode:text_encoder": live + 30, "denoise": live + 20, "vae_decode": live + 70}
    kw = {"denoiser": "transformer", "phase_peaks": peaks, "component_bytes": sizes, "child_weights": weights,
          "denoiser_calls": 4}
    none = place(offload="none", **kw)  # type: ignore[arg-type]
    assert (none.tensor_peak_bytes, none.host_memory_bytes, none.transfer_bytes) == (1220, 0, 0)
    model = place(offload="model", **kw)  # type: ignore[arg-type]
    assert (model.tensor_peak_bytes, model.peak_phase) == (1020, "denoise")
    assert model.host_memory_bytes == 1100 and model.transfer_bytes == 1150
    seq = place(offload="sequential", **kw)  # type: ignore[arg-type]
    assert (seq.tensor_peak_bytes, seq.peak_phase) == (max(30 + 10, 20 + 50, 70 + 5), "vae_decode")
    assert seq.host_memory_bytes == 1150
    assert seq.transfer_bytes == 150 + 4 * 1000
    group = place(offload="group", **kw)  # type: ignore[arg-type]
    assert group.tensor_peak_bytes == max(30 + 100, 20 + 200 + 2 * 100, 70 + 50) and group.overlapped


@pytest.mark.parametrize(("name", "kwargs"), [
    ("mse_loss", {}), ("mse_loss", {"reduction": "sum"}), ("smooth_l1_loss", {"beta": 0.5}),
    ("huber_loss", {}), ("l1_loss", {}),
])
@pytest.mark.parametrize(("shape", "target_shape", "dtype"), [((1, 64, 16), (1, 64, 16), "float32"),
                                                              ((2, 8, 4), (1, 8, 4), "float64")])
def test_fake_loss_storage_is_the_cpu_kernels(name: str, kwargs: dict[str, object], shape: tuple[int, ...],
                                             target_shape: tuple[int, ...], dtype: str) -> None:
    """The reduced loss holds the storage the CPU kernel gives it (mse_loss and smooth_l1_loss: the unreduced
    buffer; the others: their 0-dim result), read through the recorder as a traced step reads it."""
    import warnings

    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.trace.tracker import Recorder, RecordingMode

    fn = getattr(F, name)
    dt = getattr(torch, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broadcast target's size warning
        real = fn(torch.randn(shape, dtype=dt), torch.randn(target_shape, dtype=dt), **kwargs)
        recorder = Recorder()
        with FakeTensorMode(), RecordingMode(recorder):
            fake = fn(torch.randn(shape, dtype=dt), torch.randn(target_shape, dtype=dt), **kwargs)
    assert fake.shape == real.shape == ()
    assert recorder.trace.storages[recorder.storage_id(fake)].size_bytes == real.untyped_storage().nbytes()
