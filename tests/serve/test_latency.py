"""The queueing model of a ``--rate`` answer (serve/latency.py) and the latency targets (--ttft-slo,
--itl-slo): exact against the closed forms they reduce to, properties over random loads."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.serve import serve
from gpuplan.serve.latency import erlang_c, largest_batch, replicas_for, slot_wait

SMALL = {"max_num_batched_tokens": 256, "max_num_seqs": 16}


def test_erlang_c_closed_forms() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: an arrival waits with probability ρ
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # c = 2, a = 1: 2a²/(2(2 − a) + 2a + a²)... = 1/3
    assert erlang_c(4, 0.0) == 0.0 and erlang_c(4, 4.0) == 1.0


def test_md1_mean_wait_is_pollaczek_khinchine() -> None:
    # one slot, deterministic service S: Wq = ρ S / (2 (1 − ρ)) exactly (P-K; Allen–Cunneen is exact at c = 1)
    rate, service = 3.0, 0.2
    rho = rate * service
    assert slot_wait(rate, 1, service).wait_mean_s == pytest.approx(rho * service / (2 * (1 - rho)))


def test_unstable_queue_and_unreachable_target() -> None:
    assert math.isinf(slot_wait(10.0, 2, 1.0).wait_p99_s)  # ρ = 5
    assert replicas_for(10.0, 4, 1.0, ttft_s=0.3, ttft_slo_s=0.2) == 0  # the prefill alone misses it
    assert replicas_for(10.0, 4, 1.0, ttft_s=0.1, ttft_slo_s=None) == 3  # stable: 10 × 1 / 4 = 2.5 → 3


def test_largest_batch() -> None:
    assert largest_batch(100, lambda b: b * 3 <= 100) == 33
    assert largest_batch(100, lambda b: False) == 0
    assert largest_batch(10, lambda b: True) == 10


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.1, 500), servers=st.integers(1, 256), service=st.floats(0.01, 60),
       slo=st.floats(0.05, 5))
def test_a_tighter_ttft_target_never_needs_fewer_replicas(rate: float, servers: int, service: float,
                                                          slo: float) -> None:
    loose = replicas_for(rate, servers, service, ttft_s=0.01, ttft_slo_s=slo * 2)
    tight = replicas_for(rate, servers, service, ttft_s=0.01, ttft_slo_s=slo)
    assert tight == 0 or tight >= loose
    free = replicas_for(rate, servers, service, ttft_s=0.01, ttft_slo_s=None)
    assert loose == 0 or loose >= free


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.1, 100), servers=st.integers(1, 64), service=st.floats(0.01, 10))
def test_p99_wait_at_least_p50(rate: float, servers: int, service: float) -> None:
    w = slot_wait(rate, servers, service)
    assert w.wait_p99_s >= w.wait_p50_s >= 0


def test_itl_target_picks_the_largest_batch_meeting_it(tiny_gpt2: str) -> None:
    free = serve(tiny_gpt2, gpu="T4", context=128, **SMALL)
    target = free.decode.seconds * 0.999  # just under the full batch's step: a smaller batch meets it
    r = serve(tiny_gpt2, gpu="T4", context=128, itl_slo=target, **SMALL)
    assert r.slo_concurrency is not None and 1 <= r.slo_concurrency < free.decode_batch
    assert r.decode_batch == r.slo_concurrency and r.decode.seconds <= target
    over = serve(tiny_gpt2, gpu="T4", context=128, concurrency=r.slo_concurrency + 1, itl_slo=target, **SMALL)
    assert over.decode.seconds > target and over.slo_met is False


def test_rate_with_a_ttft_target_adds_replicas_until_p99_meets_it(tiny_gpt2: str) -> None:
    base = serve(tiny_gpt2, gpu="H100-SXM", input_len=64, output_len=32, rate=2000.0, **SMALL)
    assert base.rate is not None and base.rate.replicas > 0
    target = base.rate.ttft_s * 1.05  # barely above one prefill: the queue must be nearly empty
    r = serve(tiny_gpt2, gpu="H100-SXM", input_len=64, output_len=32, rate=2000.0, ttft_slo=target, **SMALL)
    assert r.rate is not None and r.rate.replicas >= base.rate.replicas
    assert r.rate.ttft_p99_s <= target and r.slo_met is True
    assert r.rate.e2e_p99_s >= r.rate.e2e_p50_s >= r.rate.ttft_p50_s


@pytest.mark.parametrize("flag", ["--ttft-slo", "--itl-slo"])
def test_bad_latency_target_is_one_line_exit_2(tiny_gpt2: str, flag: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        main(["serve", tiny_gpt2, "--gpu", "H100-SXM", flag, "0"])
    assert exit_.value.code == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert f"argument {flag}: expected a positive, finite number" in err.getvalue()


def test_slo_json(tiny_gpt2: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["serve", tiny_gpt2, "--gpu", "H100-SXM", "--context", "64", "--itl-slo", "5", "--json",
              "--max-num-batched-tokens", "256", "--max-num-seqs", "16"])
    data = json.loads(out.getvalue())
    assert data["slo"] == {"ttft_slo_s": None, "itl_slo_s": 5.0, "concurrency": 16, "met": True}
