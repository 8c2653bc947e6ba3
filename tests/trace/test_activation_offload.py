"""``--offload params,optimizer,activations``: activation-checkpoint CPU offload traced (trace/runner.py
``_offloaded_checkpoint``, host storages in trace/tracker.py ``on_host``), DeepSpeed ZeRO's param/optimizer offload
forced in ``plan`` (parallel/plan.py ``_zero_offload``).

Semantics (Arctic Long Sequence Training, arXiv 2506.13996 §"activation checkpoint offload to CPU"; its patch of
torch.utils.checkpoint, ``torch.autograd.graph.save_on_cpu``'s pack-to-host / unpack-to-device): each fully
checkpointed block keeps its input on the host; the recompute copies it back first.

* Exact accounting: a real CPU run of a tiny Llama, tracked storage by storage, equals the fake trace to the byte
  (device peak, components, phase, and the host bytes: peak and copies), alone and with --tiled-mlp and
  --loss fused-linear-ce in bf16 (the ALST recipe).
* The host holds exactly one hidden state per block (blocks × batch × seq × hidden × dtype bytes).
* The gradients are those of plain full checkpointing.
* CLI: estimate with --offload activations reports host memory and the host-link time; plan with
  --offload params,optimizer,activations answers DeepSpeed ZeRO-3 with both offloads; bad values one line, exit 2.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.runner import StepRunner, Target, apply_checkpointing, block_modules, find_containers
from gpuplan.workload import Workload
from tests.fixtures.exact import assert_fake_equals_real, run_cli
from tests.fixtures.tiny_models import TINY_LLAMA

SOURCE = HFConfigSource("tiny-llama", TINY_LLAMA)

CASES = {
    "fp32": Workload(batch_size=2, seq_len=64, checkpointing="full", offload="activations"),
    "alst-bf16": Workload(batch_size=2, seq_len=64, checkpointing="full", offload="activations", precision="bf16",
                          tiled_mlp=True, loss="fused-linear-ce"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_fake_trace_equals_real_cpu_run(case: str) -> None:
    workload = CASES[case]
    fake, real = assert_fake_equals_real(SOURCE, workload)
    assert (fake.host_peak_bytes, fake.host_copy_bytes) == (real.host_peak_bytes, real.host_copy_bytes)
    element = 2 if workload.precision == "bf16" else 4
    one_hidden_state = workload.batch_size * 64 * TINY_LLAMA["hidden_size"] * element
    assert fake.host_peak_bytes == fake.host_copy_bytes == TINY_LLAMA["num_hidden_layers"] * one_hidden_state


def test_gradients_equal_plain_checkpointing() -> None:
    grads = {}
    for offload in ("none", "activations"):
        workload = Workload(batch_size=2, seq_len=24, checkpointing="full", offload=offload)
        torch.manual_seed(0)
        runner = StepRunner(SOURCE, workload, Target(cuda=False), fake=False)
        model = runner.build_model()
        blocks = block_modules(model, find_containers(model, SOURCE.layer_counts()))
        apply_checkpointing(blocks, "full", contextlib.nullcontext, offload=offload == "activations")
        torch.manual_seed(1)
        inputs = SOURCE.inputs(model, workload)
        model(**inputs.kwargs, use_cache=False).loss.backward()
        grads[offload] = {n: p.grad for n, p in model.named_parameters()}
    for name, grad in grads["none"].items():
        torch.testing.assert_close(grads["activations"][name], grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama") / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    return path


SHAPE = ["--batch-size", "4", "--seq-len", "256", "--gpu", "h100", "--json", "--no-cache", "--checkpointing", "full"]


@pytest.mark.slow
def test_cli_estimate_activation_offload(config: Path) -> None:
    code, out, err = run_cli("estimate", str(config), *SHAPE)
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = run_cli("estimate", str(config), *SHAPE, "--offload", "activations")
    assert code == 0, err
    offloaded = json.loads(out)
    assert offloaded["workload"]["offload"] == "activations"
    block_inputs = TINY_LLAMA["num_hidden_layers"] * 4 * 256 * TINY_LLAMA["hidden_size"] * 4  # fp32 residual stream
    assert offloaded["host_memory_bytes"] == offloaded["activation_offload"]["copy_bytes_each_way"] == block_inputs
    assert offloaded["activation_offload"]["offload_transfer_s"] > 0
    assert offloaded["components"]["activations"] < plain["components"]["activations"]
    assert offloaded["step_time_s"] > plain["step_time_s"]  # the copies over the host link


@pytest.mark.slow
def test_cli_plan_composes_zero3_offload_with_activation_offload(config: Path) -> None:
    code, out, err = run_cli("plan", str(config), "--gpus", "1", "--gpu", "h100", "--batch-size", "2", "--seq-len",
                             "128", "--checkpointing", "full", "--offload", "activations,optimizer,params", "--json",
                             "--no-cache")
    assert code == 0, err
    data = json.loads(out)
    best = data["parallelism"]
    assert (best["zero"], best["offload_optimizer"], best["offload_params"]) == (3, True, True)
    assert data["workload"]["offload"] == "params,optimizer,activations"  # one order, whatever was typed
    assert data["time_parts_s"]["activation_offload"] > 0  # the block inputs over the host link, both ways


@pytest.mark.parametrize(("argv", "words"), [
    (["--offload", "activations", "--checkpointing", "none"], "add --checkpointing full"),
    (["--offload", "activations", "--checkpointing", "selective"], "add --checkpointing full"),
    (["--offload", "weights"], "offload 'weights' is not allowed"),
    (["--offload", "activations,activations", "--checkpointing", "full"], "is not allowed"),
    (["--offload", "activations", "--checkpointing", "full", "--mode", "infer"], "--mode train only"),
    (["--offload", "params,optimizer"], "gpuplan plan"),
])
def test_estimate_bad_offload_one_line_exit_2(argv: list[str], words: str, config: Path) -> None:
    code, _, err = run_cli("estimate", str(config), "--seq-len", "16", *argv)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_activation_offload_without_checkpointing_given_is_full_checkpointing(config: Path) -> None:
    """Activation-checkpoint offload moves the inputs of fully checkpointed blocks: left unset, --checkpointing is
    full, and a note says so (an explicit other mode is refused, above)."""
    code, out, err = run_cli("estimate", str(config), "--seq-len", "16", "--offload", "activations", "--json")
    assert code == 0, err
    workload = json.loads(out)["workload"]
    assert (workload["checkpointing"], workload["offload"]) == ("full", "activations")
    assert "--offload activations: full activation checkpointing" in err


@pytest.mark.parametrize(("argv", "words"), [
    (["--offload", "params", "--zero", "2"], "needs ZeRO-3"),
    (["--offload", "optimizer", "--fsdp"], "drop --fsdp"),
])
def test_plan_bad_offload_one_line_exit_2(argv: list[str], words: str, config: Path) -> None:
    code, _, err = run_cli("plan", str(config), "--gpus", "2", "--gpu", "h100", "--seq-len", "16", *argv)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1
