"""The published throughput measurements the efficiency factors are fitted on, and how gpuplan
models each of them.

Rows come from ``shared/reference/calibration.csv`` (ids kept; the values are copied here so the
package does not depend on that file, and ``calibrate_fit`` checks them against it when present).

* ``hf-bertl-*-tput``: Hugging Face "Efficient Training on a Single GPU" (Jan 2022): bert-large-uncased
  sequence classification, batch 4 × 512 tokens, HF Trainer on a V100-SXM2-16GB. That Trainer used
  transformers' own AdamW (a per-parameter Python loop: ``optimizer_impl="for-loop"``), zeroed the
  gradients with ``model.zero_grad()`` (set_to_none=False before torch 2.0: ``zero_grad="zeros"``)
  and BERT had no SDPA then (``attention="eager"``). ``train_samples_per_second`` includes Trainer
  overheads (data collation, logging), which the cost model does not add.
* ``kor-t5-22b-*`` (Korthikanti et al. 2022 Table 5, GPT 22B, TP 8 on a DGX A100) are Megatron-LM runs:
  the planner costs them as Megatron runs them (parallel/engine.py: its fused scale-mask-softmax, its
  GEMM rate ``megatron.gemm_scale``, fitted on exactly these rows by scripts/fit_engine_factors.py) and
  tests/parallel/test_megatron.py holds them within 10%. They are not rows of this fit: costed here
  as HF's eager attention (a chain of scale / mask / fp32 upcast / softmax / downcast kernels over the
  b·a·s² scores, ~0.25 s of a 1.1-1.4 s step per rank that Megatron runs as one kernel), they had pulled
  the shared large-GEMM fraction to 0.98 of the dense peak, above any public GEMM benchmark (issue 17).
* ``lam-rn50-fp32-a100sxm``: Lambda deeplearning-benchmark, NVIDIA DeepLearningExamples ResNet-50
  trainer (SGD with momentum, synthetic data, NCHW), batch 640 per GPU, fp32: the convolutions run in
  TF32 (cuDNN's default), costed as such.
* ``lam-rn50-amp-8xa100sxm``: the same trainer with ``--amp --static-loss-scale 256``, batch 1280
  per GPU, NCHW (the trainer's default ``--memory-format``), synthetic data, DDP over 8 A100-80GB-SXM
  (``config_pytorch_80GB.sh`` / ``config_pytorch_8x80GB.sh`` @357c49a7; the run script exports
  ``NCCL_P2P_DISABLE=1``). Costed as 8 × one GPU's step: the DDP gradient all-reduce (25.6M fp32
  gradients in 25 MiB buckets) overlaps the backward, and the planner puts what shows below 1 % of
  the step (tests/parallel/test_published_multi_gpu.py). The only public AMP CNN training row: it
  fits the fp16 backward-convolution factor, and that fit absorbs the run's 90.4 % scaling
  (11439 vs 8 × 1582), which no modelled cost explains.
* ``timm-infer-rn50-4090`` / ``timm-infer-vitb-4090``: timm benchmark.py inference, AMP fp16, NCHW,
  batch 1024 on an RTX 4090 (torch 2.4, eager), traced on timm's own modules (no weights); timm
  runs ViT attention through SDPA (flash in fp16), costed as flash.
* ``lam-bertl-fp16-a100sxm``: Lambda / DeepLearningExamples BERT-large SQuAD fine-tuning, batch 112
  × 384 tokens, fp16 on an A100-80GB-SXM; that modeling code runs attention as matmul + softmax
  (eager) and the optimizer as one fused kernel. Its fp16 is in fact apex amp O2 (lambdal/deeplearning-benchmark
  pytorch/scripts/patch/run_squad.py @aa5addb6: ``amp.initialize(..., opt_level="O2")`` + apex
  FusedAdam): the model itself in fp16, no autocast, so the b·a·s² attention scores go through softmax
  and dropout in fp16 (``precision="fp16"``, as perf/data/public/lambda_dlbench.csv costs the same
  table), not in fp32 as this row's torch.autocast trace runs them. The trainer itself runs at about
  half the modelled rate in its own README (scripts/accuracy.py ``NOT_FITTED``: its public rows are
  never fitted); this row stays in the shared fit as issue 10 chose it, at -9.6% with the capped factors.
  What that trainer runs beyond the kernels of a plain ``BertForQuestionAnswering`` step, from its source
  (issue 17, enc17): its BertModel adds the padding mask to every layer's attention scores
  (``dle_squad_source_class``: the ``bert-*-qa`` sources feed an ``attention_mask``), and its figure divides
  ``max_steps`` steps of samples by the time of ``max_steps + 1`` (``DLE_SQUAD_STEPS_TIMED_PER_COUNTED``).
* ``ibm-a100-7b``: Llama-2-7B, 2 × 4096 tokens per GPU, bf16 mixed, FlashAttention-2, no activation
  checkpointing, FSDP over 128 A100s; ``mpt-a100-125m-8``: MPT-125M (GPT-2 block, 768 × 12, vocab
  50368, flash attention), micro-batch 40 × grad-accum 2 × 2048 tokens per GPU, FSDP over 8 A100s.
  Both are costed as the single-GPU step (the per-layer FSDP gathers of these runs overlap the
  compute; slice B's planner reproduces the communication rows).
* ``meg-t1-*`` (Narayanan 2021) are not modelled: pipeline/data parallel runs whose micro-batch is
  not stated. ``tune-8b-*-tps`` (torchtune LoRA/QLoRA under torch.compile) wait for the fine-tuning
  trace (issue 11).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuplan.perf.efficiency import Efficiency

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.trace.step import TracedStep
    from gpuplan.workload import Workload

BERT_LARGE_SEQ_CLS_CONFIG: dict[str, Any] = {
    # bert-large-uncased config.json (huggingface.co/bert-large-uncased), seq-cls head with 2 labels
    "architectures": ["BertForSequenceClassification"],
    "model_type": "bert",
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "vocab_size": 30522,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "layer_norm_eps": 1e-12,
    "num_labels": 2,
}
@dataclass(frozen=True, slots=True)
class Case:
    row_id: str
    published: float
    unit: str
    model: str
    gpu: str
    workload: dict[str, Any]
    quantity: str = "samples_per_s"
    """samples_per_s | tokens_per_s"""
    source: str = ""
    family: str = "bert"
    """Model family the accuracy targets are stated per: bert | decoder-llm | cnn | vit."""
    dp: int = 1
    """Data-parallel (DDP) ranks the published throughput is the total of; each runs the traced step."""

    @property
    def steps_timed_per_counted(self) -> float:
        """Optimizer steps the published figure's timer covered per step its sample count counts."""
        return steps_timed_per_counted(self.model)


