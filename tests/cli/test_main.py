"""The ``gpuplan`` front end (cli/main.py, cli/_workload.py): every verb's flags, and every way a run
can fail, end in one line on stderr with the contract's exit code (0 ok, 1 "no", 2 usage) -- never a
traceback, never library logging first. Issue 9 items 18, 20 (reads), 22 (CLI part) and the friction list.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gpuplan
from gpuplan.cli import _workload
from gpuplan.cli.main import MAX_ERROR_CHARS, VERBS, build_parser, main
from gpuplan.errors import ConfigError

Capture = pytest.CaptureFixture[str]
TINY = Path(__file__).parent.parent / "fixtures" / "tiny_models.py"


@pytest.fixture(autouse=True)
def _no_user_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never read the user's calibration, config or cache."""
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def _one_line(capsys: Capture) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    parser = build_parser(verb)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[verb]


def _flags(verb: str, *, only_int: bool = False) -> list[str]:
    """Every value-taking --flag of a verb (integer-typed ones only with only_int)."""
    out = []
    for action in _verb_parser(verb)._actions:
        takes_value = action.nargs is None and action.option_strings and not isinstance(
            action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction))
        if takes_value and (not only_int or action.type is _workload._int):
            out.append(next(s for s in action.option_strings if s.startswith("--")))
    return out


# verbs whose module exists (a verb being added may be listed before its module lands)
PRESENT = [v for v, (module, _) in VERBS.items() if importlib.util.find_spec(f"gpuplan.cli.{module}")]
INT_FLAGS = [(verb, flag) for verb in PRESENT for flag in _flags(verb, only_int=True)]
VALUE_FLAGS = [(verb, flag) for verb in PRESENT for flag in _flags(verb)]


def test_every_verb_has_integer_and_value_flags_to_check() -> None:
    assert {v for v, _ in INT_FLAGS} >= {"estimate", "fit", "plan", "recommend", "measure"}
    assert len(VALUE_FLAGS) > len(INT_FLAGS) > 20


@pytest.mark.parametrize("verb", sorted({v for v, _ in INT_FLAGS}))
def test_integer_flag_garbage_is_a_usage_line(capsys: Capture, verb: str) -> None:
    """Item 18: `--batch-size 1e400` printed an OverflowError traceback; a 5,000-digit value a 5,000-char
    line. Every integer flag of the verb, each garbage value."""
    for flag in (f for v, f in INT_FLAGS if v == verb):
        for value in ("1e400", "nan", "-inf", "9" * 5000, "1e19"):
            with pytest.raises(SystemExit) as info:
                main([verb, f"{flag}={value}"])
            assert info.value.code == 2, (flag, value)
            line = _one_line(capsys)
            named = line.split(": ")[2] if line.count(": ") >= 3 else ""  # "argument -ngl/--n-gpu-layers"
            assert line.startswith(f"gpuplan {verb}: error: argument ") and flag in named.split()[-1].split("/"), line
            assert len(line) <= MAX_ERROR_CHARS, (flag, value)


@pytest.mark.parametrize("verb", sorted({v for v, _ in VALUE_FLAGS}))
def test_double_dash_value_is_a_usage_line(capsys: Capture, verb: str) -> None:
    """Item 18: `--flag=--` gave the flag an empty list (an internal TypeError later). Every value flag."""
    for flag in (f for v, f in VALUE_FLAGS if v == verb):
        assert main([verb, f"{flag}=--"]) == 2
        assert _one_line(capsys) == f"gpuplan {verb}: error: {flag} needs a value, got '--'"


