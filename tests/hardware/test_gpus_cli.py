"""`gpuplan gpus`: list / show / compare, text and JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuplan.cli.main import main
from gpuplan.hardware import all_gpus, list_gpus

Capture = pytest.CaptureFixture[str]


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    code = main(["gpus", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_prints_every_gpu_with_units(capsys: Capture) -> None:
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    header = out.splitlines()[0]
    assert "memory GiB" in header and "bandwidth GB/s" in header and "bf16 TFLOPS" in header
    for gpu in all_gpus():
        assert f"\n{gpu.id} " in out
    assert f"{len(all_gpus())} GPUs. TFLOPS are dense" in out


def test_list_json_matches_the_library(capsys: Capture) -> None:
    argv = ("--vendor", "nvidia", "--min-memory-gib", "40", "--sort", "bandwidth", "--json")
    code, out, _ = run(capsys, *argv)
    data = json.loads(out)
    expected = list_gpus(vendor="nvidia", min_memory_gib=40, sort="bandwidth", include_packages=True)
    assert code == 0
    assert [g["id"] for g in data["gpus"]] == [g.id for g in expected]
    assert data["count"] == len(expected)
    assert data["filters"]["min_memory_gib"] == 40
    assert "dense" in data["conventions"]["tensor_rates"]


def test_list_with_dtype_adds_its_column(capsys: Capture) -> None:
    code, out, _ = run(capsys, "--dtype", "fp4")
    assert code == 0 and "fp4 TFLOPS" in out.splitlines()[0]
    assert "B200" in out and "RTX-4090" not in out


def test_list_with_mig_includes_slices(capsys: Capture) -> None:
    code, out, _ = run(capsys, "--mig", "--arch", "ampere", "--json")
    ids = [g["id"] for g in json.loads(out)["gpus"]]
    assert code == 0 and "A100-80GB-SXM:1g.10gb" in ids and "A30:4g.24gb" in ids


def test_no_match_exits_1(capsys: Capture) -> None:
    code, out, _ = run(capsys, "--min-memory-gib", "100000")
    assert code == 1 and "no catalog GPU passes these filters" in out
    code, out, _ = run(capsys, "--min-memory-gib", "100000", "--json")
    assert code == 1 and json.loads(out)["count"] == 0


def test_show_prints_one_card_with_sources(capsys: Capture) -> None:
    code, out, _ = run(capsys, "show", "NVIDIA H100 80GB HBM3")
    assert code == 0
    assert out.startswith("H100-SXM  NVIDIA H100 SXM5 80GB")
    assert "source" in out and "retrieved" in out and "81559MiB" in out
    assert "H100-SXM:1g.10gb" in out  # MIG profiles listed


def test_show_geforce_explains_the_half_rate(capsys: Capture) -> None:
    _, out, _ = run(capsys, "show", "RTX 4090")
    assert "FP32-accumulate at half rate" in out and "330.3" in out


def test_show_json(capsys: Capture) -> None:
    code, out, _ = run(capsys, "show", "A100-80GB 3g.40gb", "--json")
    gpu = json.loads(out)["gpu"]
    assert code == 0 and gpu["id"] == "A100-80GB-SXM:3g.40gb" and gpu["mig_parent"] == "A100-80GB-SXM"


def test_compare_side_by_side(capsys: Capture) -> None:
    code, out, _ = run(capsys, "compare", "H100", "A100-80GB-SXM", "RTX-4090")
    assert code == 0
    header = out.splitlines()[0]
    assert header.split() == ["H100-SXM", "A100-80GB-SXM", "RTX-4090"]
    bf16 = next(line for line in out.splitlines() if line.startswith("bf16 TFLOPS"))
    assert bf16.split()[2:] == ["989.4", "312", "165.2"]


def test_compare_json(capsys: Capture) -> None:
    code, out, _ = run(capsys, "compare", "T4", "L4", "--json")
    assert code == 0 and [g["id"] for g in json.loads(out)["gpus"]] == ["T4", "L4"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "H100-SMX"], "gpuplan gpus: error: unknown GPU 'H100-SMX'; did you mean H100-SXM"),
        (["show", "A100"], "gpuplan gpus: error: ambiguous GPU 'A100': it matches A100-40GB-PCIe"),
        (["compare", "H100", "B2000"], "gpuplan gpus: error: unknown GPU 'B2000'"),
        (["show"], "gpuplan gpus: error: `gpuplan gpus show` takes exactly one GPU"),
        (["show", "H100", "A100-80GB"], "gpuplan gpus: error: `gpuplan gpus show` takes exactly one GPU"),
        (["compare", "H100"], "gpuplan gpus: error: `gpuplan gpus compare` needs two or more GPUs"),
        (["H100"], "gpuplan gpus: error: unknown gpus action 'H100' (allowed: list, show, compare); "
                   "to see one GPU: gpuplan gpus show H100"),
        (["list", "H100"], "gpuplan gpus: error: `gpuplan gpus` takes no GPU names (got H100)"),
        (["--arch", "kepler"], "gpuplan gpus: error: no catalog GPU has architecture 'kepler' (known: "),
        (["--vendor", "nvdia"], "gpuplan gpus: error: unknown vendor 'nvdia'; did you mean nvidia?"),
        (["--min-memory-gib", "-1"], "gpuplan gpus: error: --min-memory-gib must be >= 0, got -1.0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys: Capture, argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--dtype", "fp64"], "argument --dtype: invalid choice: 'fp64'"),
     (["--sort", "speed"], "argument --sort: invalid choice: 'speed'"),
     (["--min-memory-gib", "lots"], "argument --min-memory-gib: expected a number, got 'lots'")],
)
def test_bad_flags_exit_2_in_one_line(capsys: Capture, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gpus", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and err.count("\n") == 1


def test_gpus_verb_does_not_import_torch() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from gpuplan.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['gpus', 'show', 'H100']) == 0\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_compute_capability_is_never_shown_empty(capsys: Capture) -> None:
    """Issue 9 item 13: Apple parts printed 'compute capability )' (old main joined an empty tuple)."""
    without = [g for g in all_gpus() if g.compute_capability is None]
    assert {g.vendor_key for g in without} >= {"apple"}
    for gpu in all_gpus():
        label = gpu.compute_capability_label
        assert label and "()" not in label and not label.startswith(")")
        assert (label == f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}" if gpu.compute_capability
                else label == f"none: {gpu.vendor}, not a CUDA GPU")
    code, out, _ = run(capsys, "show", "M4-Max")
    assert code == 0 and "compute capability none: Apple, not a CUDA GPU" in out


def test_bf16_refusal_on_an_apple_part_names_what_it_is(capsys: Capture) -> None:
    from pathlib import Path

    tiny = Path(__file__).parent.parent / "fixtures" / "tiny_models.py"
    code = main(["estimate", f"{tiny}:mlp,mlp_inputs", "--gpu", "M4-Max", "--precision", "bf16"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "M4-Max has no bfloat16 support (compute capability none: Apple, not a CUDA GPU)" in err


def test_list_filters_given_to_show_get_a_note(capsys: Capture) -> None:
    """Issue 9 friction: flags that do not apply were silently ignored (here: list filters on `show`)."""
    code, out, err = run(capsys, "show", "H100-SXM", "--vendor", "amd", "--mig")
    assert code == 0 and out.startswith("H100-SXM")
    assert err == "gpuplan gpus: note: --vendor, --mig apply to the list only; ignored by `gpuplan gpus show`\n"
    code, _, err = run(capsys, "--vendor", "amd")
    assert code == 0 and err == ""
