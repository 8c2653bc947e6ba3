"""Golden files of every verb's text output: what a user reads, pinned byte for byte.

Each case runs ``gpuplan.cli.main.main(argv)`` in-process on a tiny model (``tests/fixtures/tiny_models.py``)
written to a temporary folder, normalises what legitimately varies between runs (the temporary folder,
measured wall times) and compares stdout with ``tests/golden/<case>.txt``. A change to a renderer or to a
figure shows up here as a unified diff; when the change is intended, rewrite the files with
``pytest tests/test_golden_text.py --update-golden`` and review the diff before committing it.

The same argv with ``--json`` must print exactly one JSON object whose headline numbers (peak allocated,
step time, fits) are the text's: both renderings come from one result object.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from gpuplan.cli.main import main
from gpuplan.measure.store import Store
from gpuplan.units import MIB, bytes_to_gib, format_bytes, format_seconds
from tests.fixtures.tiny_models import TINY_GPT2

GOLDEN_DIR = Path(__file__).parent / "golden"
FACTS_DIR = Path(__file__).parent / "compat" / "fixtures"
UPDATE_HINT = "pytest tests/test_golden_text.py --update-golden"

OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity; 13.20 GiB "
               "already allocated; 1.50 GiB free; 13.50 GiB reserved in total by PyTorch)")

# Measured wall times: the only numbers in the text output that vary from run to run.
_WALL_TIMES = (
    (re.compile(r"traced once in \d+(?:\.\d+)? s"), "traced once in <wall> s"),
    (re.compile(r"(\d+ layouts) in \d+(?:\.\d+)? s \(trace \d+(?:\.\d+)? s\)"), r"\1 in <wall> s (trace <wall> s)"),
)

JsonCheck = Callable[[str, dict[str, Any]], None]


def _line(text: str, start: str) -> str:
    """The one line of ``text`` that starts with ``start`` (after indentation)."""
    hits = [line for line in text.splitlines() if line.strip().startswith(start)]
    assert len(hits) == 1, f"expected one line starting {start!r}, got {hits}"
    return hits[0].strip()


def _estimate_headline(text: str, doc: dict[str, Any]) -> None:
    assert _line(text, "peak allocated").split()[2:4] == format_bytes(doc["peak_allocated_bytes"]).split()
    if doc.get("gpu") is None:
        assert "fits" not in doc and "step time" not in text
        return
    verdict = "fits" if doc["fits"] else "does NOT fit"
    assert _line(text, f"{doc['gpu']}: ").startswith(f"{doc['gpu']}: {verdict}: ")
    step = _line(text, "step time ")
    assert step.startswith(f"step time {format_seconds(doc['step_time_s'])} ")
    low, high = doc["step_time_interval_s"]  # the 80% interval (issue 17) printed beside the time
    assert f"(80%: {format_seconds(low)}–{format_seconds(high)}, {doc['step_time_interval_basis']})   " in step


def _fit_headline(text: str, doc: dict[str, Any]) -> None:
    best = doc["max_batch"]
    assert _line(text, "largest batch that fits:").startswith(f"largest batch that fits: {doc['max_batch_size']} ")
    row = next(line for line in text.splitlines() if line.split()[3:4] == [str(best["batch_size"])])
    needs_gib, fits = row.split()[4:6]
    # the column prints as many decimals as it takes to tell the figure from the usable memory (at least 2)
    decimals = len(needs_gib.split(".")[1])
    assert decimals >= 2 and needs_gib == f"{bytes_to_gib(best['min_required_bytes']):.{decimals}f}"
    assert fits == ("yes" if best["fits"] else "no")
    assert f"  {format_seconds(best['step_time_s'])}  " in row


def _serve_headline(text: str, doc: dict[str, Any]) -> None:
    assert text.splitlines()[0].endswith(": OK" if doc["ok"] else ": WOULD NOT START")
    assert _line(text, "KV: ").startswith(f"KV: {doc['kv_bytes_per_token']:,} bytes per token per GPU ")
    assert f"{doc['kv_cache_tokens']:,} tokens in the cache" in text
    assert f"max concurrency at {doc['context']} tokens: {doc['max_concurrency']:,} sequences" in text


def _plan_headline(text: str, doc: dict[str, Any]) -> None:
    verdict = "fits" if doc["fits"] else "DOES NOT FIT"
    assert _line(text, "per-GPU peak").startswith(f"per-GPU peak {format_bytes(doc['per_gpu_peak_bytes'])} of ")
    assert _line(text, "per-GPU peak").endswith(f": {verdict}")
    step = _line(text, "step ")
    assert step.startswith(f"step {format_seconds(doc['step_time_s'])} ")
    low, high = doc["step_time_interval_s"]  # the best layout's 80% interval (issue 17)
    assert f"(80%: {format_seconds(low)}–{format_seconds(high)}, {doc['step_time_interval_basis']}), " in step
    assert _line(text, "best layout:").startswith(f"best layout: {doc['layout']}  ")


def _recommend_headline(text: str, doc: dict[str, Any]) -> None:
    first = doc["recommendations"][0]
    row = next(line for line in text.splitlines() if line.startswith("1  ")).split()  # the ranked table's first
    assert row[1:3] == [first["gpu"], str(first["count"])]
    assert f"{bytes_to_gib(first['per_gpu_bytes']):.2f}" in row
    assert " ".join(row).count(format_seconds(first["step_time_s"])) == 1


def _rl_headline(text: str, doc: dict[str, Any]) -> None:
    assert text.splitlines()[0].endswith("FITS" if doc["fits"] else "DOES NOT FIT")
    assert _line(text, "step time").startswith(f"step time {format_seconds(doc['step_time_s'])} ")
    table = text.split("step time", 1)[0]  # the phase rows: each phase's peak per GPU is the JSON's
    for name, phase in doc["phases"].items():
        assert format_bytes(phase["peak_bytes_per_gpu"]) in table, name


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    exit_code: int = 0
    headline: JsonCheck | None = None
    marks: tuple[Any, ...] = field(default=())

    def param(self) -> Any:
        return pytest.param(self, id=self.name, marks=self.marks)


_TINY = ("config.json", "--batch-size", "2", "--seq-len", "32")
_PLAN = ("plan", "config.json", "--gpus", "4", "--gpu", "A100-80GB-SXM", "--seq-len", "32",
         "--global-batch-size", "16")
_RECOMMEND = ("recommend", "config.json", "--seq-len", "32", "--top", "3")
# slow: over ~3 s for the text and --json runs together (fit traces 8 times; estimate_train pays the first
# transformers import; the emit and --prices cases repeat a trace another case already pins)
SLOW = (pytest.mark.slow,)

CASES = [
    Case("estimate_train", ("estimate", *_TINY), headline=_estimate_headline, marks=SLOW),
    Case("estimate_train_gpu", ("estimate", *_TINY, "--gpu", "T4"), headline=_estimate_headline),
    Case("estimate_infer_gpu", ("estimate", *_TINY, "--mode", "infer", "--gpu", "T4"),
         headline=_estimate_headline),
    Case("estimate_generate_gpu", ("estimate", "config.json", "--batch-size", "2", "--seq-len", "16",
                                   "--new-tokens", "16", "--mode", "generate", "--gpu", "T4"),
         headline=_estimate_headline),
    Case("estimate_does_not_fit", ("estimate", "config.json", "--batch-size", "4096", "--seq-len", "128",
                                   "--gpu", "T4"), exit_code=1, headline=_estimate_headline),
    Case("fit", ("fit", "config.json", "--gpu", "A100-80GB-SXM:1g.10gb", "--seq-len", "32"),
         headline=_fit_headline, marks=SLOW),
    Case("plan", _PLAN, headline=_plan_headline),
    Case("plan_emit_torchrun", (*_PLAN, "--fsdp", "--emit", "torchrun"), headline=_plan_headline, marks=SLOW),
    Case("plan_emit_deepspeed", (*_PLAN, "--emit", "deepspeed"), headline=_plan_headline, marks=SLOW),
    Case("plan_emit_accelerate", (*_PLAN, "--emit", "accelerate"), headline=_plan_headline, marks=SLOW),
    Case("recommend_top", _RECOMMEND, headline=_recommend_headline),
    Case("recommend_prices", (*_RECOMMEND, "--prices", "prices.csv"), headline=_recommend_headline, marks=SLOW),
    Case("serve", ("serve", "config.json", "--gpu", "L4", "--context", "64"), headline=_serve_headline),
    Case("rl", ("rl", "config.json", "--gpus", "1", "--gpu", "H100-SXM", "--algorithm", "grpo", "--prompts-per-step",
                "2", "--samples-per-prompt", "2", "--prompt-len", "16", "--response-len", "16"),
         headline=_rl_headline, marks=SLOW),
    Case("gpus", ("gpus",)),
    Case("gpus_show", ("gpus", "show", "T4")),
    Case("gpus_compare", ("gpus", "compare", "T4", "L4")),
    Case("models", ("models",)),
    Case("doctor_ok", ("doctor", "--facts", str(FACTS_DIR / "h100_torch214_cu130_ok.yaml"))),
    Case("doctor_findings", ("doctor", "--facts", str(FACTS_DIR / "rtx5090_torch201_cu118.yaml")), exit_code=1),
    Case("install", ("install", "--gpu", "RTX-4090", "--driver", "550.54.15", "--python", "3.12", "--os", "linux")),
    Case("explain_oom", ("explain", OOM_MESSAGE)),
    Case("calibrate", ("calibrate", "--store", "m.sqlite3", "--out", "calibration.json")),
]


def _store_row(context_mib: int, measured_s: float) -> dict[str, object]:
    """One stored measurement on a fixed software stack (not this machine's torch: the golden is portable)."""
    return {"model": "gpt2", "layout": None,
            "workload": {"mode": "train", "precision": "amp-bf16", "batch_size": 8},
            "environment": {"device": "cuda", "gpu_id": "H100-SXM", "device_name": "NVIDIA H100 80GB HBM3",
                            "driver_version": "570.86", "torch_version": "2.4.1+cu121", "cuda_version": "12.1"},
            "measured": {"rank": 0, "world_size": 1, "step_time_s": measured_s,
                         "cuda_context_bytes": context_mib * MIB},
            "estimated": {"step_time_s": 1.0}}


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the inputs every case names by relative path: a tiny GPT-2, prices, a store."""
    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2))
    (tmp_path / "prices.csv").write_text("T4,0.35\nL4,0.80\nA100-80GB-SXM,1.90\n")
    with Store(tmp_path / "m.sqlite3") as store:
        for context_mib, measured_s in ((500, 1.2), (520, 1.1), (510, 1.3)):
            store.add([_store_row(context_mib, measured_s)])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def normalise(text: str, tmp: Path) -> str:
    """``text`` without what varies between runs: the temporary folder and measured wall times."""
    text = text.replace(str(tmp), "<tmp>")
    for pattern, replacement in _WALL_TIMES:
        text = pattern.sub(replacement, text)
    return text


def _compare(path: Path, actual: str, update: bool) -> None:
    """``actual`` against the golden file ``path`` (rewritten instead with ``update``)."""
    if update:
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.name}: create it with `{UPDATE_HINT}` and review it", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile=f"tests/golden/{path.name}", tofile="actual output"))
        pytest.fail(f"{path.stem}: text output differs from the golden file "
                    f"(if the change is intended: `{UPDATE_HINT}`, then review the diff)\n{diff}", pytrace=False)


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_text_output_matches_golden(case: Case, workdir: Path, request: pytest.FixtureRequest) -> None:
    code, out, err = _run(list(case.argv))
    assert code == case.exit_code, f"exit {code}, stderr: {err}"
    if case.headline is not None:  # traced verbs: a golden must not pin this machine's torch/transformers
        assert torch.__version__ not in out and transformers.__version__ not in out
    _compare(GOLDEN_DIR / f"{case.name}.txt", normalise(out, workdir),
             bool(request.config.getoption("--update-golden")))

    json_code, json_out, json_err = _run([*case.argv, "--json"])
    assert json_code == code, f"--json exit {json_code}, stderr: {json_err}"
    doc = json.loads(json_out)  # the whole stdout: exactly one JSON object, nothing around it
    assert isinstance(doc, dict)
    if case.headline is not None:
        case.headline(out, doc)


def test_every_verb_has_a_golden_case() -> None:
    from gpuplan.cli.main import VERBS

    covered = {c.argv[0] for c in CASES}
    # measure and sweep run the workload for real (sweep: measure for each of a plan's top layouts): their
    # output is a measurement, not a rendering (tests/measure checks both against the per-rank accounting);
    # ui serves pages (tests/ui renders and checks them in a browser)
    assert set(VERBS) - covered == {"measure", "sweep", "ui"}


def test_no_stray_golden_files() -> None:
    assert {p.stem for p in GOLDEN_DIR.glob("*.txt")} == {c.name for c in CASES}


def test_normalise_keeps_figures_and_hides_only_wall_times(tmp_path: Path) -> None:
    text = (f"model {tmp_path}/config.json; traced once in 12.3 s\n"
            "56 layouts in 0.001 s (trace 0.9 s)\nstep 1.8 ms, needs 4.0 s of 9 GiB\n")
    assert normalise(text, tmp_path) == ("model <tmp>/config.json; traced once in <wall> s\n"
                                         "56 layouts in <wall> s (trace <wall> s)\nstep 1.8 ms, needs 4.0 s of 9 GiB\n")



def test_a_difference_fails_with_a_unified_diff_and_the_update_command(tmp_path: Path) -> None:
    golden = tmp_path / "case.txt"
    golden.write_text("peak allocated  9.53 MiB\nstep time 636 µs\n", encoding="utf-8")
    _compare(golden, "peak allocated  9.53 MiB\nstep time 636 µs\n", update=False)  # equal: passes
    with pytest.raises(pytest.fail.Exception) as failure:
        _compare(golden, "peak allocated  9.54 MiB\nstep time 636 µs\n", update=False)
    message = str(failure.value)
    assert UPDATE_HINT in message
    assert ("--- tests/golden/case.txt\n+++ actual output\n@@ -1,2 +1,2 @@\n"
            "-peak allocated  9.53 MiB\n+peak allocated  9.54 MiB\n step time 636 µs\n") in message
