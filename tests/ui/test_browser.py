"""The page in a real browser: Playwright driving Debian's chromium headless (``scripts/test`` installs
it). Load the page, submit a catalog model with the keyboard alone, see the answer and the picture,
every input labelled; a screenshot is saved under pytest's tmp_path (its path is printed).

Skipped, with the reason, only where chromium or Playwright is not installed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.conftest import LiveServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ANSWER_TIMEOUT_MS = 240_000
"""The first answer waits for the worker to import torch and trace gpt2 on a busy 2-core machine."""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extra)")
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is not installed (scripts/test installs Debian's chromium with apt-get; "
                    "it could not install here)")
    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data-dir: no state from elsewhere
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield context.new_page()
        finally:
            context.close()


def test_every_form_control_has_a_label(browser_page: Any, live_server: LiveServer) -> None:
    page = browser_page
    page.goto(live_server.url + "/")
    controls = page.locator("main input, main select")
    assert controls.count() >= 20
    for i in range(controls.count()):
        control = controls.nth(i)
        cid = control.get_attribute("id")
        assert cid, f"control #{i} ({control.get_attribute('name')}) has no id for a label"
        assert page.locator(f'label[for="{cid}"]').count() == 1, f"no label for #{cid}"
        # the accessible name the browser computes, not only the markup
        assert page.get_by_label(page.locator(f'label[for="{cid}"]').inner_text().strip(), exact=True).count() >= 1


def test_keyboard_only_catalog_model_shows_answer_and_picture(browser_page: Any, live_server: LiveServer,
                                                               tmp_path: Path) -> None:
    page = browser_page
    page.goto(live_server.url + "/")
    # Tab from the top of the page: the question, then the model field, in document order
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "f-verb"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "f-model"
    page.keyboard.type("gpt2")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "f-gpu"
    page.keyboard.type("H100-SXM")
    for _ in range(3):  # mode, batch size, sequence length
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "f-seq_len"
    page.keyboard.type("64")
    with page.expect_navigation(timeout=ANSWER_TIMEOUT_MS):
        page.keyboard.press("Enter")  # submit with Enter, no mouse anywhere
    assert "model=gpt2" in page.url and "seq_len=64" in page.url  # the inputs are in the URL: shareable
    verdict = page.locator("#verdict")
    assert verdict.is_visible()
    assert "H100-SXM" in verdict.inner_text()
    picture = page.locator("#picture svg")
    assert picture.is_visible()
    assert picture.bounding_box()["width"] > 100
    assert page.locator("#components").is_visible()
    # on the answer's page the first Tab reaches "Skip to the result", and Enter moves focus to it
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "skip"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "result-h"
    shot = tmp_path / "gpuplan-ui.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    # the shared link opens the same answer (from the server's cache: no second trace)
    share = page.locator("#share").get_attribute("href")
    assert share is not None and share.startswith("/?")
    page.goto(live_server.url + share)
    assert page.locator("#picture svg").is_visible()


def test_bad_input_shows_inline_and_the_form_stays(browser_page: Any, live_server: LiveServer) -> None:
    page = browser_page
    page.goto(live_server.url + "/?model=../../etc/passwd")
    alert = page.get_by_role("alert")
    assert alert.is_visible()
    text = alert.inner_text()
    assert "never a path" in text and "\n" not in text.strip() and "Traceback" not in page.content()
    assert page.locator("#f-model").input_value() == "../../etc/passwd"