def test_int_type_accepts_what_it_promises() -> None:
    assert [_workload._int(t) for t in ("8", "1e3", "1_024", " 4 ", "2.0", "-1")] == [8, 1000, 1024, 4, 2, -1]
    for bad in ("2.5", "", "four", "1e400", "nan", "inf", "0x10"):
        with pytest.raises(argparse.ArgumentTypeError):
            _workload._int(bad)
    for bad in ("nan", "inf", "-inf", "1e400", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _workload._float(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        _workload.positive_float("a bandwidth")("0")


def test_version(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"gpuplan {gpuplan.__version__}\n"


@pytest.mark.parametrize(("argv", "expected"), [
    (["estimate", "gpt2", "--bach-size", "3"], "gpuplan estimate: error: unknown flag --bach-size; did you mean "
                                               "--batch-size? (--help lists the flags)"),
    (["gpus", "--vendr=amd"], "gpuplan gpus: error: unknown flag --vendr; did you mean --vendor? "
                              "(--help lists the flags)"),
    (["gpus", "--zzzzzz"], "gpuplan gpus: error: unknown flag --zzzzzz (--help lists the flags)"),
    (["estmate", "gpt2"], "gpuplan: error: unknown command 'estmate'; did you mean estimate? (commands: "
                          + ", ".join(VERBS) + "; `gpuplan --help` says what each does)"),
])
def test_misspellings_get_a_suggestion(capsys: Capture, argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    assert _one_line(capsys) == expected


# ---- the backstop: whatever a verb raises, one line -------------------------------------------------

def _failing_verb(monkeypatch: pytest.MonkeyPatch, exc: BaseException, *, noisy: bool = False) -> None:
    """`gpuplan gpus` whose run raises ``exc`` -- after logging and warning on stderr, like torch does."""
    import gpuplan.cli.gpus as gpus_module

    def run(args: argparse.Namespace) -> int:
        if noisy:
            logger = logging.getLogger("torch._subclasses.fake_tensor")
            handler = logging.StreamHandler(sys.stderr)
            logger.addHandler(handler)
            try:
                logger.error("Traceback (most recent call last):\n  File ...\n" * 10)
                warnings.warn("a library warning", UserWarning, stacklevel=1)
            finally:
                logger.removeHandler(handler)
        raise exc

    monkeypatch.setattr(gpus_module, "run", run)


@pytest.mark.parametrize(("exc", "needle", "code"), [
    (SystemExit(3), "called sys.exit(3)", 2),
    (RecursionError("maximum recursion depth exceeded"), "recursion too deep", 2),
    (MemoryError(), "ran out of host memory", 2),
    (FileNotFoundError(2, "No such file or directory", "/nowhere/x.yaml"), "'/nowhere/x.yaml'", 2),
    (ConfigError("bad value " + "x" * 10_000), "bad value", 2),
    (ValueError("line one\nline two"), "internal error: ValueError: line one", 2),
    (KeyboardInterrupt(), "interrupted", 130),
])
def test_every_exception_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: Capture,
                                     exc: BaseException, needle: str, code: int) -> None:
    """The exceptions old main let through as tracebacks (SystemExit, RecursionError, MemoryError, OSError
    were partly internal errors; SystemExit(3) became gpuplan's exit code 3); messages capped at one line."""
    _failing_verb(monkeypatch, exc, noisy=True)
    assert main(["gpus"]) == code
    line = _one_line(capsys)
    assert needle in line and len(line) <= MAX_ERROR_CHARS


def test_library_logging_is_off_during_a_run_and_restored(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: Capture) -> None:
    """Item 22: torch logged a ~20-line traceback on stderr before gpuplan's line. Restored afterwards
    (``main()`` runs inside other programs and tests)."""
    before = logging.root.manager.disable
    _failing_verb(monkeypatch, ConfigError("the one line"), noisy=True)
    assert main(["gpus"]) == 2
    assert _one_line(capsys) == "gpuplan gpus: error: the one line"
    assert logging.root.manager.disable == before


@pytest.mark.parametrize("failing", [False, True])
def test_full_collections_are_spaced_out_during_a_command_and_restored(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: Capture, failing: bool) -> None:
    """Issue 19 item 4: each full collection walks every object torch and transformers made (9 of them, 0.6 s of a
    cold ``estimate gpt2``'s CPU on 2 busy cores); a command spaces them out, young collections unchanged, and
    gives the process its settings back, also when the verb fails."""
    import gc

    import gpuplan.cli.gpus as gpus_module
    from gpuplan.cli.main import FULL_COLLECTION_SPACING

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    def run(args: argparse.Namespace) -> int:
        seen.append(gc.get_threshold())
        if failing:
            raise ConfigError("no")
        return 0

    monkeypatch.setattr(gpus_module, "run", run)
    assert main(["gpus"]) == (2 if failing else 0)
    assert seen == [(before[0], before[1], before[2] * FULL_COLLECTION_SPACING)]
    assert gc.get_threshold() == before


def test_a_long_running_verb_keeps_the_default_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpuplan ui`` serves until stopped: its full collections stay as Python sets them."""
    import gc

    import gpuplan.cli.ui as ui_module

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    monkeypatch.setattr(ui_module, "run", lambda args: seen.append(gc.get_threshold()) or 0)
    assert main(["ui"]) == 0
    assert seen == [before]


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_verb(monkeypatch, RecursionError("deep"))
    with pytest.raises(RecursionError):
        main(["gpus", "--debug"])


# ---- flags a mode does not read ---------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "note"), [
    (["--mode", "train", "--new-tokens", "5"], "--new-tokens applies to --mode generate only; ignored with "
                                                "--mode train"),
    (["--mode", "infer", "--optimizer", "sgd"], "--optimizer applies to --mode train only; ignored with "
                                                 "--mode infer"),
    (["--mode", "generate", "--checkpointing", "full", "--loss", "mean"],
     "--checkpointing applies to --mode train only; ignored with --mode generate"),
])
def test_ignored_flags_get_a_note_and_change_nothing(argv: list[str], note: str,
                                                     capsys: Capture) -> None:
    """Friction: such flags were silently ignored. Rule: a flag the chosen mode never reads leaves the
    answer as it is and gets a one-line note on stderr (never stdout, so --json stays one object); the
    workload echoed is the one modelled. (--grad-accum outside training stays an error: Workload's rule.)"""
    parser = _verb_parser("estimate")
    args = parser.parse_args(["gpt2", *argv])
    args.notes = []
    given = _workload.workload_from_args(args)
    assert note in args.notes
    plain = parser.parse_args(["gpt2", *argv[:2]])
    plain.notes = []
    assert given == _workload.workload_from_args(plain) and plain.notes == []
    del args.notes  # outside main(): straight to stderr, never stdout
    _workload.workload_from_args(args)
    out, err = capsys.readouterr()
    assert out == "" and f"gpuplan: note: {note}\n" in err


def test_a_failing_run_says_only_its_error(capsys: Capture) -> None:
    """A note beside an error would break the one-line contract: notes are said only with an answer."""
    assert main(["estimate", "does/not/exist/config.json", "--mode", "infer", "--optimizer", "sgd"]) == 2
    line = _one_line(capsys)
    assert "'does/not/exist/config.json' does not exist" in line and "note" not in line


def test_ignored_flag_values_are_still_checked() -> None:
    args = _verb_parser("estimate").parse_args(["gpt2", "--mode", "infer", "--optimizer", "adamm"])
    with pytest.raises(ConfigError, match="unknown optimizer 'adamm'; did you mean adam"):
        _workload.workload_from_args(args)


def test_workload_defaults_come_from_workload(capsys: Capture) -> None:
    args = _verb_parser("estimate").parse_args(["gpt2"])
    # every default is Workload's but --precision, which is what people run on the GPU (issue 18 item 4):
    # no --gpu is the sm_90 class, bf16 autocast
    assert _workload.workload_from_args(args) == gpuplan.Workload(precision="amp-bf16")
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_note_keeps_json_stdout_one_object(capsys: Capture) -> None:
    code = main(["estimate", f"{TINY}:mlp,mlp_inputs", "--mode", "infer", "--optimizer", "sgd", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["workload"]["optimizer"] == gpuplan.Workload().optimizer
    assert err == "gpuplan estimate: note: --optimizer applies to --mode train only; ignored with --mode infer\n"


# ---- bounded reads of user input --------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("yes") is None or sys.platform == "win32", reason="needs `yes` and pipes")
def test_endless_stdin_is_refused_in_bounded_time_and_memory() -> None:
    """Item 20: `yes | gpuplan explain -` grew until killed."""
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as producer:
        try:
            result = subprocess.run([sys.executable, "-m", "gpuplan.cli.main", "explain", "-"],
                                    stdin=producer.stdout, capture_output=True, text=True, timeout=120)
        finally:
            producer.kill()
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "standard input is larger than 4.00 MiB" in result.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_device_file_is_read_no_further_than_the_limit(tmp_path: Path, capsys: Capture) -> None:
    """Item 20: `--prices /dev/zero` grew until killed (a .csv name pointing at it, to pass the suffix check)."""
    zero = tmp_path / "zero.csv"
    zero.symlink_to("/dev/zero")
    assert main(["recommend", "gpt2", "--prices", str(zero)]) == 2
    assert "is larger than 256.00 KiB, the most gpuplan reads" in _one_line(capsys)
    facts = tmp_path / "zero.yaml"
    facts.symlink_to("/dev/zero")
    assert main(["doctor", "--facts", str(facts)]) == 2
    assert "is larger than 16.00 MiB, the most gpuplan reads" in _one_line(capsys)


def test_contradictory_measure_store_flags_are_an_error(capsys: Capture) -> None:
    """--no-store silently won over --store PATH on old main."""
    assert main(["measure", "gpt2", "--store", "m.sqlite3", "--no-store"]) == 2
    assert _one_line(capsys) == ("gpuplan measure: error: --store 'm.sqlite3' and --no-store cannot be combined: "
                                 "keep one")


def test_yaml_alias_bomb_costs_its_file_size(tmp_path: Path) -> None:
    """A 'billion laughs' YAML (each level 9 aliases of the one before): walked once per node, so the
    nesting check returns at once instead of expanding 9**9 strings."""
    from gpuplan.userio import parse_user_yaml

    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    data = parse_user_yaml("\n".join(lines) + "\n", what="bomb.yaml")
    assert isinstance(data, dict) and len(data) == 10


def test_user_text_reader_errors_are_one_line(tmp_path: Path) -> None:
    from gpuplan.userio import read_user_text

    with pytest.raises(ConfigError, match=r"^cannot read f 'x': (Is a directory|.*)$"):
        read_user_text(tmp_path, what="f 'x'")
    (tmp_path / "t.txt").write_bytes(b"caf\xc3\xa9\n")
    assert read_user_text(tmp_path / "t.txt", what="t") == "café\n"
    assert read_user_text(tmp_path / "t.txt", what="t", limit_bytes=6) == "café\n"
    with pytest.raises(ConfigError, match="t is larger than 5 B, the most gpuplan reads; hint"):
        read_user_text(tmp_path / "t.txt", what="t", limit_bytes=5, hint="; hint")


def test_python_dash_m_runs_the_command_line() -> None:
    """`python -m gpuplan` is the `gpuplan` script: same output, same exit code (here a "no": exit 0 for
    a verb that answers, 2 for an unknown flag, with the one-line refusal)."""
    env_run = [sys.executable, "-m", "gpuplan"]
    ok = subprocess.run([*env_run, "gpus", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert any(g["id"] == "H100-SXM" for g in json.loads(ok.stdout)["gpus"])
    bad = subprocess.run([*env_run, "gpus", "--no-such-flag"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr
