"""One "this workload on this GPU" check (hardware/support.py), called by every verb before any trace:
the same refused inputs give the same one-line refusal from estimate, fit and plan (issue 19 item 2; before
it, ``plan --precision fp8 --gpu T4 --gpus 2`` answered with a step time while estimate refused)."""

from __future__ import annotations

import contextlib
import io
from typing import cast, get_args

import pytest

from gpuplan.cli.main import main
from gpuplan.hardware import all_gpus
from gpuplan.hardware.support import refusal
from gpuplan.workload import Precision, Workload

# (flags, a GPU that lacks what they need): fp8 below compute capability 8.9, bf16 and QLoRA without bf16
REFUSED = [
    (("--precision", "fp8"), "T4"),
    (("--precision", "fp8"), "A100-80GB-SXM"),
    (("--precision", "amp-bf16"), "T4"),
    (("--precision", "bf16"), "V100-SXM2-32GB"),
    (("--peft", "qlora", "--precision", "amp-fp16"), "T4"),
    # MXFP8 / NVFP4 training below Blackwell's block-scaled tensor cores (gpuplan/scaled_formats.py)
    (("--precision", "nvfp4"), "H100-SXM"),
    (("--precision", "mxfp8"), "H100-SXM"),
]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


# every verb that trains a workload on a named GPU (measure runs on the device present: the same check, through
# estimate, on its catalog id; recommend lists a refused GPU as left out, with the refusal's short reason)
VERBS = {
    "estimate": lambda gpu: ["estimate", "gpt2", "--mode", "train", "--gpu", gpu],
    "fit": lambda gpu: ["fit", "gpt2", "--mode", "train", "--gpu", gpu],
    "plan": lambda gpu: ["plan", "gpt2", "--gpus", "2", "--gpu", gpu],
    "sweep": lambda gpu: ["sweep", "gpt2", "--gpus", "2", "--gpu", gpu, "--no-store"],
    "rl": lambda gpu: ["rl", "gpt2", "--gpus", "2", "--gpu", gpu, "--prompts-per-step", "4", "--prompt-len", "16",
                       "--response-len", "16"],
}


def _web(verb: str, flags: tuple[str, ...], gpu: str) -> str:
    """The web page's answer (ui/jobs.execute, the library call the command line makes) for the same inputs."""
    from gpuplan.models.catalog import catalog_names
    from gpuplan.ui.jobs import execute
    from gpuplan.ui.query import parse_query

    params = {"model": "gpt2", "verb": verb, "gpu": gpu, **({"gpus": "2"} if verb == "plan" else {})}
    params.update({flags[i].removeprefix("--").replace("-", "_"): flags[i + 1] for i in range(0, len(flags), 2)})
    query = parse_query(params, tuple(catalog_names()))
    assert query is not None
    outcome = execute(query, None)
    assert outcome.status == 400, outcome
    return f"{outcome.error}\n"


@pytest.mark.parametrize("case", REFUSED, ids=[f"{' '.join(f)} on {g}" for f, g in REFUSED])
def test_every_verb_gives_the_same_refusal(case: tuple[tuple[str, ...], str]) -> None:
    """Every refused input (all of them, not a sample) on every verb and the web page: one line, word for word."""
    flags, gpu = case
    answers = {verb: _run([*argv(gpu), *flags]) for verb, argv in VERBS.items()}
    # after the verb's own prefix ("gpuplan plan: error: "), word for word the same line
    errors = {verb: err.removeprefix(f"gpuplan {verb}: error: ") for verb, (code, out, err) in answers.items()}
    assert all(code == 2 and out == "" for code, out, _ in answers.values()), answers
    errors.update({f"web {verb}": _web(verb, flags, gpu) for verb in ("estimate", "fit", "plan")})
    assert len(set(errors.values())) == 1, errors
    line = next(iter(errors.values()))
    assert line.count("\n") == 1 and gpu in line


@pytest.mark.parametrize("gpu", [g.id for g in all_gpus()])
def test_refusal_follows_the_catalog_row(gpu: str) -> None:
    """Every catalog GPU: refused exactly where its row lacks the feature (fp8 by compute capability)."""
    row = next(g for g in all_gpus() if g.id == gpu)
    bf16 = refusal(Workload(precision="amp-bf16"), row)
    assert (bf16 is None) == row.has_bf16
    qlora = refusal(Workload(peft="qlora", precision="amp-fp16"), row)
    assert (qlora is None) == row.has_bf16
    fp8 = refusal(Workload(precision="fp8"), row)
    cc = row.compute_capability
    assert (fp8 is None) == (cc is None or tuple(cc) >= (8, 9))
    assert refusal(Workload(precision="amp-fp16"), row) is None


@pytest.mark.parametrize("precision", ["fp8", "mxfp8", "nvfp4"])
@pytest.mark.parametrize("gpu", [g.id for g in all_gpus()])
def test_a_refusal_suggests_a_precision_the_same_gpu_runs(precision: Precision, gpu: str) -> None:
    """The "use --precision X" of a scaled-format refusal names what this GPU runs: a T4 told to use amp-bf16
    would only get the next refusal. Every suggested value, run on the same GPU, is accepted."""
    hw = next(g for g in all_gpus() if g.id == gpu)
    found = refusal(Workload(mode="train", precision=precision), hw)
    if found is None:
        return
    suggested = found.message.split("use --precision ", 1)[1].split(", or pick", 1)[0].split(" or ")
    assert suggested, found.message
    for value in suggested:
        assert value in get_args(Precision), (value, found.message)
        assert refusal(Workload(mode="train", precision=cast(Precision, value)), hw) is None, (value, found.message)
