"""The test sandbox of tests/conftest.py holds: no test reads the user's configuration or caches."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pwd
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from tests.conftest import HARNESS_VARIABLES
from tests.fixtures.tiny_models import TINY_GPT2

USER_DIRECTORY_VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "HF_HOME", "TORCH_HOME")


def test_user_directories_point_into_a_temporary_sandbox() -> None:
    real_home = pwd.getpwuid(os.getuid()).pw_dir
    home = Path(os.environ["HOME"])
    assert Path.home() == home and str(home) != real_home
    for name in USER_DIRECTORY_VARIABLES:
        assert not os.environ[name].startswith(real_home + os.sep), (name, os.environ[name])
        assert Path(os.environ[name]).is_relative_to(home.parent), (name, os.environ[name])
    assert os.environ["GPUPLAN_CALIBRATION"] == "off"
    assert os.environ["GPUPLAN_CACHE"] == "off"  # no test reads another's (or the user's) stored trace
    assert not [n for n in os.environ if n.startswith("GPUPLAN_") and n not in ("GPUPLAN_CALIBRATION", "GPUPLAN_CACHE")
                and n not in HARNESS_VARIABLES]


@pytest.mark.slow
def test_a_calibration_planted_in_the_home_directory_is_not_read(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A sentinel calibration that cannot be parsed sits where a user's would: $HOME/.config and
    $XDG_CONFIG_HOME. Reading it is a ConfigError (exit 2), so a clean estimate proves it was not read."""
    fake_home = tmp_path / "home"
    for config_dir in (fake_home / ".config", tmp_path / "xdg"):
        (config_dir / "gpuplan").mkdir(parents=True)
        (config_dir / "gpuplan" / "calibration.json").write_text("sentinel: not a calibration")
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_GPT2))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", str(config), "--gpu", "T4", "--batch-size", "2", "--seq-len", "32", "--json"])
    assert code == 0, err.getvalue()
    result = json.loads(out.getvalue())
    assert "calibration" not in result and "sentinel" not in out.getvalue() + err.getvalue()
