"""Issue #9 regressions of the planner: the sequence length as traced (item 1), an explicit
--checkpointing is never overridden (item 8), --emit implements the plan or refuses (item 9),
numeric flags refuse nan/inf/negative (item 13), and every plan flag value runs end to end."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
import tomllib
import yaml
from tests.fixtures.plans import single_layout_plan

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.parallel.emit import EMITTERS, emit, engines_for
from gpuplan.parallel.layout import FSDP2, Layout, MegatronDDP, Zero

# A user's config.json: position table of 131072 (Llama 3.1's), 4 blocks so pp 2 and 4 divide them.
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "max_position_embeddings": 131072,
}


@pytest.fixture(scope="module")
def config_json(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("user-model") / "config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return str(path)


@pytest.fixture(autouse=True)
def _no_user_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's one-line usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- item 1: tokens per sample are the trace's, not the position table's --------------------------


@pytest.mark.slow
def test_plan_tokens_per_s_agrees_with_estimate_without_seq_len(
    capsys: pytest.CaptureFixture[str], config_json: str
) -> None:
    """Old main: the planner read the private ``_default_seq_len`` (unset for a user config.json) and
    fell back to max_position_embeddings = 131072 tokens per sample while the trace ran 2048 (the
    default, capped): 64× the tokens/s of ``estimate``."""
    code, out, _ = _run(capsys, "estimate", config_json, "--gpu", "H100-SXM", "--json")
    est = json.loads(out)
    code, out, _ = _run(capsys, "plan", config_json, "--gpus", "1", "--gpu", "H100-SXM", "--json")
    pl = json.loads(out)
    assert code == 0 and pl["fits"]
    # one GPU, one micro-batch: the plan's step is the estimate's step (DDP over 1 rank adds nothing);
    # they are different arithmetic on the same trace, so agree within 5 % (measured: 0.3 %)
    assert pl["step_time_s"] == pytest.approx(est["step_time_s"], rel=0.05)
    assert pl["tokens_per_s_per_gpu"] == pytest.approx(est["tokens_per_s"], rel=0.05)
    # and exactly: global batch × tokens as traced (2048, HFConfigSource's cap) / step / GPUs
    assert pl["tokens_per_s_per_gpu"] == pytest.approx(1 * 2048 / pl["step_time_s"])


# ---- item 8: an explicit --checkpointing is the user's answer ---------------------------------------


@pytest.mark.slow
def test_explicit_checkpointing_none_is_never_overridden(config_json: str) -> None:
    """Old main: with --checkpointing none and nothing fitting, the plan silently became full
    checkpointing. The GPU is shrunk between the two peaks, both taken from the plans themselves."""
    import dataclasses

    from gpuplan.hardware import get_gpu
    from gpuplan.parallel.plan import plan

    # micro-batch fixed: otherwise a smaller micro-batch with accumulation is the planner's first answer
    kw: dict[str, Any] = dict(gpus=1, batch_size=16, micro_batch_size=16, seq_len=256, precision="amp-bf16")
    big = get_gpu("H100-SXM")
    none = plan(config_json, gpu=big, checkpointing="none", **kw)
    full = plan(config_json, gpu=big, checkpointing="full", **kw)
    assert full.per_gpu_peak_bytes < none.per_gpu_peak_bytes
    # usable memory is what CUDA reports (else the catalog total): shrink both to between the peaks
    room = big.usable_memory_bytes - (full.per_gpu_peak_bytes + none.per_gpu_peak_bytes) // 2
    small = dataclasses.replace(
        big,
        id="H100-small",
        memory_total_bytes=big.memory_total_bytes - room,
        cuda_total_memory_bytes=(big.cuda_total_memory_bytes or big.memory_total_bytes) - room,
    )
    assert full.per_gpu_peak_bytes <= small.usable_memory_bytes < none.per_gpu_peak_bytes

    given = plan(config_json, gpu=small, checkpointing="none", **kw)
    assert not given.fits and given.best.layout.checkpointing == "none"
    assert given.per_gpu_peak_bytes == none.per_gpu_peak_bytes  # what is needed, as given
    alt, why = given.alternatives[0]
    assert alt.layout.checkpointing == "full" and alt.per_gpu_peak_bytes <= small.usable_memory_bytes
    assert "--checkpointing full" in why
    # left open (no checkpointing= given), the planner may choose full checkpointing
    searched = plan(config_json, gpu=small, gpus=1, batch_size=16, micro_batch_size=16, seq_len=256,
                    precision="amp-bf16")
    assert searched.fits and searched.best.layout.checkpointing == "full"


# ---- item 9: every layout × every --emit value ------------------------------------------------------

LAYOUTS: dict[str, Layout] = {
    "ddp": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1),
    "zero1": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(1)),
    "zero2": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=2, sharding=Zero(2)),
    "zero2-offload": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
                            sharding=Zero(2, offload_optimizer=True)),
    "zero3": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(3), checkpointing="full"),
    "zero3-offload": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
                            sharding=Zero(3, offload_optimizer=True)),
    "zero3-offload-all": Layout(
        dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
        sharding=Zero(3, offload_optimizer=True, offload_params=True)
    ),
    "zero1-tp-pp": Layout(dp=8, tp=2, pp=2, micro_batch_size=1, grad_accum=4, sharding=Zero(1)),
    "fsdp2": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2()),
    "fsdp2-no-reshard": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
                               sharding=FSDP2(reshard_after_forward=False)),
    "hsdp": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(hsdp_shard=8)),
    "fsdp2-tp": Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2()),
    "ddp-tp": Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, checkpointing="selective"),
    "torch-pp": Layout(dp=8, tp=1, pp=4, micro_batch_size=1, grad_accum=8),
    "torch-interleaved": Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, schedule="interleaved",
                                virtual_stages=3),
    "megatron": Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8,
                       sharding=MegatronDDP(), checkpointing="full"),
    "megatron-tp": Layout(dp=4, tp=8, pp=1, micro_batch_size=2, grad_accum=1, sharding=MegatronDDP(),
                          sequence_parallel=False),
    "megatron-interleaved": Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, sharding=MegatronDDP(),
                                   schedule="interleaved", virtual_stages=3),
}




def _check_deepspeed(lay: Layout, cfg: dict[str, Any]) -> None:
    z = cfg["zero_optimization"]
    assert z["stage"] == lay.zero
    assert ("offload_optimizer" in z) == lay.offload_optimizer
    assert ("offload_param" in z) == lay.offload_params
    assert cfg["train_batch_size"] == lay.global_batch
    assert cfg["train_micro_batch_size_per_gpu"] == lay.micro_batch_size
    assert cfg["gradient_accumulation_steps"] == lay.grad_accum
    assert ("activation_checkpointing" in cfg) == (lay.checkpointing != "none")


def _check_accelerate(lay: Layout, cfg: dict[str, Any]) -> None:
    assert cfg["num_processes"] == lay.gpus
    if lay.engine == "deepspeed":
        ds = cfg["deepspeed_config"]
        assert cfg["distributed_type"] == "DEEPSPEED" and ds["zero_stage"] == lay.zero
        assert (ds["offload_optimizer_device"] == "cpu") == lay.offload_optimizer
        assert (ds["offload_param_device"] == "cpu") == lay.offload_params
        assert ds["gradient_accumulation_steps"] == lay.grad_accum
        return
    if lay.engine == "megatron":
        m = cfg["megatron_lm_config"]
        assert cfg["distributed_type"] == "MEGATRON_LM"
        assert (m["megatron_lm_tp_degree"], m["megatron_lm_pp_degree"]) == (lay.tp, lay.pp)
        assert m["megatron_lm_num_micro_batches"] == lay.grad_accum
        assert m["megatron_lm_sequence_parallelism"] == (lay.tp > 1 and lay.sequence_parallel)
        assert m["megatron_lm_recompute_activations"] == (lay.checkpointing != "none")
        return
    s = lay.sharding
    assert cfg["distributed_type"] == ("FSDP" if isinstance(s, FSDP2) else "MULTI_GPU")
    if isinstance(s, FSDP2):
        assert cfg["fsdp_config"]["fsdp_reshard_after_forward"] == s.reshard_after_forward
        assert cfg["fsdp_config"]["fsdp_activation_checkpointing"] == (lay.checkpointing != "none")
    par = cfg.get("parallelism_config", {})
    assert par.get("parallelism_config_tp_size", 1) == lay.tp
    shard = lay.shard_group if lay.fsdp else 1
    assert par.get("parallelism_config_dp_shard_size", shard) == shard
    assert par.get("parallelism_config_dp_replicate_size", lay.dp // shard) == lay.dp // shard


def _check_torchrun(lay: Layout, text: str) -> None:
    if lay.engine == "megatron":
        assert "pretrain_gpt.py" in text
        assert f"--tensor-model-parallel-size {lay.tp}" in text and f"--pipeline-model-parallel-size {lay.pp}" in text
        assert ("--sequence-parallel" in text) == (lay.tp > 1 and lay.sequence_parallel)
        assert ("--num-layers-per-virtual-pipeline-stage" in text) == (lay.schedule == "interleaved")
        assert ("--recompute-granularity" in text) == (lay.checkpointing != "none")
        return
    code = text.split("\n", 2)[2]
    ast.parse(code)
    mesh = code.split('init_device_mesh("cuda", (', 1)[1].split(")", 1)[0]
    dims = [int(d) for d in mesh.replace(",", " ").split()]
    assert dims[-1] == lay.tp and _product(dims) == lay.gpus
    assert ("fully_shard(block" in code) == lay.fsdp
    assert ("DistributedDataParallel" in code) == (not lay.fsdp and lay.pp == 1)
    assert ("parallelize_module(block" in code) == (lay.tp > 1)
    assert ("SequenceParallel()," in code) == (lay.tp > 1 and lay.sequence_parallel)
    if isinstance(lay.sharding, FSDP2):
        assert f"reshard_after_forward={lay.sharding.reshard_after_forward}" in code
        assert ('"dp_replicate", "dp_shard"' in code) == (lay.sharding.name == "hsdp")
    if lay.pp > 1:
        sched = "ScheduleInterleaved1F1B" if lay.schedule == "interleaved" else "Schedule1F1B"
        assert sched in code and f"N_MICROBATCHES = {lay.grad_accum}" in code
    assert ("checkpoint_wrapper" in code) == (lay.checkpointing != "none")


def _check_torchtitan(lay: Layout, cfg: dict[str, Any]) -> None:
    par, train = cfg["parallelism"], cfg["training"]
    dims = ("data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
            "pipeline_parallel_degree", "context_parallel_degree")
    assert _product([par[d] for d in dims]) == lay.gpus and par["tensor_parallel_degree"] == lay.tp
    assert par["data_parallel_shard_degree"] == (lay.shard_group if lay.fsdp else 1)
    # torchtitan's gradient accumulation: global / (local · dp); under a pipeline local holds every micro-batch
    steps = train["global_batch_size"] // (train["local_batch_size"] * lay.dp)
    assert train["global_batch_size"] == lay.global_batch and steps == (1 if lay.pp > 1 else lay.grad_accum)
    if lay.pp > 1:
        chunks = par["module_fqns_per_model_part"]
        assert len(chunks) == lay.pp * (lay.virtual_stages if lay.schedule == "interleaved" else 1)
        assert sum(n.startswith("layers.") for c in chunks for n in c) == 12  # gpt2's blocks, each once
        assert par["pipeline_parallel_microbatch_size"] == lay.micro_batch_size
    ac = cfg["activation_checkpoint"]
    assert ac["mode"] == {"none": "none", "full": "full", "selective-op": "selective"}[lay.checkpointing]


def _product(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@pytest.mark.parametrize("kind", EMITTERS)
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_emit_implements_the_layout_or_refuses(gpt2_ctx: Any, name: str, kind: str) -> None:
    """Old main: ZeRO-3 + CPU offload was emitted for torchrun as plain DDP, an FSDP2 plan for
    DeepSpeed as ZeRO stage 0 (and TP/PP layouts as a config without them)."""
    lay = LAYOUTS[name]
    p = single_layout_plan(gpt2_ctx, lay)
    if kind not in engines_for(lay):
        with pytest.raises(ConfigError) as err:
            emit(p, kind)
        msg = str(err.value)
        assert ("\n" not in msg and f"--emit {kind}" in msg) or "no --emit value" in msg
        for other in engines_for(lay):
            assert f"--emit {other}" in msg  # names the engine that can
        return
    text = emit(p, kind)
    if kind == "deepspeed":
        _check_deepspeed(lay, json.loads(text))
    elif kind == "accelerate":
        _check_accelerate(lay, yaml.safe_load(text))
    elif kind == "torchtitan":
        _check_torchtitan(lay, tomllib.loads(text))
    else:
        _check_torchrun(lay, text)


def test_every_layout_has_an_engine_or_a_reason(gpt2_ctx: Any) -> None:
    # only DeepSpeed ZeRO with tp/pp > 1 (Megatron-DeepSpeed) has no emitter here
    for name, lay in LAYOUTS.items():
        assert engines_for(lay) or (lay.engine == "deepspeed" and (lay.tp > 1 or lay.pp > 1)), name


def test_emit_refusal_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], config_json: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before the trace (old main traced for a minute, then refused without the plan): the flags allow
    no layout the engine's output implements."""
    def no_trace(*_: Any, **__: Any) -> Any:
        raise AssertionError("traced before refusing --emit")

    monkeypatch.setattr("gpuplan.trace.step._trace_source", no_trace)
    code, out, err = _run(
        capsys, "plan", config_json, "--gpus", "4", "--gpu", "H100-SXM", "--zero", "3", "--tp", "1",
        "--emit", "torchrun"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--emit deepspeed or --emit accelerate" in err
    code, out, err = _run(
        capsys, "plan", config_json, "--gpus", "4", "--gpu", "H100-SXM", "--fsdp", "--emit", "deepspeed", "--json"
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "--emit torchrun" in err
    assert "the flags allow only layouts like" in err


@pytest.mark.slow
def test_emit_searches_the_layouts_its_engine_implements(capsys: pytest.CaptureFixture[str], config_json: str) -> None:
    """Old main: `plan --emit X` searched every engine, found a layout X cannot run and refused it after the
    trace. The search keeps to what the engine implements: its best layout, emitted, the same as fixing it."""
    argv = ["plan", config_json, "--gpus", "4", "--gpu", "H100-SXM", "--json"]
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and json.loads(out)["parallelism"]["engine"] == "deepspeed"  # the unrestricted best
    code, out, err = _run(capsys, *argv, "--emit", "torchrun")
    d = json.loads(out)
    assert code == 0, err
    assert d["parallelism"]["engine"] in ("torch", "megatron") and d["emit"]["engine"] == "torchrun"
    assert "torchrun" in d["emit"]["text"]
    assert any("--emit torchrun: only the layouts" in a for a in d["assumptions"])
    fixed = ["--tp", str(d["parallelism"]["tp"]), "--pp", str(d["parallelism"]["pp"])]
    code, out, _ = _run(capsys, *argv, *fixed, "--fsdp" if d["parallelism"]["fsdp"] else "--megatron")
    assert json.loads(out)["layout"] == d["layout"]


# ---- item 13: numeric flags ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e400", "abc"])
def test_inter_node_gbps_refuses_non_positive_or_non_finite(capsys: pytest.CaptureFixture[str], value: str) -> None:
    """Old main: nan and inf were accepted (nan made every cross-node collective take nan seconds)."""
    code, out, err = _run(capsys, "plan", "gpt2", "--gpus", "16", "--gpu", "H100-SXM", f"--inter-node-gbps={value}")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--inter-node-gbps" in err


@pytest.mark.parametrize(
    "flag",
    ["--gpus", "--nodes", "--gpus-per-node", "--tp", "--pp", "--dp", "--global-batch-size", "--micro-batch-size"],
)
@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "1e400"])
def test_count_flags_refuse_zero_negative_and_non_finite(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """Old main: --nodes 0 / --gpus-per-node 0 divided by zero (internal error); --micro-batch-size 0
    and --global-batch-size 0 were taken as 'not given'."""
    argv = ["plan", "gpt2", "--gpu", "H100-SXM"] + ([] if flag == "--gpus" else ["--gpus", "8"])
    code, out, err = _run(capsys, *argv, f"{flag}={value}")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err


def test_library_refuses_nan_bandwidth() -> None:
    from gpuplan.hardware import get_gpu
    from gpuplan.parallel.topology import make_topology

    for bad in (float("nan"), float("inf"), 0.0, -5.0):
        with pytest.raises(ConfigError, match="--inter-node-gbps"):
            make_topology(get_gpu("H100-SXM"), 16, inter_node_gbps=bad)


# ---- every plan flag value end to end on a tiny model -------------------------------------------

_BASE = ("--gpus", "8", "--gpu", "H100-SXM", "--batch-size", "2", "--seq-len", "64")
FLAG_RUNS: list[tuple[str, ...]] = [
    (),
    ("--json",),
    ("--nodes", "2"),
    ("--gpus-per-node", "4", "--inter-node-gbps", "100"),
    ("--tp", "2", "--pp", "2", "--dp", "2"),
    ("--tp", "2", "--no-sequence-parallel"),
    ("--pp", "4", "--global-batch-size", "64", "--micro-batch-size", "1"),
    *((("--zero", z)) for z in ("0", "1", "2", "3")),
    ("--fsdp",),
    ("--megatron", "--tp", "2"),
    *(("--checkpointing", c) for c in ("none", "full", "selective")),
    *(("--precision", p) for p in ("fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16")),
    *(("--optimizer", o) for o in ("adamw", "adam", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "none")),
    *(("--attention", a) for a in ("auto", "eager", "sdpa-math", "sdpa-efficient", "flash")),
    *(("--optimizer-impl", i) for i in ("auto", "foreach", "fused", "for-loop")),
    *(("--zero-grad", z) for z in ("set-to-none", "zeros")),
    *(("--loss", v) for v in ("auto", "cross-entropy", "mean", "chunked-ce")),
    ("--grad-accum", "2"),
    ("--emit", "torchrun", "--fsdp"),
    ("--emit", "deepspeed", "--zero", "2", "--tp", "1", "--pp", "1"),
    ("--emit", "accelerate", "--zero", "3", "--tp", "1", "--pp", "1", "--json"),
]


@pytest.mark.slow
@pytest.mark.parametrize("extra", FLAG_RUNS, ids=lambda a: " ".join(a) or "defaults")
def test_every_plan_flag_runs_end_to_end(
    capsys: pytest.CaptureFixture[str], config_json: str, extra: tuple[str, ...]
) -> None:
    precision = () if "--precision" in extra else ("--precision", "amp-bf16")
    if ("--attention" in extra and extra[1] == "flash") or ("--optimizer" in extra and extra[1] == "adamw-8bit"):
        precision = ("--precision", "amp-bf16")
    code, out, err = _run(capsys, "plan", config_json, *_BASE, *precision, *extra)
    if code == 2:  # a refusal is one line naming the value, never a traceback
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
        pytest.fail(f"refused: {err.strip()}")
    assert code == 0, err
    if "--json" in extra:
        d = json.loads(out)
        assert d["fits"] and d["parallelism"]["dp"] * d["parallelism"]["tp"] * d["parallelism"]["pp"] == 8
        if "--emit" in extra:
            assert d["emit"]["engine"] == extra[extra.index("--emit") + 1] and d["emit"]["text"]
    else:
        assert "best layout:" in out
    for flag, field in (("--tp", "tp="), ("--pp", "pp="), ("--dp", "dp=")):
        if flag in extra and "--json" not in extra:
            assert f"{field}{extra[extra.index(flag) + 1]} " in out.split("best layout:", 1)[1].split("\n", 1)[0]


@pytest.mark.parametrize("mode", ["infer", "generate"])
def test_plan_refuses_non_training_modes(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    code, out, err = _run(capsys, "plan", "gpt2", "--gpus", "2", "--gpu", "H100-SXM", "--mode", mode)
    assert code == 2 and out == "" and "--mode train" in err and err.count("\n") == 1
