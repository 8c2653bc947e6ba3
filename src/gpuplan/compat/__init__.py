"""Why a GPU setup fails, and what to install: environment probe, compatibility rules over sourced
data, the install planner and the error explainer.

    env = gpuplan.compat.probe_environment()          # this machine (torch is not imported)
    findings = gpuplan.compat.diagnose(env)           # [Finding(severity, code, message, fix)]
    plan = gpuplan.compat.plan_install(InstallRequest(os="linux", cc="12.0", driver_version="575.57.08"))
    gpuplan.compat.explain_error(pasted_text)         # Explanation(family, cause, fix, oom numbers)

Facts live in ``compat/data/*.yaml`` with their sources in ``compat/data/sources.md``.
"""

from __future__ import annotations

from gpuplan.compat.environment import Environment
from gpuplan.compat.explain import Explanation, explain_error
from gpuplan.compat.facts import FactsSource, LiveFacts, RecordedFacts, RecordingFacts
from gpuplan.compat.findings import Finding, Severity
from gpuplan.compat.install import InstallPlan, InstallRequest, plan_install, request_from_environment
from gpuplan.compat.oom import OomNumbers, OomVerdict, judge_oom, parse_oom
from gpuplan.compat.probe import probe
from gpuplan.compat.rules import diagnose


def probe_environment(import_torch: bool = False) -> Environment:
    """Probe this machine. ``import_torch=True`` also reads facts only an imported torch knows."""
    return probe(LiveFacts(import_torch=import_torch))


__all__ = [
    "Environment",
    "Explanation",
    "FactsSource",
    "Finding",
    "InstallPlan",
    "InstallRequest",
    "LiveFacts",
    "OomNumbers",
    "OomVerdict",
    "RecordedFacts",
    "RecordingFacts",
    "Severity",
    "diagnose",
    "explain_error",
    "judge_oom",
    "parse_oom",
    "plan_install",
    "probe",
    "probe_environment",
    "request_from_environment",
]
