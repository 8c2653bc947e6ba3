"""Sharding is a sum type (issue #9, "typed seams"): a combination no engine runs cannot be written,
or is refused at construction with one LayoutError line; and every layout the search produces is
implemented by the engine ``--emit`` picks for it, with the sharding it was planned with."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
import tomllib
import yaml
from tests.fixtures.plans import single_layout_plan

from gpuplan.errors import LayoutError
from gpuplan.parallel.emit import EMITTERS, emit, engines_for, refusal
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Sharding, Zero
from gpuplan.parallel.search import Constraints, candidates


def _layout(sharding: Any, *, dp: int = 8, pp: int = 1) -> Layout:
    return Layout(dp=dp, tp=1, pp=pp, micro_batch_size=1, grad_accum=4, sharding=sharding)


# ---- impossible combinations ------------------------------------------------------------------


def test_old_flag_soup_is_not_a_layout() -> None:
    """Old main: ``Layout(zero=3, fsdp=True)``, offload with no ZeRO, ``hsdp_shard`` without FSDP
    and Megatron with ZeRO-3 all constructed silently; the fields no longer exist side by side."""
    for bad in (
        {"zero": 3, "fsdp": True},
        {"offload_optimizer": True},
        {"offload_params": True},
        {"hsdp_shard": 4},
        {"megatron": True, "zero": 3},
        {"reshard_after_forward": False},
    ):
        with pytest.raises(TypeError):
            Layout(dp=8, tp=1, pp=1, micro_batch_size=1, grad_accum=1, **bad)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: Zero(0), "ZeRO stage 0 does not exist (allowed: 1, 2, 3); stage 0 is plain DDP: use DDP()"),
        (lambda: Zero(4), "ZeRO stage 4 does not exist"),
        (lambda: Zero(1, offload_params=True), "ZeRO-1 cannot offload parameters"),
        (lambda: Zero(2, offload_optimizer=True, offload_params=True), "ZeRO-2 cannot offload parameters"),
        (lambda: FSDP2(hsdp_shard=1), "HSDP shard group 1 must be at least 2 ranks"),
        (lambda: FSDP2(hsdp_shard=0), "HSDP shard group 0 must be at least 2 ranks"),
        (lambda: _layout(Zero(2), pp=2), "ZeRO-2 with pp(2) > 1 is not supported"),
        (lambda: _layout(Zero(3, offload_optimizer=True), pp=4), "ZeRO-3 with pp(4) > 1 is not supported"),
        (lambda: _layout(FSDP2(hsdp_shard=8), dp=8), "HSDP shard group 8 must divide dp(8) and be smaller"),
        (lambda: _layout(FSDP2(hsdp_shard=3), dp=8), "(8 mod 3 = 2)"),
        (lambda: _layout("zero3"), "sharding 'zero3' is not a Sharding"),
    ],
)
def test_impossible_sharding_is_one_line_layout_error(build: Any, says: str) -> None:
    with pytest.raises(LayoutError) as exc:
        build()
    assert says in str(exc.value)
    assert len(str(exc.value).splitlines()) == 1


def test_every_small_combination_is_a_layout_or_one_line_error() -> None:
    """Exhaustive over the variants' fields at small degrees: each either builds a layout whose
    engine and shard group are the variant's, or is refused with one line (never another error)."""
    built = refused = 0
    shardings: list[Any] = [DDP(), MegatronDDP()]
    shardings += [(Zero, s, o, p) for s in (0, 1, 2, 3, 4) for o in (False, True) for p in (False, True)]
    shardings += [(FSDP2, r, h) for r in (False, True) for h in (None, 1, 2, 3, 4, 8)]
    for spec in shardings:
        for dp in (1, 2, 4, 8):
            for pp in (1, 2):
                try:
                    if isinstance(spec, tuple) and spec[0] is Zero:
                        s: Sharding = Zero(spec[1], offload_optimizer=spec[2], offload_params=spec[3])
                    elif isinstance(spec, tuple):
                        s = FSDP2(reshard_after_forward=spec[1], hsdp_shard=spec[2])
                    else:
                        s = spec
                    lay = _layout(s, dp=dp, pp=pp)
                except LayoutError as exc:
                    assert len(str(exc).splitlines()) == 1
                    refused += 1
                    continue
                built += 1
                assert lay.engine == {DDP: "torch", FSDP2: "torch", Zero: "deepspeed", MegatronDDP: "megatron"}[type(s)]
                assert lay.offload_params <= (lay.zero == 3)
                assert lay.zero == (s.stage if isinstance(s, Zero) else 0)
                assert 1 <= lay.shard_group <= lay.dp and lay.dp % lay.shard_group == 0
    assert built and refused


# ---- round trip through emit's engine choice ---------------------------------------------------




