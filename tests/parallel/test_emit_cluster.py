"""``plan --emit jobset`` / ``--emit skypilot`` (issue 23 item 6): manifests around the plan's torchrun line,
emitted, not driven. Neither the JobSet CRD nor SkyPilot is installable here cheaply, so the YAML is read back
with PyYAML and every key checked against the key lists of the cited schemas:

* JobSet ``jobset.x-k8s.io/v1alpha2``: kubernetes-sigs/jobset, api/jobset/v1alpha2/jobset_types.go
  (commit 816ba51e81dfd904329ac3dc5a540816764e8fa4): JobSetSpec, ReplicatedJob, Network json names;
* batch/v1 JobSpec: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/;
* SkyPilot task YAML: https://docs.skypilot.co/en/latest/reference/yaml-spec.html (top-level and
  ``resources`` fields), accelerator names: https://docs.skypilot.co/en/stable/compute/gpus.html.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from typing import Any

import pytest
import yaml
from tests.fixtures.plans import single_layout_plan

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.hardware import get_gpu
from gpuplan.parallel.emit import emit, launch_line
from gpuplan.parallel.layout import FSDP2, Layout, MegatronDDP, Zero
from gpuplan.parallel.topology import make_topology

JOBSET_SPEC_KEYS = {"replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy", "suspend",
                    "coordinator", "managedBy", "ttlSecondsAfterFinished"}
REPLICATED_JOB_KEYS = {"name", "groupName", "template", "replicas", "dependsOn"}
NETWORK_KEYS = {"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"}
JOB_SPEC_KEYS = {"activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex", "completionMode", "completions",
                 "managedBy", "manualSelector", "maxFailedIndexes", "parallelism", "podFailurePolicy",
                 "podReplacementPolicy", "selector", "successPolicy", "suspend", "template", "ttlSecondsAfterFinished"}
SKYPILOT_TASK_KEYS = {"name", "workdir", "num_nodes", "resources", "envs", "secrets", "volumes", "file_mounts",
                      "setup", "run", "config"}
SKYPILOT_RESOURCES_KEYS = {"infra", "cloud", "region", "zone", "accelerators", "accelerator_args", "cpus", "memory",
                           "instance_type", "use_spot", "disk_size", "disk_tier", "network_tier", "image_id", "ports",
                           "labels", "autostop", "any_of", "ordered", "job_recovery"}

FSDP_32 = Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2())


def _one_node(ctx: Any) -> Any:
    return replace(ctx, topology=make_topology(get_gpu("H100-SXM"), 8))


def test_jobset_fields_are_the_schemas(gpt2_ctx: Any) -> None:
    p = single_layout_plan(gpt2_ctx, FSDP_32)  # 4 nodes × 8 H100
    doc = yaml.safe_load(emit(p, "jobset", queue="team-a"))
    assert (doc["apiVersion"], doc["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert doc["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    spec = doc["spec"]
    assert set(spec) <= JOBSET_SPEC_KEYS and set(spec["network"]) <= NETWORK_KEYS
    (rjob,) = spec["replicatedJobs"]
    assert set(rjob) <= REPLICATED_JOB_KEYS
    job = rjob["template"]["spec"]
    assert set(job) <= JOB_SPEC_KEYS
    assert job["parallelism"] == job["completions"] == p.topology.nodes == 4
    (container,) = job["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    script = container["command"][-1]
    # the head pod's DNS name by JobSet's rule <jobSet.name>-<replicatedJob.name>-<job-index>-<pod-index>.<subdomain>
    head = f"{doc['metadata']['name']}-{rjob['name']}-0-0.{spec['network']['subdomain']}"
    assert spec["network"]["enableDNSHostnames"] is True
    assert script.splitlines() == [f"export MASTER_ADDR={head}", launch_line(p)]
    assert "--nnodes 4 --nproc-per-node 8" in launch_line(p) and "$MASTER_ADDR:29500" in launch_line(p)
    assert "labels" not in yaml.safe_load(emit(p, "jobset"))["metadata"]  # no --queue, no label


def test_skypilot_task_fields_are_the_schemas(gpt2_ctx: Any) -> None:
    p = single_layout_plan(gpt2_ctx, FSDP_32)
    doc = yaml.safe_load(emit(p, "skypilot"))
    assert set(doc) <= SKYPILOT_TASK_KEYS and set(doc["resources"]) <= SKYPILOT_RESOURCES_KEYS
    assert doc["num_nodes"] == 4 and doc["resources"]["accelerators"] == "H100:8"
    assert doc["run"].splitlines() == ['export MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)', launch_line(p)]
    one = single_layout_plan(_one_node(gpt2_ctx), replace(FSDP_32, dp=8))
    doc1 = yaml.safe_load(emit(one, "skypilot"))
    assert doc1["num_nodes"] == 1
    assert doc1["run"].splitlines() == ["torchrun --standalone --nproc-per-node 8 train.py"]  # the torchrun emitter's
    assert emit(one, "torchrun").splitlines()[1] == doc1["run"].strip()


def test_megatron_plan_runs_pretrain_gpt_in_both(gpt2_ctx: Any) -> None:
    p = single_layout_plan(gpt2_ctx, Layout(dp=4, tp=2, pp=4, micro_batch_size=1, grad_accum=8,
                                            sharding=MegatronDDP()))
    line = launch_line(p)
    assert "pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4" in line
    assert line in yaml.safe_load(emit(p, "skypilot"))["run"]
    job = yaml.safe_load(emit(p, "jobset"))["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert line in job["template"]["spec"]["containers"][0]["command"][-1]


def test_refusals_name_what_can(gpt2_ctx: Any) -> None:
    p = single_layout_plan(gpt2_ctx, FSDP_32)
    with pytest.raises(ConfigError, match="MI300X has no SkyPilot accelerator name"):
        emit(replace(p, gpu=get_gpu("MI300X")), "skypilot")
    amd = yaml.safe_load(emit(replace(p, gpu=get_gpu("MI300X")), "jobset"))
    assert amd["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"] == {"amd.com/gpu": 8}
    with pytest.raises(ConfigError, match=r"Gaudi3 .* has no Kubernetes device-plugin resource"):
        emit(replace(p, gpu=get_gpu("Gaudi3")), "jobset")
    ds_tp = single_layout_plan(gpt2_ctx, Layout(dp=16, tp=2, pp=1, micro_batch_size=4, grad_accum=1,
                                                sharding=Zero(2)))
    for kind in ("jobset", "skypilot"):
        with pytest.raises(ConfigError, match=f"--emit {kind} runs the torchrun line, and no --emit value"):
            emit(ds_tp, kind)


@pytest.mark.parametrize(("argv", "message"), [
    (["--queue", "team-a"], "--queue 'team-a' labels a JobSet for Kueue; add --emit jobset"),
    (["--queue", "team-a", "--emit", "skypilot"], "--queue 'team-a' labels a JobSet"),
    (["--queue", "Team_A", "--emit", "jobset"], "--queue 'Team_A' is not a Kubernetes object name"),
])
def test_queue_refusals_before_the_trace(argv: list[str], message: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", *argv])
    assert code == 2 and message in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
