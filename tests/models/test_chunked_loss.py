"""``--loss chunked-ce``: torchtune's chunked output projection + ``CEWithChunkedOutputLoss``.

Sources: pytorch/torchtune ``torchtune/modules/transformer.py`` (``TransformerDecoder.chunked_output``:
the output head applied to ``h.chunk(8, dim=1)``, every chunk kept) and
``torchtune/modules/loss/ce_chunked_output_loss.py`` (each chunk upcast to fp32 alone, summed cross
entropy over labels != -100, divided by their count), read at commit 10ff7cd; the recipe
``recipes/lora_finetune_single_device.py`` shifts the labels left and pads with -100.

* Exact accounting: a real CPU run of a tiny Llama with the chunked loss, tracked storage by
  storage (the harness of tests/trace/test_exact_accounting.py), equals the fake trace (tolerance
  1%, measured 0 bytes apart), plain and with PEFT LoRA under bf16 + checkpointing.
* The loss is the same number transformers' own causal-LM loss gives (both are the mean
  next-token cross entropy): relative tolerance 1e-5 in fp32.
* What torchtune keeps alive: the forward's own logits hold no bytes; the loss keeps all eight
  chunks' logits in the model's dtype and upcasts one chunk at a time.
* Property (hypothesis): any batch and length, the same mean next-token cross entropy.
* Bad input: a model that is not a causal LM is refused in one line.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.estimate import estimate
from gpuplan.models import chunked_loss
from gpuplan.models.base import Inputs
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.runner import StepRunner, Target
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_BERT, TINY_LLAMA

TOLERANCE = 0.01
# a vocabulary large next to the hidden size, as in Llama 3 (128,256 vs 4,096), so the loss matters
BIG_VOCAB_LLAMA = {**TINY_LLAMA, "vocab_size": 4096}
SOURCE = HFConfigSource("tiny-llama-4k-vocab", BIG_VOCAB_LLAMA)

CASES = {
    "plain-fp32": Workload(batch_size=2, seq_len=64, loss="chunked-ce"),
    "lora-bf16-checkpointing": Workload(batch_size=2, seq_len=64, loss="chunked-ce", peft="lora", precision="bf16",
                                        checkpointing="full", lora_targets=("q_proj", "v_proj", "o_proj")),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_fake_trace_matches_real_cpu_run(case: str) -> None:
    workload = CASES[case]
    real = trace_step(SOURCE, workload, cuda=False, fake=False)
    fake = trace_step(SOURCE, workload, cuda=False, fake=True)
    error = fake.tensor_peak_bytes / real.tensor_peak_bytes - 1
    assert abs(error) <= TOLERANCE, (f"{case}: fake {fake.tensor_peak_bytes} vs real {real.tensor_peak_bytes} "
                                     f"({error:+.2%}); peaks in {fake.peak_phase} / {real.peak_phase}")


def _real_model_and_inputs(loss: str) -> tuple[torch.nn.Module, Inputs]:
    workload = Workload(batch_size=2, seq_len=40, loss=loss)  # 40 tokens: 8 chunks of 5
    model = StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()
    torch.manual_seed(0)
    return model, SOURCE.inputs(model, workload)


def test_loss_equals_the_mean_next_token_cross_entropy() -> None:
    """What transformers' ForCausalLMLoss computes on the full fp32 logits (shift by one, mean)."""
    model, inputs = _real_model_and_inputs("chunked-ce")
    workload = Workload(batch_size=2, seq_len=40, loss="chunked-ce")
    output = model(**inputs.kwargs, use_cache=False)
    assert output.logits.numel() == 0  # the forward's own logits hold no bytes: the loss projects
    chunked = SOURCE.loss(model, output, inputs, workload)
    ids = inputs.kwargs["input_ids"]
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state
        logits = torch.nn.functional.linear(hidden, model.get_output_embeddings().weight).float()
        expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     ids[:, 1:].reshape(-1))
    torch.testing.assert_close(chunked.detach(), expected, rtol=1e-5, atol=0.0)


@functools.cache
def _fp32_model() -> torch.nn.Module:
    workload = Workload(batch_size=1, seq_len=8, loss="chunked-ce")
    model = StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()
    SOURCE.inputs(model, workload)  # installs the head tap once
    return model


