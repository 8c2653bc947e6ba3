"""Where the probe gets raw facts: the live machine, or a recorded environment (a YAML file).

The probe (``probe.py``) asks a :class:`FactsSource` for raw things only -- a command's output, a
file's text, a package version, the NVML readings -- and does all parsing and reasoning itself. So a
recorded environment (a test fixture, or a file a user sent with ``gpuplan doctor --record``) goes
through exactly the same code as the live machine.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from gpuplan.errors import CompatError
from gpuplan.userio import parse_user_yaml, read_user_text

# Every environment variable the doctor looks at. Only these are read or recorded, never the whole
# environment (it may hold secrets).
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "HSA_OVERRIDE_GFX_VERSION",
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_LAUNCH_BLOCKING",
    "WSL_DISTRO_NAME",
)

_COMMAND_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""


class FactsSource(Protocol):
    """Raw facts about one machine. Every method returns None for 'not there', never raises."""

    def platform(self) -> Mapping[str, str]: ...

    def env(self) -> Mapping[str, str]: ...

    def run(self, argv: Sequence[str]) -> CommandOutput | None: ...

    def read_text(self, path: str) -> str | None: ...

    def dist_version(self, name: str) -> str | None: ...

    def package_file(self, package: str, relpath: str) -> str | None: ...

    def nvml(self) -> Mapping[str, Any] | None: ...

    def torch_runtime(self) -> Mapping[str, Any] | None: ...


def command_key(argv: Sequence[str]) -> str:
    """How a command is named in a recorded environment: its argv joined by spaces."""
    return " ".join(argv)


class LiveFacts:
    """This machine. ``import_torch`` allows importing torch for facts only torch itself knows."""

    def __init__(self, import_torch: bool = False) -> None:
        self.import_torch = import_torch
        self._torch_runtime: Mapping[str, Any] | None = None

    def platform(self) -> Mapping[str, str]:
        info = {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "python": platform.python_version(),
        }
        if info["system"] == "Darwin":
            info["macos"] = platform.mac_ver()[0]
        return info

    def env(self) -> Mapping[str, str]:
        return {k: os.environ[k] for k in ENV_VARS if k in os.environ}

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        exe = shutil.which(argv[0])
        if exe is None:
            return None
        try:
            done = subprocess.run(  # fixed argv, no shell
                [exe, *argv[1:]], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return CommandOutput(returncode=-1, stdout="", stderr=str(exc))
        return CommandOutput(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr)

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def dist_version(self, name: str) -> str | None:
        from importlib import metadata

        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def package_file(self, package: str, relpath: str) -> str | None:
        # find_spec on a top-level package locates it without running its __init__ (torch stays unimported)
        import importlib.util

        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        for folder in spec.submodule_search_locations:
            text = self.read_text(str(Path(folder) / relpath))
            if text is not None:
                return text
        return None

    def nvml(self) -> Mapping[str, Any] | None:
        from gpuplan.compat.nvml_reader import read_nvml

        return read_nvml()

    def torch_runtime(self) -> Mapping[str, Any] | None:
        if not self.import_torch:
            return None
        if self._torch_runtime is None:  # read once: the probe asks for it in more than one place
            from gpuplan.compat.torch_reader import read_torch_runtime

            self._torch_runtime = read_torch_runtime()
        return self._torch_runtime


class RecordedFacts:
    """A recorded environment: the YAML written by ``gpuplan doctor --record`` or a test fixture.

    Keys (all optional): platform, env, commands {argv joined by spaces: stdout text or
    {returncode, stdout, stderr}}, files {path: text}, distributions {name: version},
    package_files {"package/relpath": text}, nvml, torch_runtime. A command or file that is not
    recorded reads as absent from the machine.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedFacts:
        what = f"recorded environment {str(path)!r}"
        text = read_user_text(path, what=what, error=CompatError,
                              hint="; pass the YAML written by `gpuplan doctor --record`")
        data = parse_user_yaml(text, what=what, error=CompatError)
        if not isinstance(data, dict):
            kind = type(data).__name__
            raise CompatError(f"{what} must be a YAML mapping, got {kind} "
                              "(pass the file `gpuplan doctor --record` writes)")
        return cls(data)

    def _section(self, key: str) -> Mapping[str, Any]:
        value = self.data.get(key)
        return value if isinstance(value, Mapping) else {}

    def platform(self) -> Mapping[str, str]:
        return {str(k): str(v) for k, v in self._section("platform").items() if v is not None}

    def env(self) -> Mapping[str, str]:
        return {str(k): str(v) for k, v in self._section("env").items() if v is not None}

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        value = self._section("commands").get(command_key(argv))
        if value is None:
            return None
        if isinstance(value, str):
            return CommandOutput(returncode=0, stdout=value)
        if isinstance(value, Mapping):
            try:
                code = int(value.get("returncode", 0))
            except (TypeError, ValueError):
                code = -1
            return CommandOutput(
                returncode=code, stdout=str(value.get("stdout") or ""), stderr=str(value.get("stderr") or "")
            )
        return CommandOutput(returncode=-1, stdout="", stderr=f"unreadable record: {value!r}")

    def read_text(self, path: str) -> str | None:
        value = self._section("files").get(path)
        return None if value is None else str(value)

    def dist_version(self, name: str) -> str | None:
        value = self._section("distributions").get(name)
        return None if value is None else str(value)

    def package_file(self, package: str, relpath: str) -> str | None:
        value = self._section("package_files").get(f"{package}/{relpath}")
        return None if value is None else str(value)

    def nvml(self) -> Mapping[str, Any] | None:
        value = self.data.get("nvml")
        return value if isinstance(value, Mapping) else None

    def torch_runtime(self) -> Mapping[str, Any] | None:
        value = self.data.get("torch_runtime")
        return value if isinstance(value, Mapping) else None


class RecordingFacts:
    """Wraps another source and keeps everything it answered, to write it out as a recorded environment."""

    def __init__(self, inner: FactsSource) -> None:
        self.inner = inner
        self.record: dict[str, Any] = {}

    def _put(self, section: str, key: str, value: Any) -> None:
        if value is not None:
            self.record.setdefault(section, {})[key] = value

    def platform(self) -> Mapping[str, str]:
        value = self.inner.platform()
        self.record["platform"] = dict(value)
        return value

    def env(self) -> Mapping[str, str]:
        value = self.inner.env()
        self.record["env"] = dict(value)
        return value

    def run(self, argv: Sequence[str]) -> CommandOutput | None:
        out = self.inner.run(argv)
        if out is not None:
            self._put(
                "commands", command_key(argv),
                {"returncode": out.returncode, "stdout": out.stdout, "stderr": out.stderr},
            )
        return out

    def read_text(self, path: str) -> str | None:
        out = self.inner.read_text(path)
        self._put("files", path, out)
        return out

    def dist_version(self, name: str) -> str | None:
        out = self.inner.dist_version(name)
        self._put("distributions", name, out)
        return out

    def package_file(self, package: str, relpath: str) -> str | None:
        out = self.inner.package_file(package, relpath)
        self._put("package_files", f"{package}/{relpath}", out)
        return out

    def nvml(self) -> Mapping[str, Any] | None:
        out = self.inner.nvml()
        if out is not None:
            self.record["nvml"] = dict(out)
        return out

    def torch_runtime(self) -> Mapping[str, Any] | None:
        out = self.inner.torch_runtime()
        if out is not None:
            self.record["torch_runtime"] = dict(out)
        return out

    def dump(self) -> str:
        return str(yaml.dump(self.record, Dumper=_BlockDumper, sort_keys=True, allow_unicode=True))


class _BlockDumper(yaml.SafeDumper):  # type: ignore[misc]  # no PyYAML stubs installed
    """Writes multi-line strings (tool outputs, files) as readable ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_BlockDumper.add_representer(str, _represent_str)