DLE_SQUAD_STEPS_TIMED_PER_COUNTED = 101 / 100
"""NVIDIA DeepLearningExamples ``run_squad.py`` as Lambda runs it (lambdal/deeplearning-benchmark
pytorch/scripts/patch/run_squad.py @aa5addb6, the ``bert_*_squad`` rows of pytorch-train-throughput*.csv and
``lam-bertl-fp16-a100sxm``) breaks out of its loop only once ``global_step > max_steps``: with the
``--max_steps=100`` of its configs (pytorch/scripts/config_v1/config_pytorch_80GB.sh, config_v2/) it runs
and times 101 optimizer steps (``train_start`` to the loop's end, the first step's warm-up included) and
reports ``train_batch_size × max_steps × gpus / time``. Its own logs agree: the steady tqdm rate is 1.01×
the reported figure (pytorch/results/1cc_H100_80GB_SXM5_v1/PyTorch_bert_large_squad_FP16: 2.86 it/s ×
112 = 320 sequences/s against 311.0 reported). A row's measured step is the time over the steps timed."""

DLE_SQUAD_MODELS = frozenset({"bert-large-qa", "bert-base-qa"})
"""The model sources of that trainer's rows (``model_source``): BERT as its modeling.py runs it."""


def steps_timed_per_counted(model: str) -> float:
    """Steps a published rate's timer covered per step it counts, by the row's model source (one rule for
    perf/calibration.py's rows and scripts/accuracy.py's public rows): 1 except that trainer's."""
    return DLE_SQUAD_STEPS_TIMED_PER_COUNTED if model in DLE_SQUAD_MODELS else 1.0


