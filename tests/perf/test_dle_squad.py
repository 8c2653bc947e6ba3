"""What NVIDIA DeepLearningExamples' BERT SQuAD trainer runs, as the Lambda rows and calibration's
lam-bertl-fp16-a100sxm cost it (perf/calibration.py): its padding mask over every layer's attention scores,
and a rate whose timer covers one step more than it counts (issue 17, enc17)."""

from __future__ import annotations

import pytest

from gpuplan.models.sources import HFConfigSource
from gpuplan.perf.calibration import (
    BERT_BASE_QA_CONFIG,
    CASES,
    DLE_SQUAD_STEPS_TIMED_PER_COUNTED,
    model_source,
    steps_timed_per_counted,
)
from gpuplan.perf.roofline import short_name
from gpuplan.workload import make_workload
from tests.fixtures.scripts import load_script

pytest.importorskip("transformers")


def _score_adds(source: HFConfigSource, batch: int, seq: int) -> tuple[int, int]:
    """(forward adds writing a whole fp16 score tensor, layers) of a traced fp16 training step."""
    from gpuplan.trace.step import trace_step

    w = make_workload(mode="train", batch_size=batch, seq_len=seq, precision="fp16", optimizer="adam",
                      optimizer_impl="fused", attention="eager")
    step = trace_step(source, w, compute_capability=(8, 0))
    heads = BERT_BASE_QA_CONFIG["num_attention_heads"]
    scores = batch * heads * seq * seq * 2  # fp16 bytes of one layer's b·a·s² scores
    adds = sum(op.count for op in step.ops
               if op.phase == "forward" and short_name(op.name) == "add" and op.bytes_written == scores)
    return adds, BERT_BASE_QA_CONFIG["num_hidden_layers"]


def test_dle_squad_bert_adds_the_padding_mask_to_every_layers_scores() -> None:
    """DeepLearningExamples' modeling.py (LambdaLabsML/DeepLearningExamples lambda/benchmark @bca2927e,
    BertSelfAttention.forward: ``attention_scores = attention_scores + attention_mask``) adds the padding mask
    run_squad.py always passes (``model(input_ids, segment_ids, input_mask)``) to the scores of every layer:
    the bert-*-qa sources run that add, a plain (unmasked) BERT step does not."""
    dle = model_source("bert-base-qa")
    plain = HFConfigSource("bert-base-uncased (question answering)", BERT_BASE_QA_CONFIG,
                           task="question-answering", default_seq_len=384)
    adds, layers = _score_adds(dle, 2, 128)
    assert adds == layers
    assert _score_adds(plain, 2, 128)[0] == 0


def test_the_trainers_rate_is_costed_over_the_steps_its_timer_covered() -> None:
    """run_squad.py (lambdal/deeplearning-benchmark pytorch/scripts/patch/run_squad.py @aa5addb6) breaks out
    when global_step > max_steps, so --max_steps=100 times 101 steps and reports batch × 100 / time; its
    logs' steady tqdm rate is 1.01× the reported one. A row of that trainer measures a step of time / 101,
    the calibration row is predicted over the same 101; other sources count what they time."""
    assert DLE_SQUAD_STEPS_TIMED_PER_COUNTED == pytest.approx(1.01)
    assert steps_timed_per_counted("bert-large-qa") == steps_timed_per_counted("bert-base-qa") == pytest.approx(1.01)
    assert steps_timed_per_counted("bert-large-seq-cls") == steps_timed_per_counted("resnet50") == 1.0
    assert {c.row_id: c.steps_timed_per_counted for c in CASES if c.steps_timed_per_counted != 1.0} == {
        "lam-bertl-fp16-a100sxm": pytest.approx(1.01)}
    accuracy = load_script("accuracy")
    row = {"value": "301.0", "gpu_count": "1", "quantity": "samples_per_s", "model": "bert-large-qa"}
    w = {"batch_size": 112}
    assert accuracy.measured_step_s(row, w) == pytest.approx(112 / 301.0 / 1.01)
    assert accuracy.measured_step_s({**row, "model": "resnet50"}, w) == pytest.approx(112 / 301.0)