@given(batch=st.integers(1, 3), seq_len=st.integers(2, 37), seed=st.integers(0, 2**16))
@pytest.mark.slow
@settings(max_examples=15, deadline=None)
def test_any_shape_gives_the_mean_next_token_cross_entropy(batch: int, seq_len: int, seed: int) -> None:
    """Invariant: for any batch and length (chunks of unequal size, or empty when seq_len < 8),
    the chunked loss is the plain mean next-token cross entropy."""
    model = _fp32_model()
    workload = Workload(batch_size=batch, seq_len=seq_len, loss="chunked-ce")
    torch.manual_seed(seed)
    inputs = SOURCE.inputs(model, workload)
    ids = inputs.kwargs["input_ids"]
    with torch.no_grad():
        chunked = SOURCE.loss(model, model(**inputs.kwargs, use_cache=False), inputs, workload)
        hidden = model.model(input_ids=ids).last_hidden_state
        logits = torch.nn.functional.linear(hidden, model.get_output_embeddings().weight)
        expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     ids[:, 1:].reshape(-1))
    torch.testing.assert_close(chunked, expected, rtol=1e-5, atol=1e-6)


def test_chunks_in_model_dtype_each_upcast_alone() -> None:
    """torchtune's shapes: 8 chunk logits in bf16 alive together, one fp32 copy per cross entropy."""
    workload = Workload(batch_size=2, seq_len=40, loss="chunked-ce", precision="bf16")
    model = StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()
    inputs = SOURCE.inputs(model, workload)
    seen: list[tuple[torch.dtype, tuple[int, ...]]] = []
    head = model.get_output_embeddings()
    handle = head.register_forward_hook(lambda _m, _a, out: seen.append((out.dtype, tuple(out.shape))))
    try:
        output = model(**inputs.kwargs, use_cache=False)
        SOURCE.loss(model, output, inputs, workload)
    finally:
        handle.remove()
    vocab = BIG_VOCAB_LLAMA["vocab_size"]
    assert seen == [(torch.bfloat16, (2, 0, vocab))] + [(torch.bfloat16, (2, 5, vocab))] * 8


def test_labels_shift_left_and_ignore_the_last_position() -> None:
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    assert chunked_loss.shifted_labels(ids).tolist() == [[6, 7, -100], [9, 10, -100]]


@pytest.mark.slow
def test_chunked_loss_peaks_lower_than_full_vocabulary_fp32_loss() -> None:
    """transformers' loss holds the whole (batch, seq, vocab) in fp32 and its log-probabilities;
    the chunked loss holds the bf16 logits and one fp32 chunk at a time (eager: each chunk's
    fp32 log-probabilities stay saved for backward)."""
    shape = dict(batch_size=2, seq_len=64, precision="bf16")
    full = estimate(SOURCE, workload=Workload(**shape, loss="auto"))  # type: ignore[arg-type]
    chunked = estimate(SOURCE, workload=Workload(**shape, loss="chunked-ce"))  # type: ignore[arg-type]
    assert chunked.step.tensor_peak_bytes < full.step.tensor_peak_bytes
    assert chunked.params_count == full.params_count
    assert chunked_loss.ASSUMPTION in chunked.assumptions  # eager, said so
    assert chunked_loss.ASSUMPTION not in full.assumptions


def test_not_a_causal_lm_is_refused_in_one_line() -> None:
    bert = HFConfigSource("tiny-bert", TINY_BERT)
    with pytest.raises(ConfigError, match=r"--loss chunked-ce .* masked-lm model .* --loss auto") as info:
        trace_step(bert, Workload(batch_size=2, seq_len=16, loss="chunked-ce"), cuda=False, fake=True)
    assert "\n" not in str(info.value)


def test_cli_exit_2_for_a_model_without_an_lm_head(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_BERT))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", str(config), "--batch-size", "2", "--seq-len", "16", "--loss", "chunked-ce"])
    assert code == 2
    message = err.getvalue().strip()
    assert "chunked-ce" in message and len(message.splitlines()) == 1