CASES: tuple[Case, ...] = (
    Case(
        "hf-bertl-vanilla-tput",
        8.86,
        "samples/s",
        "bert-large-seq-cls",
        "V100-SXM2-16GB",
        dict(
            mode="train",
            batch_size=4,
            seq_len=512,
            precision="fp32",
            optimizer="adamw",
            optimizer_impl="for-loop",
            zero_grad="zeros",
            attention="eager",
        ),
        source="HF perf_train_gpu_one.mdx @0016acf7 (calibration.csv hf-bertl-vanilla-tput)",
    ),
    Case(
        "hf-bertl-fp16-tput",
        18.64,
        "samples/s",
        "bert-large-seq-cls",
        "V100-SXM2-16GB",
        dict(
            mode="train",
            batch_size=4,
            seq_len=512,
            precision="amp-fp16",
            optimizer="adamw",
            optimizer_impl="for-loop",
            zero_grad="zeros",
            attention="eager",
        ),
        source="HF perf_train_gpu_one.mdx @0016acf7 (calibration.csv hf-bertl-fp16-tput)",
    ),
    Case(
        "lam-rn50-fp32-a100sxm",
        1066,
        "images/s",
        "resnet50",
        "A100-80GB-SXM",
        dict(mode="train", batch_size=640, image_size=224, precision="fp32", optimizer="sgd-momentum"),
        source="lambdal/deeplearning-benchmark pytorch-train-throughput-fp32.csv @0551cb70 (calibration.csv)",
        family="cnn",
    ),
    Case(
        "lam-rn50-amp-8xa100sxm",
        11439,
        "images/s (total)",
        "resnet50",
        "A100-80GB-SXM",
        dict(mode="train", batch_size=1280, image_size=224, precision="amp-fp16", optimizer="sgd-momentum"),
        dp=8,
        source="lambdal/deeplearning-benchmark pytorch-train-throughput-fp16.csv @0551cb70 (calibration.csv)",
        family="cnn",
    ),
    Case(
        "timm-infer-rn50-4090",
        4217.6,
        "images/s",
        "timm:resnet50",
        "RTX-4090",
        dict(mode="infer", batch_size=1024, image_size=224, precision="amp-fp16"),
        source="timm results/benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv @aa4b5850 (calibration.csv)",
        family="cnn",
    ),
    Case(
        "timm-infer-vitb-4090",
        2787.15,
        "images/s",
        "timm:vit_base_patch16_224",
        "RTX-4090",
        dict(mode="infer", batch_size=1024, image_size=224, precision="amp-fp16", attention="flash"),
        source="timm results/benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv @aa4b5850 (calibration.csv)",
        family="vit",
    ),
    Case(
        "lam-bertl-fp16-a100sxm",
        152,
        "sequences/s",
        "bert-large-qa",
        "A100-80GB-SXM",
        dict(mode="train", batch_size=112, seq_len=384, precision="amp-fp16", optimizer="adamw",
             optimizer_impl="fused", attention="eager"),
        source="lambdal/deeplearning-benchmark pytorch-train-throughput-fp16.csv @0551cb70 (calibration.csv)",
        family="bert",
    ),
    Case(
        "ibm-a100-7b",
        3700,
        "tokens/s/GPU",
        "llama-2-7b",
        "A100-80GB-SXM",
        dict(mode="train", batch_size=2, seq_len=4096, precision="amp-bf16", optimizer="adamw",
             optimizer_impl="fused", attention="flash"),
        quantity="tokens_per_s",
        source="PyTorch blog 'Maximizing training throughput using PyTorch FSDP' 2024-03-13, Table 1 (calibration.csv)",
        family="decoder-llm",
    ),
    Case(
        "mpt-a100-125m-8",
        142830,
        "tokens/s/GPU",
        "mpt-125m",
        "A100-80GB-SXM",
        dict(mode="train", batch_size=40, grad_accum=2, seq_len=2048, precision="amp-bf16", optimizer="adamw",
             optimizer_impl="fused", attention="flash"),
        quantity="tokens_per_s",
        source="mosaicml/llm-foundry scripts/train/benchmarking/README.md @061f2c7c (calibration.csv)",
        family="decoder-llm",
    ),
)


BERT_LARGE_QA_CONFIG: dict[str, Any] = {
    **BERT_LARGE_SEQ_CLS_CONFIG,
    "architectures": ["BertForQuestionAnswering"],
}
del BERT_LARGE_QA_CONFIG["num_labels"]

BERT_BASE_QA_CONFIG: dict[str, Any] = {
    # bert-base-uncased config.json (huggingface.co/bert-base-uncased): 768 × 12 layers, 12 heads, 3072 FFN;
    # the Lambda / DeepLearningExamples SQuAD rows (perf/data/public/lambda_dlbench.csv)
    **BERT_LARGE_QA_CONFIG,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
}

