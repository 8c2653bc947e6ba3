"""``--loss fused-linear-ce``: Liger-Kernel's fused linear cross entropy, on the LM-head tap of ``--loss chunked-ce``.

Source: linkedin/Liger-Kernel ``src/liger_kernel/ops/fused_linear_cross_entropy.py`` @ 00eba634
(``fused_linear_cross_entropy_forward``: ``inc_factor = cdiv(V, H)``, ``chunk_size =
next_power_of_2(cdiv(BT, inc_factor))``, ``grad_input`` / ``grad_weight`` made up front and filled chunk by
chunk in the forward; its comment's example: BT = 4096·4, V = 32000, H = 4096 → inc_factor 8, chunk 2048).

* Exact accounting: a real CPU run of a tiny Llama (vocabulary 4096 over hidden 64, as Llama 3's 128,256
  over 4,096), tracked storage by storage, equals the fake trace to the byte (fp32; bf16 with full
  checkpointing).
* The loss and the gradients are those of the plain full-logits cross entropy (fp32, 1e-5).
* No full-vocabulary logits: the largest storage the loss makes is one chunk's logits (or a weight-sized
  gradient), never batch·seq·vocab.
* Every way in from the CLI: ``--loss fused-linear-ce`` on a causal LM exits 0 with a lower peak than
  ``--loss auto``; on a masked LM it is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpuplan.models import chunked_loss
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.runner import StepRunner, Target
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.exact import assert_fake_equals_real, run_cli
from tests.fixtures.tiny_models import TINY_BERT, TINY_LLAMA

BIG_VOCAB_LLAMA = {**TINY_LLAMA, "vocab_size": 4096}
SOURCE = HFConfigSource("tiny-llama-4k-vocab", BIG_VOCAB_LLAMA)

CASES = {
    "fp32": Workload(batch_size=2, seq_len=64, loss="fused-linear-ce"),
    "bf16-checkpointing": Workload(batch_size=2, seq_len=64, loss="fused-linear-ce", precision="bf16",
                                   checkpointing="full"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_fake_trace_equals_real_cpu_run(case: str) -> None:
    assert_fake_equals_real(SOURCE, CASES[case])


def test_liger_chunk_rule() -> None:
    assert chunked_loss.liger_chunk_rows(4096 * 4, 4096, 32000) == 2048  # Liger's own comment
    assert chunked_loss.liger_chunk_rows(500_000, 4096, 128_256) == 16_384  # Llama 3 8B at 500K tokens
    assert chunked_loss.liger_chunk_rows(10, 4096, 1000) == 10  # one chunk covers all the rows, never more


def test_loss_and_gradients_equal_plain_cross_entropy() -> None:
    workload = Workload(batch_size=2, seq_len=40, loss="fused-linear-ce")
    model = StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()
    torch.manual_seed(0)
    inputs = SOURCE.inputs(model, workload)
    output = model(**inputs.kwargs, use_cache=False)
    assert output.logits.numel() == 0  # the forward's own logits hold no bytes
    fused = SOURCE.loss(model, output, inputs, workload)
    fused.backward()
    head = model.get_output_embeddings().weight
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ids = inputs.kwargs["input_ids"]
    hidden = model.model(input_ids=ids).last_hidden_state
    logits = torch.nn.functional.linear(hidden, head)
    plain = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    plain.backward()
    torch.testing.assert_close(fused.detach(), plain.detach(), rtol=1e-5, atol=0.0)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
def test_no_full_vocabulary_logits() -> None:
    workload = Workload(batch_size=2, seq_len=64, loss="fused-linear-ce")
    step = trace_step(SOURCE, workload, cuda=False, fake=True, scale=False)
    assert step.run is not None
    loss_storages = [s.size_bytes for s in step.run.trace.storages.values() if s.phase == "loss"]
    full_logits = 2 * 64 * BIG_VOCAB_LLAMA["vocab_size"] * 4
    head_weight = BIG_VOCAB_LLAMA["vocab_size"] * BIG_VOCAB_LLAMA["hidden_size"] * 4
    chunk = chunked_loss.liger_chunk_rows(2 * 64, BIG_VOCAB_LLAMA["hidden_size"], BIG_VOCAB_LLAMA["vocab_size"])
    assert max(loss_storages) == max(head_weight, chunk * BIG_VOCAB_LLAMA["vocab_size"] * 4) < full_logits



@pytest.mark.slow
def test_cli_fused_linear_ce_below_the_full_logits(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(BIG_VOCAB_LLAMA))
    shape = ["--batch-size", "2", "--seq-len", "256", "--gpu", "h100", "--json", "--no-cache"]
    peaks = {}
    for loss in ("auto", "fused-linear-ce"):
        code, out, err = run_cli("estimate", str(config), "--loss", loss, *shape)
        assert code == 0, err
        data = json.loads(out)
        assert data["workload"]["loss"] == loss
        peaks[loss] = data["tensor_peak_bytes"]
        assert (chunked_loss.FUSED_ASSUMPTION in data["assumptions"]) == (loss == "fused-linear-ce")
    assert peaks["fused-linear-ce"] < peaks["auto"]


def test_cli_masked_lm_is_one_line_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_BERT))
    code, _, err = run_cli("estimate", str(config), "--batch-size", "2", "--seq-len", "16", "--loss", "fused-linear-ce")
    assert code == 2
    message = err.strip()
    assert "fused-linear-ce" in message and "--loss auto" in message and len(message.splitlines()) == 1
