"""The engine's profile run (serve/profile.py): the sort workspace and the dummy images it adds to the trace.

Sources: PyTorch ``aten/src/ATen/native/cuda/SortStable.cu`` (``do_launch_stable_sort_kernel`` and its three
branches) with CUB's non-double-buffer radix sort, which takes an alternate key and value buffer as scratch
(``DispatchSegmentedRadixSort`` / ``DispatchRadixSort``); vLLM 0.10.0 ``gpu_model_runner.py`` ``profile_run``
and ``compute_encoder_budget`` (0.33: ``multimodal/encoder_budget.py`` ``_get_max_items``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.models.sources import HFConfigSource
from gpuplan.serve import profile
from gpuplan.serve.capacity import trace_profile_run
from gpuplan.serve.profile import profile_images, sort_workspace_bytes
from tests.fixtures.tiny_models import TINY_GPT2_LM

GEMMA = json.loads((Path(__file__).parent / "data" / "gemma-3-4b-it" / "config.json").read_text())
F32, I64 = 4, 8


def test_sort_workspace_follows_pytorchs_branches() -> None:
    # rows of at most 4096 keys sort in place (should_use_small_sort): no scratch
    assert sort_workspace_bytes(1024, 4096, F32) == 0
    # 128 rows or more: segmented_sort_pairs = int64 reverse indices + CUB's alternate keys and values
    n = 1024 * 262_208
    assert sort_workspace_bytes(1024, 262_208, F32) == n * I64 + n * (F32 + I64) == 20 * n
    # fewer rows: segmented_sort_pairs_by_full_sort = two int2 arrays, the keys out, CUB's scratch
    n = 16 * 32_000
    assert sort_workspace_bytes(16, 32_000, F32) == 2 * n * I64 + n * F32 + n * (F32 + I64) == 32 * n
    # one row (or rows of a million keys or more): one row at a time, the scratch of one row
    assert sort_workspace_bytes(1, 152_064, F32) == 152_064 * (I64 + F32 + I64)
    assert sort_workspace_bytes(300, 1_000_000, F32) == 1_000_000 * 20


def test_dummy_images_of_the_profile_run() -> None:
    # gemma-3-4b-it: 256 tokens per image (pan-and-scan off), the encoder budget is max_num_batched_tokens
    assert profile_images(GEMMA, 16384, 1024) == 64
    assert profile_images(GEMMA, 8192, 256) == 32
    assert profile_images(GEMMA, 100, 1) == 1  # a budget under one image still profiles one
    assert profile_images(TINY_GPT2_LM, 16384, 1024) == 0  # no vision tower


@pytest.fixture(scope="module")
def tiny_lm() -> HFConfigSource:
    """The tiny GPT-2 with a vocabulary wide enough for the sort to take a workspace (over 4096 keys)."""
    return HFConfigSource("tiny-gpt2-wide", {**TINY_GPT2_LM, "vocab_size": 8192}, task="causal-lm")


def _activation(source: HFConfigSource) -> int:
    step = trace_profile_run(source, tokens=256, num_seqs=256, dtype="float16", compute_capability=(9, 0))
    return step.rounded_peak_bytes - step.param_bytes


@pytest.mark.fresh_trace  # the second trace patches the workspace away: it must not come from the shared traces
def test_sort_workspace_lives_with_the_sort_outputs(tiny_lm: HFConfigSource, monkeypatch: Any) -> None:
    # 256 requests × 8192 logits (n), fp16: at the sort live the fp16 logits (2n B), the sampler's float32
    # copy (4n), the sorted values and int64 indices (12n), the workspace (20n) and the decoder's hidden
    # states kept by profile_run (256 tokens × 64 × 2 B): the run's peak
    n = 256 * 8192
    at_sort = (2 + 4 + 12 + 20) * n + 256 * 64 * 2
    with_workspace = _activation(tiny_lm)
    assert at_sort <= with_workspace <= at_sort + (2 << 20)  # the allocator replay's rounding
    # without it the sort is not even the peak (the softmax of the sorted logits is, at 23n): a trace of op
    # outputs alone sees 15n less
    monkeypatch.setattr(profile, "sort_workspace_bytes", lambda rows, row_len, key_bytes: 0)
    assert with_workspace - _activation(tiny_lm) == pytest.approx(15 * n, abs=2 << 20)
