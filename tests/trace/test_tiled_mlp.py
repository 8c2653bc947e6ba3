"""``--tiled-mlp``: DeepSpeed's / Arctic Long Sequence Training's TiledMLP (trace/tiled_mlp.py).

Source: deepspeedai/DeepSpeed ``deepspeed/runtime/sequence_parallel/ulysses_sp.py`` @ 016d2f70 (``TiledMLP``:
forward over ``torch.chunk(x, shards, dim=-2)`` under no_grad, only ``x`` saved; backward recomputes each
tile and accumulates its input gradient into one ``zeros_like(x)``; the example's
``num_shards = ceil(seqlen / hidden)``).

* Exact accounting: a real CPU run of a tiny Llama, tracked storage by storage, equals the fake trace to
  the byte (fp32 with 4 tiles; bf16, full checkpointing, ArcticTraining's tile count).
* The gradients are those of the untiled MLP (fp32).
* Property (hypothesis): more tiles never more memory (peak and activations at it).
* CLI: ``--tiled-mlp``, ``--tiled-mlp N``, ``--tiled-mlp auto`` exit 0; ``0``, ``x``, ``--mode infer`` and a
  model without a block MLP are one line, exit 2.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.runner import StepRunner, Target
from gpuplan.trace.step import trace_step
from gpuplan.trace.tiled_mlp import default_tiles
from gpuplan.workload import Workload
from tests.fixtures.exact import assert_fake_equals_real, run_cli
from tests.fixtures.tiny_models import TINY_BERT, TINY_LLAMA

SOURCE = HFConfigSource("tiny-llama", TINY_LLAMA)

CASES = {
    "fp32-4-tiles": Workload(batch_size=2, seq_len=64, tiled_mlp=True, mlp_tiles=4),
    "bf16-checkpointing-auto": Workload(batch_size=2, seq_len=192, tiled_mlp=True, precision="bf16",
                                        checkpointing="full"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_fake_trace_equals_real_cpu_run(case: str) -> None:
    assert_fake_equals_real(SOURCE, CASES[case])


def test_arctic_tile_count() -> None:
    assert default_tiles(192, 64) == 3
    assert default_tiles(500_000, 4096) == 123  # Llama 3 8B at 500K tokens
    assert default_tiles(10, 4096) == 1


def test_gradients_equal_the_untiled_mlp() -> None:
    grads = {}
    for tiled in (False, True):
        workload = Workload(batch_size=2, seq_len=24, tiled_mlp=tiled, mlp_tiles=5 if tiled else None)
        torch.manual_seed(0)
        model = StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()
        torch.manual_seed(1)
        inputs = SOURCE.inputs(model, workload)
        model(**inputs.kwargs, use_cache=False).loss.backward()
        grads[tiled] = {n: p.grad for n, p in model.named_parameters()}
    for name, grad in grads[False].items():
        torch.testing.assert_close(grads[True][name], grad, rtol=1e-4, atol=1e-6, msg=name)


ONE_BLOCK = HFConfigSource("tiny-llama-1-block", {**TINY_LLAMA, "num_hidden_layers": 1})


@functools.cache
def _peak(tiles: int) -> tuple[int, int]:
    workload = Workload(batch_size=1, seq_len=48, tiled_mlp=True, mlp_tiles=tiles)
    step = trace_step(ONE_BLOCK, workload, cuda=False, fake=True, scale=False)
    return step.tensor_peak_bytes, step.tensor_components["activations"] + step.tensor_components["temporaries"]


@given(fewer=st.integers(1, 48), more=st.integers(1, 48))
@settings(max_examples=4, deadline=None)
@pytest.mark.slow
def test_more_tiles_never_more_memory(fewer: int, more: int) -> None:
    fewer, more = min(fewer, more), max(fewer, more)
    assert _peak(more)[0] <= _peak(fewer)[0]
    assert _peak(more)[1] <= _peak(fewer)[1]



@pytest.mark.slow
def test_cli_every_value(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    shape = ["--batch-size", "2", "--seq-len", "128", "--gpu", "h100", "--json", "--no-cache"]
    seen = {}
    for flag in ([], ["--tiled-mlp"], ["--tiled-mlp", "auto"], ["--tiled-mlp", "8"]):
        code, out, err = run_cli("estimate", str(config), *shape, *flag)
        assert code == 0, err
        data = json.loads(out)
        seen[" ".join(flag)] = (data["workload"]["tiled_mlp"], data["workload"]["mlp_tiles"], data["tensor_peak_bytes"])
    assert seen[""][:2] == (False, None)
    assert seen["--tiled-mlp"] == seen["--tiled-mlp auto"] and seen["--tiled-mlp"][:2] == (True, None)
    assert seen["--tiled-mlp 8"][:2] == (True, 8)
    assert seen["--tiled-mlp 8"][2] <= seen["--tiled-mlp"][2] < seen[""][2]  # 2 tiles (128 / 64), then 8


@pytest.mark.parametrize(("argv", "words"), [
    (["--tiled-mlp", "0"], "MLP tiles 0"),
    (["--tiled-mlp", "x"], "--tiled-mlp"),
    (["--tiled-mlp", "--mode", "infer"], "--mode train only"),
])
def test_cli_bad_values_one_line_exit_2(argv: list[str], words: str, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    code, _, err = run_cli("estimate", str(config), "--seq-len", "16", *argv)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_model_without_a_block_mlp_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_BERT))
    code, _, err = run_cli("estimate", str(config), "--seq-len", "16", "--tiled-mlp", "--no-cache")
    assert code == 2
    assert "--tiled-mlp" in err and "no block MLP" in err and len(err.strip().splitlines()) == 1
