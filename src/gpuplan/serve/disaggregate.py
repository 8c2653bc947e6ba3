"""Prefill/decode disaggregation (``serve ... --disaggregate P:D`` or ``auto`` with ``--rate``): P prefill
instances and D decode instances of the layout given (tp × dp × pp GPUs each), against one aggregated engine.

* Prefill instance: the aggregated engine's settings; it prefills prompts back to back, ``dp / TTFT(I)``
  requests/s, and hands each prompt's KV to a decode instance.
* Decode instance: only decode steps reach it (the prompt's KV arrives by transfer), so its step budget needs
  only one token per running sequence: ``--max-num-batched-tokens`` = ``--max-num-seqs`` (at most the
  aggregated one's). Its profile run is smaller, so its KV cache per GPU is never below the aggregated
  engine's at the same memory; it runs ``c`` sequences (KV, --max-num-seqs, --itl-slo) and completes
  ``dp · c / (O · ITL(c))`` requests/s (``latency.replica_requests_per_s`` with no prefill in its steps).
* KV transfer: each of the instance's tp × pp ranks sends its shard of the prompt's KV
  (``KVCost.sequence_bytes(I)``) to its peer at once, point to point through the one collectives model
  (``perf.collectives.p2p_s`` on the group ``parallel.collectives.group`` places: NVLink when a prefill and a
  decode instance share a node of 8, else one NIC per GPU). TTFT = prefill + transfer (+ the queue's wait).
* Goodput per GPU: output tokens/s the pools sustain (the smaller of the two pools' request rates, at most the
  asked ``--rate``) over their GPUs; the aggregated engine's: its replica's request rate with prefills between
  the decode steps (the same rule as a --rate answer), over its GPUs.
* ``auto``: the fewest prefill instances whose M/D/c queue is stable and, with --ttft-slo, whose p99 TTFT
  (prefill + transfer + p99 wait) meets it; the fewest decode instances whose slots keep up with the rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.presentation import to_json, to_text
from gpuplan.serve.latency import MAX_REPLICA_FACTOR, replica_requests_per_s, slot_wait

if TYPE_CHECKING:
    from gpuplan.hardware import GPU
    from gpuplan.models.sources import ModelSource
    from gpuplan.serve.capacity import ServeResult

MAX_INSTANCES = 1024


@dataclass(frozen=True, slots=True)
class Disaggregation:
    aggregated: ServeResult
    decode: ServeResult
    """One decode instance's answer (its own step budget)."""
    prefill_instances: int
    decode_instances: int
    searched: bool
    kv_transfer_bytes_per_request: int
    kv_transfer_s: float
    link: str
    prefill_requests_per_s_per_instance: float
    decode_requests_per_s_per_instance: float
    decode_concurrency: int
    """Sequences each DP rank of a decode instance runs."""
    rate_per_s: float | None
    ttft_s: float
    """Prefill + KV transfer, without queueing."""
    ttft_p99_s: float | None
    prefill_command: str
    decode_command: str
    output_len: int

    @property
    def gpus_per_instance(self) -> int:
        s = self.aggregated.settings
        return s.tp * s.dp * s.pp

    @property
    def gpus(self) -> int:
        return (self.prefill_instances + self.decode_instances) * self.gpus_per_instance

    @property
    def capacity_requests_per_s(self) -> float:
        """What the two pools sustain."""
        return min(self.prefill_instances * self.prefill_requests_per_s_per_instance,
                   self.decode_instances * self.decode_requests_per_s_per_instance)

    @property
    def requests_per_s(self) -> float:
        """What the two pools sustain, at most the asked rate."""
        capacity = self.capacity_requests_per_s
        return capacity if self.rate_per_s is None else min(capacity, self.rate_per_s)

    @property
    def goodput_tokens_per_s_per_gpu(self) -> float:
        return self.requests_per_s * self.output_len / self.gpus if self.gpus else 0.0

    @property
    def goodput_interval(self) -> tuple[float, float] | None:
        """80% interval of the goodput per GPU: the pools' request rates are work over the modelled prefill and
        decode-step times, so their interval is the serving family's time interval inverted (the TTFT and step
        intervals' rows: ``perf.workload_family.rate_interval``), held at the asked rate like the goodput."""
        from gpuplan.perf.efficiency import arch_key
        from gpuplan.perf.workload_family import rate_interval
        from gpuplan.serve.capacity import SERVE_FAMILY

        if not self.gpus:
            return None
        span = rate_interval(self.capacity_requests_per_s, SERVE_FAMILY, arch_key(self.aggregated.gpu),
                             cap=self.rate_per_s)
        per = self.output_len / self.gpus
        return None if span is None else (span[0] * per, span[1] * per)

    @property
    def aggregated_goodput_tokens_per_s_per_gpu(self) -> float:
        a = self.aggregated
        if a.time_unknown:
            return 0.0
        per_replica = replica_requests_per_s(a.decode_batch, a.prefill.seconds, a.decode.seconds,
                                             self.output_len)
        per_gpu = per_replica * a.settings.dp / self.gpus_per_instance * self.output_len
        if self.rate_per_s is not None and a.rate is not None and a.rate.gpus:
            per_gpu = min(per_gpu, self.rate_per_s * self.output_len / a.rate.gpus)
        return per_gpu

    @property
    def meets_rate(self) -> bool:
        if self.rate_per_s is None:
            return True
        return (self.prefill_instances * self.prefill_requests_per_s_per_instance > self.rate_per_s
                and self.decode_instances * self.decode_requests_per_s_per_instance > self.rate_per_s)

    @property
    def ok(self) -> bool:
        slo = self.aggregated.ttft_slo_s
        ttft_met = slo is None or (self.ttft_p99_s if self.ttft_p99_s is not None else self.ttft_s) <= slo
        return self.aggregated.ok and self.decode.ok and self.decode_concurrency > 0 and self.meets_rate and ttft_met

    def to_dict(self) -> dict[str, Any]:
        return to_json(self)  # gpuplan/report/registry.py: report.serve.disaggregation_to_dict

    def __str__(self) -> str:
        return to_text(self)  # gpuplan/report/registry.py: report.serve.render_disaggregation