def _sharding_from_emitted(kind: str, text: str) -> tuple[str, Any]:
    """Read back (engine, sharding) from what ``--emit kind`` wrote: the round trip's other half."""
    if kind == "deepspeed":
        z = json.loads(text)["zero_optimization"]
        if z["stage"] == 0:
            return "deepspeed", DDP()
        return "deepspeed", Zero(z["stage"], "offload_optimizer" in z, "offload_param" in z)
    if kind == "accelerate":
        cfg = yaml.safe_load(text)
        kind_ = cfg["distributed_type"]
        if kind_ == "DEEPSPEED":
            ds = cfg["deepspeed_config"]
            return "deepspeed", Zero(
                ds["zero_stage"], ds["offload_optimizer_device"] == "cpu", ds["offload_param_device"] == "cpu"
            )
        if kind_ == "MEGATRON_LM":
            return "megatron", MegatronDDP()
        if kind_ == "FSDP":
            par = cfg.get("parallelism_config", {})
            shard = par.get("parallelism_config_dp_shard_size")
            hsdp = shard if par.get("parallelism_config_dp_replicate_size", 1) > 1 else None
            return "torch", FSDP2(cfg["fsdp_config"]["fsdp_reshard_after_forward"], hsdp)
        return "torch", DDP()
    if kind == "torchtitan":
        par = tomllib.loads(text)["parallelism"]
        shard, replicate = par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]
        if shard == 1:
            return "torch", DDP()
        return "torch", FSDP2(par["fsdp_reshard_after_forward"] == "always", shard if replicate > 1 else None)
    if "pretrain_gpt.py" in text:
        return "megatron", MegatronDDP()
    code = text.split("\n", 2)[2]
    tree = ast.parse(code)
    if "fully_shard(block" not in code:
        return "torch", DDP()
    reshard = next(
        kw.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "fully_shard"
        for kw in node.keywords
        if kw.arg == "reshard_after_forward" and isinstance(kw.value, ast.Constant)
    )
    hsdp = None
    if '"dp_replicate", "dp_shard"' in code:
        mesh = code.split('init_device_mesh("cuda", (', 1)[1].split(")", 1)[0]
        hsdp = [int(d) for d in mesh.replace(",", " ").split()][-2]  # (dp_replicate, dp_shard, tp)
    return "torch", FSDP2(reshard, hsdp)


@pytest.mark.slow
def test_every_searched_layout_round_trips_through_emit(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    """Every layout the search yields for 8 and 16 GPUs (every sharding constraint, offload on):
    some ``--emit`` value implements it, the others refuse in one line naming those that can, and
    each emitted text reads back as the layout's own engine and sharding."""
    seen: set[tuple[str, str]] = set()
    n = 0
    for gpus in (8, 16):
        for kw in ({"offload": True}, {"megatron": True}, {"megatron": False, "zero": 1}, {"fsdp": True}):
            c = Constraints(gpus=gpus, global_batch=gpus * 4, **kw)
            for lay in candidates(c, heads=12, kv_heads=12, layers=12, gpus_per_node=8):
                if lay.micro_batch_size != 4 or (lay.schedule == "interleaved" and lay.virtual_stages != 2):
                    continue  # the sharding and engine do not depend on these; keeps the test fast
                can = engines_for(lay)
                if not can:
                    # ZeRO with tp or pp: Megatron-DeepSpeed, which --emit does not write
                    assert isinstance(lay.sharding, Zero) and (lay.tp > 1 or lay.pp > 1)
                    why = refusal(lay, "deepspeed")
                    assert why is not None and "Megatron-DeepSpeed" in why and len(why.splitlines()) == 1
                    continue
                p = single_layout_plan(gpt2_ctx, lay)
                for kind in EMITTERS:
                    if kind not in can:
                        why = refusal(lay, kind)
                        assert why is not None and len(why.splitlines()) == 1
                        assert all(f"--emit {k}" in why for k in can)
                        continue
                    engine, sharding = _sharding_from_emitted(kind, emit(p, kind))
                    assert (engine, sharding) == (lay.engine, lay.sharding), (kind, lay.describe())
                    seen.add((kind, lay.sharding.name))
                    n += 1
    # every variant was emitted by every engine that implements it
    assert {("deepspeed", f"zero{s}") for s in (1, 2, 3)} <= seen
    assert {("accelerate", name) for name in ("ddp", "zero3", "fsdp2", "hsdp", "megatron-ddp")} <= seen
    assert {("torchrun", name) for name in ("ddp", "fsdp2", "hsdp", "megatron-ddp")} <= seen
    assert {("torchtitan", name) for name in ("ddp", "fsdp2", "hsdp")} <= seen
    assert n > 50
