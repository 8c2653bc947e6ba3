"""The doctor / install / explain verbs through the command line: output contract and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_json_contract_on_a_recorded_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "doctor", "--json", "--facts", str(FIXTURES / "rtx5090_torch271_cu126.yaml"))
    assert code == 1  # an error-level finding
    data = json.loads(out)
    assert set(data) >= {"findings", "environment"}
    finding = data["findings"][0]
    assert set(finding) >= {"severity", "code", "message", "fix"}
    assert (finding["severity"], finding["code"]) == ("error", "ARCH_NOT_IN_WHEEL")
    assert data["environment"]["torch"]["version"] == "2.7.1+cu126"


def test_doctor_markdown_on_a_clean_recorded_environment(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "doctor", "--facts", str(FIXTURES / "h100_torch214_cu130_ok.yaml"))
    assert code == 0
    assert out.startswith("## gpuplan doctor")
    assert "| NVIDIA driver | 580.95.05 [via nvidia-smi -q] |" in out
    assert "No problems found." in out


def test_doctor_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "doctor")
    if "NO_GPU" not in out:
        pytest.skip("this machine has a GPU")
    assert code == 0
    assert "No NVIDIA driver" in out and "PyTorch can only use the CPU" in out


def test_doctor_does_not_import_torch() -> None:
    script = ("import sys, contextlib, io\nfrom gpuplan.cli.main import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n    main(['doctor', '--json'])\n"
              "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "False"


def test_doctor_record_then_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "env.yaml"
    code1, live, _ = _run(capsys, "doctor", "--json", "--record", str(record))
    code2, replay, _ = _run(capsys, "doctor", "--json", "--facts", str(record))
    assert code1 == code2
    live_data, replay_data = json.loads(live), json.loads(replay)
    assert live_data["findings"] == replay_data["findings"]
    live_data["environment"].pop("source"), replay_data["environment"].pop("source")
    assert live_data["environment"] == replay_data["environment"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["doctor", "--facts", "/no/such.yaml"], "cannot read recorded environment '/no/such.yaml'"),
        (["doctor", "--facts", "x.yaml", "--record", "y.yaml"], "--facts and --record cannot be combined"),
        (["install", "--gpu", "RTX 9999"], "unknown GPU 'RTX 9999'; did you mean"),
        (["install", "--gpu", "sm_99"], "unknown compute capability 'sm_99' (known: 3.0"),
        (["install", "--driver", "latest"], "bad --driver 'latest': expected an NVIDIA driver version"),
        (["install", "--python", "2.7"], "bad --python '2.7': expected a version like 3.12"),
        (["install", "--torch", "3.1"], "unknown --torch '3.1'"),
        (["explain", ""], "the error text is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1


def test_doctor_bad_yaml_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    code, _, err = _run(capsys, "doctor", "--facts", str(bad))
    assert code == 2 and "must be a YAML mapping, got list" in err


def test_install_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "install", "--gpu", "RTX 5090", "--driver", "570.124.06", "--python", "3.12",
                        "--os", "linux")
    assert code == 0
    assert out.splitlines()[0] == "pip install torch==2.11.0 torchvision==0.26.* --index-url " \
                                  "https://download.pytorch.org/whl/cu128"
    assert "Why: torch 2.11.0 cu128" in out and "Left out:" in out


def test_install_json_and_no_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "install", "--gpu", "K80", "--driver", "470.82.01", "--python", "3.14",
                        "--os", "linux", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False and data["command"] is None and data["excluded"]


def test_install_cpu_and_compute_capability(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "install", "--gpu", "none", "--python", "3.12", "--os", "windows")
    assert code == 0 and out.startswith("pip install torch==2.15.0 torchvision\n")
    code, out, _ = _run(capsys, "install", "--gpu", "sm_70", "--driver", "550.54.15", "--python", "3.11",
                        "--os", "linux")
    assert code == 0 and "/whl/cu126" in out.splitlines()[0]


def test_explain_argument_stdin_and_unknown(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = _run(capsys, "explain", "AssertionError: Torch not compiled with CUDA enabled")
    assert code == 0 and out.startswith("CPU-only PyTorch installed  [not-compiled-with-cuda]")
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("RuntimeError: CUDA error: device-side assert triggered\n"))
    code, out, _ = _run(capsys, "explain", "-", "--json")
    assert code == 0 and json.loads(out)["family"] == "device-side-assert"
    code, out, _ = _run(capsys, "explain", "KeyError: 'foo'", "--json")
    assert code == 1 and json.loads(out) == {"recognized": False, "family": None}


def test_explain_oom_answers_with_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    # murong-xu/CADS#4
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total "
            "capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, this process "
            "has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is allocated by PyTorch, and "
            "9.35 GiB is reserved by PyTorch but unallocated.")
    code, out, _ = _run(capsys, "explain", text)
    assert code == 0
    assert "tried to allocate        22.78 GiB" in out
    assert "at least 716.80 MiB more would have had to be free" in out  # 22.78 - 12.73 - 9.35 GiB
    assert "gpuplan fit" in out


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"\xff\xfe\x00platform: {}\n", "is not UTF-8 text (byte 0xff at offset 0)"),
        (b"[" * 100_000, "is not valid YAML"),
        (b"a: " + b"[" * 70 + b"]" * 70 + b"\n", "nests deeper than 64 levels"),
        (b"&a [*a]", "must be a YAML mapping, got list"),
    ],
)
def test_doctor_hostile_facts_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 data: bytes, needle: str) -> None:
    """Issue 9 item 20: binary and deeply nested --facts files were internal errors on old main."""
    path = tmp_path / "facts.yaml"
    path.write_bytes(data)
    code, out, err = _run(capsys, "doctor", "--facts", str(path))
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "internal error" not in err


def _garble(value: object, rng: object) -> object:
    import random

    assert isinstance(rng, random.Random)
    choices: list[object] = [None, 7, -1, 3.5, True, [1, [2]], {"k": {"j": 1}}, "", "x" * 5000, "\x00\xff",
                             "9" * 400, "nan", "-1.-1", {1: 2}]
    return rng.choice(choices) if rng.random() < 0.5 else value


def _mutate(node: object, rng: object) -> object:
    if isinstance(node, dict):
        return {k: _mutate(_garble(v, rng), rng) for k, v in node.items()}
    if isinstance(node, list):
        return [_mutate(_garble(v, rng), rng) for v in node]
    return node


@pytest.mark.slow
def test_doctor_survives_garbled_recorded_environments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A seeded fuzz over the recorded-environment corpus: every value replaced at random by a wrong type,
    a huge or binary string, or a nested structure. 3 mutants of each fixture, both output formats: no
    internal error, exit 0/1 (findings) or 2 (bad input), --json stdout is one JSON object or empty."""
    import random

    import yaml

    rng = random.Random(9)
    runs = 0
    for fixture in sorted(FIXTURES.glob("*.yaml")):
        base = yaml.safe_load(fixture.read_text(encoding="utf-8"))
        for i in range(3):
            path = tmp_path / f"{fixture.stem}-{i}.yaml"
            path.write_text(yaml.safe_dump(_mutate(base, rng)), encoding="utf-8")
            for fmt in ([], ["--json"]):
                code, out, err = _run(capsys, "doctor", "--facts", str(path), *fmt)
                runs += 1
                assert "internal error" not in err and "Traceback" not in err, (path.name, err)
                assert code in (0, 1, 2), (path.name, code, err)
                if fmt and code != 2:
                    json.loads(out)
                if code == 2:
                    assert out == "" and err.count("\n") == 1
    assert runs >= 150


def test_doctor_import_torch_with_facts_gets_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 9 friction: --import-torch was silently ignored with --facts."""
    code, out, err = _run(capsys, "doctor", "--json", "--import-torch", "--facts",
                          str(FIXTURES / "h100_torch214_cu130_ok.yaml"))
    assert code == 0 and json.loads(out)
    assert err == ("gpuplan doctor: note: --import-torch reads this machine; ignored with --facts (the file has "
                   "what was recorded)\n")