LLAMA_2_7B_CONFIG: dict[str, Any] = {
    # meta-llama/Llama-2-7b-hf config.json
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

MPT_125M_CONFIG: dict[str, Any] = {
    # llm-foundry scripts/train/yamls/pretrain/mpt-125m.yaml: d_model 768, n_heads 12, n_layers 12,
    # expansion_ratio 4, max_seq_len 2048, vocab 50368; a GPT-2 block of the same sizes
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_positions": 2048,
    "n_ctx": 2048,
    "vocab_size": 50368,
    "activation_function": "gelu",
}


@lru_cache(maxsize=1)
def dle_squad_source_class() -> type:
    """The Hugging Face BERT of the ``bert-*-qa`` sources fed as DeepLearningExamples'
    SQuAD trainer feeds its own BERT. Its modeling.py (LambdaLabsML/DeepLearningExamples branch lambda/benchmark
    @bca2927e, PyTorch/LanguageModeling/BERT/modeling.py, what Lambda's runs mount) turns the features'
    ``input_mask`` into an additive (batch, 1, 1, seq) mask and adds it to every layer's scores
    (``attention_scores = attention_scores + attention_mask``, BertSelfAttention.forward), and run_squad.py
    always passes it (``model(input_ids, segment_ids, input_mask)``; SQuAD features are padded to
    ``max_seq_length`` 384): one more pass over the b·a·s² scores per layer than an unmasked step. An
    all-ones ``attention_mask`` makes transformers' eager BERT run that add (the values do not change the
    kernels)."""
    import torch

    from gpuplan.models.sources import HFConfigSource

    class DLESquadSource(HFConfigSource):
        def inputs(self, module: Any, workload: Workload) -> Any:
            got = super().inputs(module, workload)
            ids = got.kwargs["input_ids"]
            got.kwargs["attention_mask"] = torch.ones(ids.shape, dtype=torch.long)
            return got

    return DLESquadSource


def model_source(name: str) -> Any:
    from gpuplan.models.sources import HFConfigSource, resolve_model

    if name.startswith("timm:") or name in ("resnet50", "vit_b_16"):
        return resolve_model(name)  # timm / torchvision builders on fake tensors, no weights
    if name == "bert-large-qa":
        return dle_squad_source_class()(
            "bert-large-uncased (question answering)", BERT_LARGE_QA_CONFIG, task="question-answering",
            default_seq_len=384,
        )
    if name == "bert-base-qa":
        return dle_squad_source_class()(
            "bert-base-uncased (question answering)", BERT_BASE_QA_CONFIG, task="question-answering",
            default_seq_len=384,
        )
    if name == "llama-2-7b":
        return HFConfigSource("Llama-2-7B", LLAMA_2_7B_CONFIG, task="causal-lm", default_seq_len=4096)
    if name == "mpt-125m":
        return HFConfigSource("MPT-125M", MPT_125M_CONFIG, task="causal-lm", default_seq_len=2048)

    if name == "bert-large-seq-cls":
        return HFConfigSource(
            "bert-large-uncased (sequence classification)",
            BERT_LARGE_SEQ_CLS_CONFIG,
            task="sequence-classification",
            default_seq_len=512,
        )
    raise KeyError(name)


def trace_case(case: Case) -> tuple[TracedStep, Workload, GPU]:
    from gpuplan.hardware import get_gpu
    from gpuplan.trace.step import trace_step
    from gpuplan.workload import make_workload

    gpu = get_gpu(case.gpu)
    workload = make_workload(**case.workload)
    step = trace_step(model_source(case.model), workload, compute_capability=gpu.compute_capability or (9, 0))
    return step, workload, gpu


def predict(case: Case, step: TracedStep, workload: Workload, gpu: GPU, eff: Efficiency) -> float:
    """The modelled value of ``case.quantity`` in the row's unit."""
    from gpuplan.perf.step_time import step_time

    # the published figure's timer covered more steps than its sample count (DLE_SQUAD_STEPS_TIMED_PER_COUNTED)
    t = step_time(step, gpu, workload, efficiency=eff).total_s * case.steps_timed_per_counted
    if case.quantity == "samples_per_s":
        return case.dp * workload.batch_size * workload.grad_accum / t
    if case.quantity == "tokens_per_s":
        return workload.batch_size * workload.grad_accum * (workload.seq_len or 0) / t
    raise ValueError(f"{case.row_id}: quantity {case.quantity!r} is not costed here (samples_per_s | tokens_per_s)")