def parse_split(text: str) -> tuple[int, int] | None:
    """``P:D`` → (P, D); ``auto`` → None (searched for --rate). One clear line otherwise."""
    if text == "auto":
        return None
    parts = text.split(":")
    try:
        prefill, decode = (int(p) for p in parts) if len(parts) == 2 else (0, 0)
    except ValueError:
        prefill = decode = 0
    if not (1 <= prefill <= MAX_INSTANCES and 1 <= decode <= MAX_INSTANCES):
        raise ConfigError(f"--disaggregate {text!r}: give P:D, prefill and decode instances (each 1..{MAX_INSTANCES}, "
                          "e.g. 1:3), or auto with --rate")
    return prefill, decode


def _transfer(gpu: GPU, per_gpu_bytes: int, instance_gpus: int, total_gpus: int) -> tuple[float, str]:
    """Seconds for every rank's KV shard to reach its decode peer, and the link it crosses."""
    from gpuplan.parallel.collectives import group
    from gpuplan.parallel.topology import DEFAULT_GPUS_PER_NODE, make_topology
    from gpuplan.perf.collectives import p2p_s

    if not gpu.intra_node_gb_per_s_per_direction and total_gpus <= 1:
        return 0.0, "none"
    per_node = DEFAULT_GPUS_PER_NODE
    topo = make_topology(gpu, max(2, total_gpus if total_gpus <= per_node else -(-total_gpus // per_node) * per_node))
    pair = group(topo, 2, instance_gpus)
    link = "network (one NIC per GPU)" if pair.crosses_nodes else f"{topo.intra_link} inside a node"
    return p2p_s(pair, per_gpu_bytes), link


def disaggregate(model: str | ModelSource, *, gpu: str | GPU, split: str, input_len: int | None,
                 output_len: int | None, rate: float | None = None, ttft_slo: float | None = None,
                 itl_slo: float | None = None, **serve_kwargs: Any) -> Disaggregation:
    """P prefill and D decode instances (``split``: "P:D" or "auto") against the aggregated engine."""
    from gpuplan.serve.capacity import serve
    from gpuplan.serve.engines import get_engine

    pools = parse_split(split)
    if not get_engine(str(serve_kwargs.get("engine", "vllm"))).paged:
        raise ConfigError("--disaggregate needs a serving engine that moves KV between instances (--engine vllm or "
                          "sglang)")
    if input_len is None or output_len is None:
        raise ConfigError("--disaggregate needs --input-len and --output-len (the prompt is prefilled on one pool, "
                          "its KV moved, the output decoded on the other)")
    if pools is None and rate is None:
        raise ConfigError("--disaggregate auto sizes the pools for a request rate: add --rate R (or give P:D)")
    if serve_kwargs.get("concurrency") is not None:
        raise ConfigError("--disaggregate answers for --input-len/--output-len/--rate, not --concurrency")
    agg = serve(model, gpu=gpu, input_len=input_len, output_len=output_len, rate=rate, ttft_slo=ttft_slo,
                itl_slo=itl_slo, **serve_kwargs)
    s = agg.settings
    # the decode instance schedules one token per running sequence: its step budget is --max-num-seqs
    decode_kwargs = {**serve_kwargs, "max_num_batched_tokens": min(s.max_num_batched_tokens, s.max_num_seqs),
                     "max_num_seqs": s.max_num_seqs}
    dec = serve(model, gpu=gpu, input_len=input_len, output_len=output_len, itl_slo=itl_slo, **decode_kwargs)
    if agg.time_unknown or dec.time_unknown:
        raise ConfigError(f"--disaggregate needs the step times, which are unknown here: {agg.time_unknown or ''}"
                          f"{dec.time_unknown or ''}")
    conc = dec.slo_concurrency if itl_slo is not None else dec.decode_batch
    conc = max(0, conc or 0)
    decode_rps = s.dp * replica_requests_per_s(conc, 0.0, dec.decode.seconds, output_len)
    prefill_s = agg.prefill.seconds
    prefill_rps = s.dp / prefill_s if prefill_s > 0 else 0.0
    per_gpu_kv = agg.kv.sequence_bytes(input_len)
    instance = s.tp * s.dp * s.pp
    if pools is None:
        assert rate is not None
        decode_instances = math.floor(rate / decode_rps) + 1 if decode_rps > 0 else 0
        prefill_instances = math.floor(rate / prefill_rps) + 1 if prefill_rps > 0 else 0
    else:
        prefill_instances, decode_instances = pools
    transfer_s, link = _transfer(agg.gpu, per_gpu_kv, instance, (prefill_instances + decode_instances) * instance)
    ttft = prefill_s + transfer_s
    p99 = None
    if rate is not None and prefill_instances:
        def wait_p99(n: int) -> float:
            return slot_wait(rate, n * s.dp, prefill_s).wait_p99_s

        if pools is None and ttft_slo is not None and ttft <= ttft_slo:
            limit = prefill_instances * MAX_REPLICA_FACTOR
            while prefill_instances < limit and ttft + wait_p99(prefill_instances) > ttft_slo:
                prefill_instances += 1
        p99 = ttft + wait_p99(prefill_instances)
    prefill_cmd = _command(agg, "prefill")
    decode_cmd = _command(dec, "decode")
    return Disaggregation(agg, dec, prefill_instances, decode_instances, pools is None, per_gpu_kv * s.tp * s.pp,
                          transfer_s, link, prefill_rps, decode_rps, conc, rate, ttft, p99, prefill_cmd, decode_cmd,
                          output_len)


def _command(result: ServeResult, role: str) -> str:
    from gpuplan.serve import engines

    return engines.command(dataclasses.replace(result.settings, kv_role=role))
