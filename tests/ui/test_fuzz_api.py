"""Fuzzing the web API and page (issue 19 item 5): a seeded random driver of hostile and valid parameters
over every verb the page offers, uploads with garbage bodies and names, and unknown paths.

The contract (DESIGN.md "Fail clearly", issue 18 item 6): every answer is 200 or a 4xx — never a 5xx, a
reset or a traceback; an ``/api/`` answer is one JSON object, and a refusal is ``{"error": one line}``;
a page refusal is the page with its one-line alert. Valid values are drawn too, on the tiny uploaded
model, so that some calls reach the worker and answer. The seed is fixed (a failure reproduces);
``GPUPLAN_UI_FUZZ_SEED`` / ``GPUPLAN_UI_FUZZ_CALLS`` explore further by hand.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from gpuplan.ui.app import create_app
from gpuplan.ui.query import VERBS
from gpuplan.ui.worker import Limits
from tests.test_fuzz_cli import HUB_SHAPES, TIMM_NAMES

SEED = int(os.environ.get("GPUPLAN_UI_FUZZ_SEED", "20261202"))
CALLS = int(os.environ.get("GPUPLAN_UI_FUZZ_CALLS", "200"))
ALLOWED_STATUS = {200, 400, 404, 405, 413}
TINY = "<uploaded tiny model>"  # replaced by the upload's id

# Valid values (so that calls get to the worker) and hostile ones, per API parameter.
VALUES: dict[str, tuple[str, ...]] = {
    "model": (
        TINY,
        TINY,
        TINY,
        "gpt2",
        "no-such-model",
        "",
        "upload:0123456789abcdef",
        "upload:../../etc",
        "../../etc/passwd",
        "x.py:factory",
        "os:system",
        "g" * 5000,
        *HUB_SHAPES[:4],
        *TIMM_NAMES[:2],
    ),
    "gpu": ("T4", "H100-SXM", "L4", "H100-SMX", "", "A100-40GB-PCIe:3g.20gb", "\x00", "<script>"),
    "mode": ("train", "infer", "generate", "banana", ""),
    "precision": ("fp32", "amp-bf16", "bf16", "fp8", "nvfp4", "FP33"),
    "batch_size": ("1", "2", "0", "-1", "1e3", "1e400", "nan", str(10**30), "two"),
    "seq_len": ("16", "32", "0", "-5", str(10**12), "abc"),
    "peft": ("lora", "qlora", "none", "banana", ""),
    "lora_rank": ("4", "0", "-1", "x"),
    "optimizer": ("adamw", "sgd", "lion"),
    "checkpointing": ("none", "full", "partial"),
    "gpus": ("1", "2", "3", "0", "-8", "1e400"),
    "max_gpus": ("1", "2", "0", "x"),
    "max_model_len": ("128", "0", "-1", "1e400"),
    "verb": (*VERBS, "train", "measure", ""),
    "nope": ("1",),
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Limits(time_limit_s=240)), base_url="http://127.0.0.1") as c:
        yield c


def _check(r: Any, api: bool, call: str) -> None:
    assert r.status_code in ALLOWED_STATUS, f"{call}: HTTP {r.status_code}: {r.text[:500]}"
    assert "Traceback" not in r.text and "internal error" not in r.text, f"{call}: {r.text[:500]}"
    if api:
        try:
            body = r.json()
        except ValueError:
            pytest.fail(f"{call}: HTTP {r.status_code}, not JSON: {r.text[:300]!r}")
        assert isinstance(body, dict), call
        if r.status_code != 200:
            assert set(body) == {"error"} and body["error"] and "\n" not in body["error"], f"{call}: {body}"
    elif r.status_code == 400:
        alert = re.search(r'<p role="alert" class="error" id="error">([^<]*)</p>', r.text)
        assert alert is not None and alert.group(1) and "\n" not in alert.group(1), f"{call}: {r.text[:500]}"


def _random_params(rng: random.Random, tiny_id: str) -> dict[str, str]:
    names = ["model", *rng.sample([n for n in VALUES if n not in ("model", "verb")], k=rng.randint(0, 5))]
    params = {n: rng.choice(VALUES[n]) for n in names if rng.random() > 0.05}  # sometimes no model at all
    if params.get("model") == TINY:
        params["model"] = tiny_id
        params.setdefault("seq_len", "16")  # a tiny trace, in seconds
    return params


def _random_upload(rng: random.Random) -> tuple[str, bytes]:
    name = rng.choice(("config.json", "model.safetensors", "../../x.json", "a" * 300, "x\x00.json", "", "c.gguf"))
    body = rng.choice(
        (
            b"",
            b"{}",
            b'{"model_type": 7}',
            b"\xff" * 64,
            b"[" * 10_000,
            json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64}).encode(),
            b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
        )
    )
    return name, body


@pytest.mark.slow
def test_seeded_random_api_calls(
    client: TestClient, tiny_config_bytes: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_id = client.post("/api/upload?filename=config.json", content=tiny_config_bytes).json()["model"]
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    for _ in range(CALLS):
        kind = rng.choices(("api", "page", "upload", "path"), weights=(6, 2, 1, 1))[0]
        if kind == "api":
            verb = rng.choice((*VERBS, *VERBS, "train", "models", "gpus", "Estimate"))
            params = _random_params(rng, tiny_id)
            r, api, call = client.get(f"/api/{verb}", params=params), True, f"GET /api/{verb} {params}"
        elif kind == "page":
            params = {**_random_params(rng, tiny_id), "verb": rng.choice(VALUES["verb"])}
            r, api, call = client.get("/", params=params), False, f"GET / {params}"
        elif kind == "upload":
            name, body = _random_upload(rng)
            r, api, call = (
                client.post("/api/upload", params={"filename": name}, content=body),
                True,
                f"POST /api/upload {name[:20]!r} {body[:20]!r}",
            )
        else:
            path = rng.choice(
                ("/api/", "/api/../../etc/passwd", "/static/x", "/api/estimate/extra", "/%00", "/api/upload")
            )
            r = client.get(path)  # the client normalises the path: /api/../x is /x
            api, call = r.request.url.path.startswith("/api/"), f"GET {path}"
        _check(r, api, call)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
    with capsys.disabled():
        print(f"\nui fuzz: {CALLS} random requests (seed {SEED}), statuses {statuses}")
