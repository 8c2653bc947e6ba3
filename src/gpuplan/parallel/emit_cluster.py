"""Cluster manifests around the plan's torchrun line: a Kubernetes JobSet (with a Kueue queue label) and a
SkyPilot task YAML. Emitted, not driven: nothing here talks to a cluster.

Field names are those of the published schemas:

* JobSet ``jobset.x-k8s.io/v1alpha2``: kubernetes-sigs/jobset, api/jobset/v1alpha2/jobset_types.go
  (commit 816ba51e81dfd904329ac3dc5a540816764e8fa4): ``spec.replicatedJobs[].{name, replicas, template}``
  (``template`` is a batch/v1 JobTemplateSpec), ``spec.network.{enableDNSHostnames, subdomain}``; a pod's
  hostname is ``<jobSet.name>-<replicatedJob.name>-<job-index>-<pod-index>.<subdomain>``, so the first
  node, where torchrun's c10d rendezvous listens, is ``NAME-node-0-0.NAME``.
* Kueue admits a JobSet whose ``metadata.labels`` carry ``kueue.x-k8s.io/queue-name: <LocalQueue>``
  (https://kueue.sigs.k8s.io/docs/tasks/run/jobsets/).
* SkyPilot task YAML (https://docs.skypilot.co/en/latest/reference/yaml-spec.html): ``name``,
  ``num_nodes``, ``resources.accelerators: NAME:COUNT`` per node, ``run``; ``SKYPILOT_NODE_IPS`` holds one
  node IP per line, the head first (https://docs.skypilot.co/en/stable/running-jobs/distributed-jobs.html).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from gpuplan.hardware.gpu import GPU
    from gpuplan.parallel.plan import Plan

CLUSTER_EMITTERS: Final = ("jobset", "skypilot")
JOB_NAME: Final = "gpuplan-train"
REPLICATED_JOB: Final = "node"
IMAGE_PLACEHOLDER: Final = "REPLACE-WITH-YOUR-TRAINING-IMAGE"
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"

# Kubernetes extended-resource names of the device plugins (NVIDIA k8s-device-plugin, AMD k8s-device-plugin)
_K8S_GPU_RESOURCE: Final = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu"}

SKYPILOT_ACCELERATORS: Final[dict[str, str]] = {
    "A10": "A10", "A10G": "A10G", "A40": "A40",
    "A100-40GB-PCIe": "A100", "A100-40GB-SXM": "A100",
    "A100-80GB-PCIe": "A100-80GB", "A100-80GB-SXM": "A100-80GB",
    "H100-SXM": "H100", "H100-PCIe": "H100", "H200-SXM": "H200",
    "GH200-96GB": "GH200", "GH200-144GB": "GH200",
    "L4": "L4", "L40S": "L40S", "T4": "T4", "RTX-A6000": "A6000",
    "V100-SXM2-16GB": "V100", "V100-PCIe-16GB": "V100", "V100-SXM2-32GB": "V100-32GB",
    "V100-PCIe-32GB": "V100-32GB",
}
"""Catalog GPU → SkyPilot accelerator name, as ``sky show-gpus -a`` lists them
(https://docs.skypilot.co/en/stable/compute/gpus.html); a GPU not listed there is refused, not guessed."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_queue(queue: str | None, kind: str | None) -> str | None:
    """``--queue``: a Kueue LocalQueue name (a Kubernetes object name), only with ``--emit jobset``."""
    if queue is None:
        return None
    if kind != "jobset":
        raise ConfigError(f"--queue {queue!r} labels a JobSet for Kueue; add --emit jobset or drop --queue")
    if not _DNS_LABEL.fullmatch(queue):
        raise ConfigError(f"--queue {queue!r} is not a Kubernetes object name: lower-case letters, digits and '-', "
                          "starting and ending with a letter or digit, at most 63 characters")
    return queue


def skypilot_accelerator(gpu: GPU) -> str:
    name = SKYPILOT_ACCELERATORS.get(gpu.id)
    if name is None:
        raise ConfigError(f"--emit skypilot: {gpu.id} has no SkyPilot accelerator name in gpuplan's table "
                          f"(known: {', '.join(sorted(SKYPILOT_ACCELERATORS))}); use --emit torchrun and write "
                          "resources.accelerators yourself")
    return name


def _rendezvous(nodes: int, host: str) -> list[str]:
    """Shell lines that set MASTER_ADDR, which the multi-node torchrun line's c10d endpoint names."""
    return [] if nodes == 1 else [f"export MASTER_ADDR={host}"]


def jobset_manifest(p: Plan, launch: str, queue: str | None = None) -> dict[str, Any]:
    """The JobSet object: one replicated job of ``nodes`` pods (an Indexed Job), one pod per node holding
    all its GPUs, each running ``launch`` (the plan's torchrun line)."""
    t = p.topology
    resource = _K8S_GPU_RESOURCE.get(p.gpu.vendor)
    if resource is None:
        raise ConfigError(f"--emit jobset: {p.gpu.id} ({p.gpu.vendor}) has no Kubernetes device-plugin resource "
                          f"gpuplan knows (known vendors: {', '.join(_K8S_GPU_RESOURCE)})")
    head = f"{JOB_NAME}-{REPLICATED_JOB}-0-0.{JOB_NAME}"
    script = "\n".join([*_rendezvous(t.nodes, head), launch]) + "\n"
    metadata: dict[str, Any] = {"name": JOB_NAME}
    if queue is not None:
        metadata["labels"] = {KUEUE_QUEUE_LABEL: queue}
    pod = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "trainer",
            "image": IMAGE_PLACEHOLDER,
            "command": ["bash", "-c", script],
            "resources": {"limits": {resource: t.gpus_per_node}},
        }],
    }
    job_spec = {"parallelism": t.nodes, "completions": t.nodes, "completionMode": "Indexed", "backoffLimit": 0,
                "template": {"spec": pod}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": JOB_NAME},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}],
        },
    }


