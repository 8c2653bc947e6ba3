"""Property tests: garbled, truncated or empty tool outputs and missing fields never raise; they come out
as unknown. Plus invariants of the compatibility logic (monotonicity) and an OOM round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.compat import parsers
from gpuplan.compat.archs import ArchSupport, support
from gpuplan.compat.drivers import DriverFit, fit
from gpuplan.compat.explain import explain_error
from gpuplan.compat.facts import RecordedFacts
from gpuplan.compat.oom import judge_oom, parse_oom
from gpuplan.compat.probe import probe
from gpuplan.compat.render import doctor_json, doctor_markdown
from gpuplan.compat.rules import diagnose
from gpuplan.compat.versions import major_minor, parse_version
from gpuplan.units import GIB, MIB

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.yaml"))
RAW_OUTPUTS = []
for _path in FIXTURES:
    for _text in (yaml.safe_load(_path.read_text()).get("commands") or {}).values():
        RAW_OUTPUTS.append(_text if isinstance(_text, str) else str(_text.get("stdout", "")))

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(max_size=400)
junk: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)


def _diagnose_everything(data: dict[str, Any]) -> None:
    env = probe(RecordedFacts(data), "property")
    findings = diagnose(env)
    doctor_markdown(env, findings)
    doctor_json(env, findings)


@SETTINGS
@given(text)
def test_parsers_accept_any_text(s: str) -> None:
    parsers.parse_smi_query(s)
    parsers.parse_smi_table(s)
    parsers.parse_smi_csv(s, ["index", "compute_cap"])
    parsers.parse_smi_list(s)
    parsers.parse_nvcc(s)
    parsers.parse_cudnn_header(s)
    parsers.parse_rocm_smi(s)
    parsers.parse_python_assignments(s)
    parsers.parse_os_release(s)
    parse_version(s)
    major_minor(s)
    explain_error(s)


@SETTINGS
@given(st.sampled_from(RAW_OUTPUTS), st.floats(min_value=0.0, max_value=1.0), st.text(max_size=40))
def test_truncated_or_garbled_real_outputs_never_raise(output: str, cut: float, noise: str) -> None:
    broken = output[: int(len(output) * cut)] + noise
    for key in ("nvidia-smi -q", "nvidia-smi", "nvidia-smi -L", "rocm-smi --showproductname"):
        _diagnose_everything({"platform": {"system": "Linux"}, "commands": {key: broken}})


SECTIONS = ["nvml", "torch_runtime", "distributions", "platform", "env", "files", "package_files", "commands"]


@SETTINGS
@given(st.sampled_from(FIXTURES), st.sampled_from(SECTIONS), junk)
def test_fixture_with_a_garbled_section_never_raises(path: Path, section: str, value: Any) -> None:
    data = yaml.safe_load(path.read_text())
    data[section] = value
    _diagnose_everything(data)


@SETTINGS
@given(junk)
def test_garbled_nvml_gpu_entries_become_unknown(value: Any) -> None:
    gpus = [{"name": value, "cc": value, "memory_total_bytes": value}]
    data = {"platform": {"system": "Linux"},
            "nvml": {"driver_version": value, "cuda_driver_version": value, "gpus": gpus}}
    env = probe(RecordedFacts(data))
    gpu = env.nvidia.gpus[0]
    if not isinstance(value, str):
        assert gpu.name is None and env.nvidia.driver_version is None
    diagnose(env)


def test_empty_environment_reports_unknowns() -> None:
    env = probe(RecordedFacts({}))
    assert env.platform.system is None and env.torch.installed is False and env.nvidia.gpus == ()
    report = doctor_markdown(env, diagnose(env))
    assert "unknown" in report and "not installed" in report


def test_empty_tool_outputs_yield_no_facts() -> None:
    commands = {"nvidia-smi -q": "", "nvidia-smi": ""}
    env = probe(RecordedFacts({"platform": {"system": "Linux"}, "commands": commands}))
    assert env.nvidia.gpus == () and env.nvidia.driver_version is None
    findings = diagnose(env)
    assert [f.code for f in findings] == ["NO_GPU", "TORCH_NOT_INSTALLED"]
    assert "nvidia-smi ran but listed no" in findings[0].message


arch_entry = st.sampled_from(["sm_37", "sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_87",
                              "sm_89", "sm_90", "sm_100", "sm_120", "compute_70", "compute_80", "compute_90",
                              "compute_120"])
cc_value = st.sampled_from(["3.7", "5.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0",
                            "10.3", "12.0", "12.1"])
RANK = {ArchSupport.NONE: 0, ArchSupport.PTX_ONLY: 1, ArchSupport.NATIVE: 2}


@SETTINGS
@given(cc_value, st.lists(arch_entry, min_size=1, max_size=6), arch_entry)
def test_more_arch_entries_never_reduce_support(cc: str, archs: list[str], extra: str) -> None:
    before = support(cc, archs)
    after = support(cc, [*archs, extra])
    assert RANK[after] >= RANK[before]


driver_version = st.builds(lambda a, b, c: f"{a}.{b}.{c:02d}", st.integers(400, 620), st.integers(0, 200),
                           st.integers(0, 99))
FIT_RANK = {DriverFit.TOO_OLD: 0, DriverFit.MINOR_COMPAT: 1, DriverFit.FULL: 2}


@SETTINGS
@given(st.sampled_from(["11.8", "12.1", "12.4", "12.6", "12.8", "13.0", "13.2"]), driver_version,
       driver_version, st.booleans())
def test_newer_driver_never_fits_worse(cuda: str, d1: str, d2: str, windows: bool) -> None:
    low, high = sorted([d1, d2], key=lambda d: parse_version(d) or (0,))
    a, b = fit(cuda, low, None, windows), fit(cuda, high, None, windows)
    assert a is not DriverFit.UNKNOWN and b is not DriverFit.UNKNOWN
    assert FIT_RANK[b] >= FIT_RANK[a]


size = st.tuples(st.integers(0, 99999), st.sampled_from([("MiB", MIB), ("GiB", GIB)]))


@SETTINGS
@given(size, size, size, size, size)
def test_oom_numbers_round_trip(tried, total, free, alloc, reserved) -> None:  # type: ignore[no-untyped-def]
    def fmt(v: tuple[int, tuple[str, int]]) -> str:
        return f"{v[0] / 100:.2f} {v[1][0]}"

    def exact(v: tuple[int, tuple[str, int]]) -> int:
        return round(float(f"{v[0] / 100:.2f}") * v[1][1])

    msg = (f"CUDA out of memory. Tried to allocate {fmt(tried)}. GPU 3 has a total capacity of {fmt(total)} "
           f"of which {fmt(free)} is free. Of the allocated memory {fmt(alloc)} is allocated by PyTorch, and "
           f"{fmt(reserved)} is reserved by PyTorch but unallocated.")
    n = parse_oom(msg)
    assert n is not None
    assert (n.tried_bytes, n.total_bytes, n.free_bytes, n.allocated_bytes, n.reserved_unallocated_bytes) == (
        exact(tried), exact(total), exact(free), exact(alloc), exact(reserved))
    assert n.device == 3
    judge_oom(n)
