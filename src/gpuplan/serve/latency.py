"""Latency targets and the queueing model behind a ``--rate`` answer.

A replica (one engine on tp × pp GPUs) is modelled as ``c`` request slots (its concurrency: what the KV
cache, --max-num-seqs and an --itl-slo allow) fed by Poisson arrivals; a request holds a slot for its
service time ``S = TTFT + output_len × ITL(c)`` (continuous batching: the decode step runs all ``c``
slots together). Waiting for a slot is the M/D/c queue, approximated by Allen–Cunneen's M/G/c formula
(A. O. Allen, *Probability, Statistics and Queueing Theory*, 2nd ed. 1990, §6: ``Wq(M/G/c) ≈
Wq(M/M/c) · (1 + Cs²) / 2``, ``Cs² = 0`` for a deterministic service): the M/M/c (Erlang C) wait with its
exponential tail ``P(W > t) = C(c, a) · exp(−(cμ − λ) t)``, halved. The halving is applied to the
percentiles too — an approximation, stated in the answer. Prefill interference with running decodes is
not modelled (chunked prefill shares the steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

DETERMINISTIC_SERVICE_FACTOR = 0.5
"""Allen–Cunneen: (1 + Cs²) / 2 with the coefficient of variation of the service time Cs = 0."""
MAX_REPLICA_FACTOR = 1000
"""Replica search stops at this multiple of the capacity answer (an unreachable TTFT target)."""


def largest_batch(limit: int, meets: Callable[[int], bool]) -> int:
    """The largest batch in 1..limit for which ``meets`` holds (it only gets harder with the batch),
    0 when even one sequence misses."""
    if limit < 1 or not meets(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if meets(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def replica_requests_per_s(concurrency: int, ttft_s: float, itl_s: float, output_len: int) -> float:
    """Requests a replica of ``concurrency`` slots completes per second when its prefills run one after another
    between the decode steps: a slot turns over every ``concurrency × TTFT + output_len × ITL`` (Little's law)."""
    service = concurrency * ttft_s + output_len * itl_s
    return concurrency / service if concurrency > 0 and service > 0 else 0.0


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in M/M/c (Erlang C), via the stable Erlang B recursion."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_load * b / (k + offered_load * b)
    return servers * b / (servers - offered_load * (1 - b))


@dataclass(frozen=True, slots=True)
class QueueWait:
    """Waiting for a slot at one replica: utilization and wait percentiles (seconds)."""

    utilization: float
    wait_probability: float
    wait_mean_s: float
    wait_p50_s: float
    wait_p99_s: float


def slot_wait(rate_per_s: float, servers: int, service_s: float) -> QueueWait:
    """M/D/c wait (module docstring) of Poisson ``rate_per_s`` over ``servers`` slots of ``service_s``."""
    if servers < 1 or service_s <= 0:
        return QueueWait(math.inf, 1.0, math.inf, math.inf, math.inf)
    offered = rate_per_s * service_s
    rho = offered / servers
    if rho >= 1:
        return QueueWait(rho, 1.0, math.inf, math.inf, math.inf)
    c = erlang_c(servers, offered)
    drain = servers / service_s - rate_per_s  # cμ − λ
    mean = DETERMINISTIC_SERVICE_FACTOR * c / drain

    def quantile(p: float) -> float:
        return DETERMINISTIC_SERVICE_FACTOR * math.log(c / (1 - p)) / drain if c > 1 - p else 0.0

    return QueueWait(rho, c, mean, quantile(0.5), quantile(0.99))


def replicas_for(rate_per_s: float, servers: int, service_s: float, *, ttft_s: float,
                 ttft_slo_s: float | None) -> int:
    """Fewest replicas that keep the queue stable and, with a TTFT target, its p99 TTFT (prefill + p99
    wait) within it; 0 when no count up to MAX_REPLICA_FACTOR × the stable one does."""
    if servers < 1 or service_s <= 0:
        return 0
    stable = math.floor(rate_per_s * service_s / servers) + 1
    for n in range(stable, stable * MAX_REPLICA_FACTOR + 1):
        wait = slot_wait(rate_per_s / n, servers, service_s)
        if wait.utilization < 1 and (ttft_slo_s is None or ttft_s + wait.wait_p99_s <= ttft_slo_s):
            return n
        if ttft_slo_s is not None and ttft_s > ttft_slo_s:
            return 0  # the prefill alone misses it: no replica count helps
    return 0