def skypilot_task(p: Plan, launch: str) -> dict[str, Any]:
    """The SkyPilot task: ``num_nodes`` nodes with ``GPU:count`` each, running ``launch`` on every node."""
    t = p.topology
    head = '$(echo "$SKYPILOT_NODE_IPS" | head -n1)'
    run = "\n".join([*_rendezvous(t.nodes, head), launch]) + "\n"
    return {"name": JOB_NAME, "num_nodes": t.nodes,
            "resources": {"accelerators": f"{skypilot_accelerator(p.gpu)}:{t.gpus_per_node}"}, "run": run}


class _Literal(str):
    """A multi-line string YAML writes as a block (``|``), as the schemas' examples show run scripts."""


def _dump(data: dict[str, Any]) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style="|")

    Dumper.add_representer(_Literal, literal)

    def blocks(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: blocks(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [blocks(v) for v in obj]
        return _Literal(obj) if isinstance(obj, str) and "\n" in obj else obj

    return str(yaml.dump(blocks(data), Dumper=Dumper, sort_keys=False, width=1 << 16))


def cluster_manifest(p: Plan, kind: str, launch: str, *, queue: str | None = None) -> str:
    """``--emit jobset`` / ``--emit skypilot`` as YAML text, headed by what the user fills in."""
    if kind == "jobset":
        head = (f"# Generated by gpuplan: {p.best.layout.describe()}\n# set the container image ({IMAGE_PLACEHOLDER}) "
                "to one with your training script; kubectl apply -f this file\n")
        return head + _dump(jobset_manifest(p, launch, queue))
    if kind == "skypilot":
        head = (f"# Generated by gpuplan: {p.best.layout.describe()}\n# add workdir/setup for your training script; "
                "sky launch this file\n")
        return head + _dump(skypilot_task(p, launch))
    raise ConfigError(f"unknown cluster manifest {kind!r} (allowed: {', '.join(CLUSTER_EMITTERS)})")


__all__ = ["CLUSTER_EMITTERS", "KUEUE_QUEUE_LABEL", "SKYPILOT_ACCELERATORS", "check_queue", "cluster_manifest",
           "jobset_manifest", "skypilot_task"]
