"""``recommend --mode serve``: per GPU type the fewest GPUs one of whose layouts holds the target, ranked; one
JSON object."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from gpuplan.advise.recommend import recommend_serve
from gpuplan.cli.main import main
from gpuplan.hardware import resolve_gpu
from gpuplan.serve import serve


@pytest.mark.slow
def test_fewest_gpus_that_hold_the_concurrency(tiny_gpt2: str) -> None:
    gpus = [g for g in (resolve_gpu(n) for n in ("H100-SXM", "T4", "L4")) if g is not None]
    one = serve(tiny_gpt2, gpu="T4", context=128)
    target = one.max_concurrency + 1  # one T4 holds one sequence too few
    result = recommend_serve(tiny_gpt2, context=128, concurrency=target, gpus=gpus, max_gpus=4)
    by_gpu = {c.gpu.id: c for c in result.candidates_in}
    # two T4s (the layout search: tp × dp = 2, the best by goodput per GPU), one H100
    assert by_gpu["T4"].gpus == 2 and by_gpu["T4"].tp * by_gpu["T4"].dp == 2 and by_gpu["H100-SXM"].gpus == 1
    for c in result.candidates_in:  # the asked concurrency spread over the DP ranks
        assert serve(tiny_gpt2, gpu=c.gpu, tp=c.tp, dp=c.dp, context=128,
                     concurrency=-(-target // c.dp)).concurrency_fits
    assert [c.gpus for c in result.candidates_in] == sorted(c.gpus for c in result.candidates_in)
    assert result.traces >= 1


def test_cli_mode_serve_json(tiny_gpt2: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["recommend", tiny_gpt2, "--mode", "serve", "--input-len", "32", "--output-len", "16",
                     "--rate", "10", "--max-gpus", "2", "--json"])
    assert code == 0
    data = json.loads(out.getvalue())
    assert data["mode"] == "serve" and data["recommendations"]
    assert all(c["gpus"] == c["tp"] * c["dp"] * c["replicas"] for c in data["recommendations"])
