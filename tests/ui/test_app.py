"""The app in-process (Starlette's TestClient) with a real worker process: the API answers the same
JSON as the CLI's ``--json``; the page shows it with the picture; every bad input is one inline line
with a 4xx status, never a traceback; the time and memory limits stop a job and the server stays up."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gpuplan.cli.main import main
from gpuplan.ui.app import MULTIPART_OVERHEAD_BYTES, create_app
from gpuplan.ui.uploads import UPLOAD_MAX_BYTES
from gpuplan.ui.worker import Limits
from gpuplan.units import GIB, format_bytes

SHAPE = {"batch_size": "2", "seq_len": "16", "gpu": "H100-SXM"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Limits(time_limit_s=240)), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="module")
def tiny_id(client: TestClient, tiny_config_bytes: bytes) -> str:
    r = client.post("/api/upload?filename=config.json", content=tiny_config_bytes)
    assert r.status_code == 200, r.text
    model: str = r.json()["model"]
    return model


def cli_json(*argv: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    assert code in (0, 1), err.getvalue()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


class _Controls(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict[str, str | None]] = []
        self.label_for: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("input", "select", "textarea") and a.get("type") not in ("hidden", "submit"):
            self.controls.append(a)
        if tag == "label" and a.get("for"):
            self.label_for.append(str(a["for"]))


@pytest.mark.slow
def test_api_answers_the_same_json_as_the_cli(client: TestClient, tiny_id: str, tmp_path: Path,
                                              tiny_config_bytes: bytes) -> None:
    r = client.get("/api/estimate", params={"model": tiny_id, **SHAPE})
    assert r.status_code == 200, r.text
    api = r.json()
    config = tmp_path / "config.json"
    config.write_bytes(tiny_config_bytes)
    cli = cli_json("estimate", str(config), "--batch-size", "2", "--seq-len", "16", "--gpu", "H100-SXM")
    assert api.pop("model") == tiny_id and cli.pop("model") == str(config)
    assert api == cli  # exact: the same library call, the same to_dict()


@pytest.mark.slow
def test_page_shows_the_answer_its_picture_and_a_share_link(client: TestClient, tiny_id: str) -> None:
    data = client.get("/api/estimate", params={"model": tiny_id, **SHAPE}).json()
    r = client.get("/", params={"model": tiny_id, **SHAPE})
    assert r.status_code == 200
    html = r.text
    assert "Fits on H100-SXM." in html
    # the answer first, the form folded below it (issue 18 item 6: the result sat below ~45 fields)
    assert '<details id="ask">' in html and html.index('id="verdict"') < html.index('id="query"')
    peak = re.search(r"peak allocated</th><td class=\"num\">([^<]+)<", html)
    assert peak is not None and peak.group(1) == format_bytes(data["peak_allocated_bytes"])
    # the picture is the --plot figure (report/plot.py), inline: its peak label carries the JSON's bytes
    picture = re.search(r'<figure id="picture">(.*?)</figure>', html, re.S)
    assert picture is not None and picture.group(1).startswith("<svg")
    assert f"({data['tensor_peak_bytes']:,} bytes)" in picture.group(1)
    share = re.search(r'id="share"', html) and re.search(r'href="(/\?[^"]+)" id="share"', html)
    assert share is not None
    assert client.get(share.group(1).replace("&amp;", "&")).text == html  # the link reproduces the page


@pytest.mark.slow
@pytest.mark.parametrize(("verb", "extra", "fields"), [
    ("plan", {"gpu": "H100-SXM", "gpus": "2", "seq_len": "16"}, ("per_gpu_peak_bytes", "parallelism", "fits")),
    ("recommend", {"max_gpus": "2", "seq_len": "16"}, ("recommendations", "excluded")),
    ("serve", {"gpu": "L4", "max_model_len": "128"}, ("ok", "kv_cache_bytes", "max_concurrency", "command")),
])
def test_other_verbs_answer_with_their_contract_fields(client: TestClient, tiny_id: str, verb: str,
                                                       extra: dict[str, str], fields: tuple[str, ...]) -> None:
    data = client.get(f"/api/{verb}", params={"model": tiny_id, **extra})
    assert data.status_code == 200, data.text
    assert set(fields) <= set(data.json())
    page = client.get("/", params={"verb": verb, "model": tiny_id, **extra})
    assert page.status_code == 200 and 'id="verdict"' in page.text
    assert 'id="picture"' in page.text  # every verb's picture (report/verbs.py), serve's too (issue 18 item 6)


def test_every_control_has_a_label(client: TestClient) -> None:
    parser = _Controls()
    parser.feed(client.get("/").text)
    assert len(parser.controls) >= 25
    for control in parser.controls:
        assert control.get("id") in parser.label_for, f"no <label for> for {control}"


@pytest.mark.parametrize("path", [
    "/?model=gpt2&batch_size=-1", "/?model=../../etc/passwd", "/?model=x.py:factory", "/?model=gpt2&verb=fit",
    "/?model=gpt2&nope=1", "/?model=gpt2&gpu=H100-SMX", "/?model=upload:0123456789abcdef&seq_len=abc",
    "/?model=" + "g" * 5000,
])
def test_bad_input_on_the_page_is_one_inline_line(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 400
    alert = re.search(r'<p role="alert" class="error" id="error">([^<]*)</p>', r.text)
    assert alert is not None and alert.group(1) and "\n" not in alert.group(1)
    assert "Traceback" not in r.text and "<form" in r.text  # the form stays, filled in


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/api/estimate?model=gpt2&batch_size=2.5", 400), ("GET", "/api/estimate", 400),
    ("GET", "/api/train", 404), ("GET", "/nowhere", 404), ("POST", "/", 405),
    ("GET", "/api/plan?model=gpt2&gpu=H100", 400),
])
def test_bad_api_calls_are_one_json_line(client: TestClient, method: str, path: str, status: int) -> None:
    r = client.request(method, path)
    assert r.status_code == status
    if path.startswith("/api/"):
        assert set(r.json()) == {"error"} and "\n" not in r.json()["error"]
    assert "Traceback" not in r.text


def test_upload_form_redirects_to_the_shareable_page(client: TestClient, tiny_config_bytes: bytes) -> None:
    r = client.post("/upload", files={"file": ("config.json", tiny_config_bytes, "application/json")},
                    follow_redirects=False)
    assert r.status_code == 303
    assert re.fullmatch(r"/\?model=upload%3A[0-9a-f]{16}", r.headers["location"])


@pytest.mark.parametrize(("headers", "body", "status", "words"), [
    ({}, b"{" + b" " * (UPLOAD_MAX_BYTES + MULTIPART_OVERHEAD_BYTES) + b"}", 413, "at most"),
    ({}, iter([b"{", b"}"]), 413, "Content-Length"),  # chunked: no length to check before reading
])
def test_uploads_are_refused_before_the_body_is_read(client: TestClient, headers: dict[str, str], body: Any,
                                                     status: int, words: str) -> None:
    for path in ("/api/upload", "/upload"):
        r = client.post(path, headers=headers, content=body)
        assert r.status_code == status and words in r.text


def test_malformed_uploads_are_inline_errors(client: TestClient) -> None:
    r = client.post("/upload", content=b"--x\r\ngarbage", headers={"content-type": "multipart/form-data; boundary=x"})
    assert r.status_code == 400 and 'role="alert"' in r.text
    r = client.post("/upload", files={"file": ("config.json", b"{\"model_type\": 7}", "application/json")})
    assert r.status_code == 400 and "config.json" in r.text and "/tmp" not in r.text
    r = client.post("/api/upload", content=b"#!/bin/sh\nrm -rf /\n")
    assert r.status_code == 400 and "neither a config.json" in r.json()["error"]


@pytest.mark.slow
def test_time_limit_kills_the_worker_and_the_server_stays_up() -> None:
    with TestClient(create_app(Limits(time_limit_s=0.5)), base_url="http://127.0.0.1") as c:
        first = c.get("/health" + "z").json()["workers"]
        r = c.get("/api/estimate", params={"model": "gpt2"})  # importing torch alone takes longer than 0.5 s
        assert r.status_code == 504 and "time limit" in r.json()["error"]
        health = c.get("/healthz").json()
        assert health["restarts"] == 1 and health["workers"] != first and health["cached"] == 0
        page = c.get("/", params={"model": "gpt2"})
        assert page.status_code == 504 and 'role="alert"' in page.text


@pytest.mark.slow
def test_memory_limit_is_one_line_and_the_server_stays_up() -> None:
    with TestClient(create_app(Limits(memory_limit_bytes=GIB)), base_url="http://127.0.0.1") as c:
        r = c.get("/api/estimate", params={"model": "gpt2"})
        assert r.status_code == 400 and "--memory-gib" in r.json()["error"]
        assert c.get("/healthz").json()["ok"] is True


def test_a_server_error_is_logged_with_the_request_id_the_answer_names(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 item 6: the server logged nothing for a 500."""
    from gpuplan.ui.app import UIState

    async def broken(self: UIState, query: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(UIState, "answer", broken)
    with TestClient(create_app(Limits(time_limit_s=30)), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as c, caplog.at_level("ERROR", logger="gpuplan.ui"):
        r = c.get("/api/estimate", params={"model": "gpt2"})
    assert r.status_code == 500
    rid = re.search(r"request id ([0-9a-f]{12})", r.json()["error"])
    assert rid is not None
    assert any(rid.group(1) in rec.getMessage() and "RuntimeError: boom" in rec.getMessage() for rec in caplog.records)


def test_errors_come_before_the_open_form_and_the_form_has_peft_fields(client: TestClient) -> None:
    r = client.get("/", params={"model": "gpt2", "verb": "fit"})  # an error answer: the form stays open
    assert r.status_code == 400 and '<details id="ask">' not in r.text
    assert r.text.index('id="error"') < r.text.index('id="query"')
    empty = client.get("/").text
    assert '<details id="ask">' not in empty and 'name="peft"' in empty and 'name="load_in"' in empty


RL = {"gpu": "H100-SXM", "gpus": "2", "prompts_per_step": "4", "samples_per_prompt": "4", "prompt_len": "32",
      "response_len": "32", "rollout_max_num_seqs": "16", "rollout_max_num_batched_tokens": "256"}


@pytest.mark.slow
def test_rl_answers_the_cli_json_and_the_page_shows_its_text_report(client: TestClient, tiny_id: str,
                                                                     tmp_path: Path, tiny_config_bytes: bytes) -> None:
    """`gpuplan rl` was not on the web page (issue 19 item 1): its parameters are the CLI's flags (one
    description), its JSON the CLI's, and the page shows the text report's own renderer (report/rl.py)."""
    import html

    r = client.get("/api/rl", params={"model": tiny_id, **RL})
    assert r.status_code == 200, r.text
    config = tmp_path / "config.json"
    config.write_bytes(tiny_config_bytes)
    argv = ["rl", str(config), *(f"--{k.replace('_', '-')}={v}" for k, v in RL.items())]
    assert json.dumps(r.json()).replace(tiny_id, "M") == json.dumps(cli_json(*argv)).replace(str(config), "M")
    page = client.get("/", params={"verb": "rl", "model": tiny_id, **RL})
    assert page.status_code == 200 and 'id="verdict"' in page.text
    report = re.search(r'<details id="report" open><summary>[^<]*</summary><pre>(.*?)</pre>', page.text, re.S)
    assert report is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) in (0, 1)
    assert html.unescape(report.group(1)).strip() == out.getvalue().replace(str(config), tiny_id).strip()


def test_rl_parameters_are_checked_before_any_work(client: TestClient) -> None:
    r = client.get("/api/rl", params={"model": "gpt2", "gpu": "H100-SXM"})
    assert r.status_code == 400 and r.json()["error"].startswith("rl needs gpus and prompts_per_step")
    r = client.get("/api/rl", params={"model": "gpt2", **RL, "algorithm": "reinforce"})
    assert r.status_code == 400 and "algorithm: invalid choice: 'reinforce'" in r.json()["error"]
    assert 'name="prompts_per_step"' in client.get("/").text


def test_the_api_refuses_another_verbs_parameter_and_notes_an_unread_one(client: TestClient) -> None:
    """Issue 18 item 6: every API parameter honoured or refused. Another verb's is refused, as `gpuplan estimate
    --max-gpus 3` is; the form (which has every verb's fields) leaves it out with a note instead."""
    r = client.get("/api/estimate", params={"model": "gpt2", "max_gpus": "3"})
    assert r.status_code == 400 and r.json()["error"] == ("/api/estimate does not take max_gpus (another verb's "
                                                          "parameters); leave them out")
    r = client.get("/api/serve", params={"model": "gpt2", "gpu": "L4", "batch_size": "8"})
    assert r.status_code == 400 and "does not take batch_size" in r.json()["error"]


@pytest.mark.slow
def test_fit_axis_seq_len_answers_the_cli_json(client: TestClient, tiny_id: str, tmp_path: Path,
                                                tiny_config_bytes: bytes) -> None:
    """fit --axis was a command-line-only flag; the page runs the same call (advise/fit.largest_seq_len)."""
    r = client.get("/api/fit", params={"model": tiny_id, "gpu": "H100-SXM", "axis": "seq-len", "batch_size": "2"})
    assert r.status_code == 200, r.text
    config = tmp_path / "config.json"
    config.write_bytes(tiny_config_bytes)
    cli = cli_json("fit", str(config), "--gpu", "H100-SXM", "--axis", "seq-len", "--batch-size", "2")
    assert json.dumps(r.json()).replace(tiny_id, "M") == json.dumps(cli).replace(str(config), "M")
