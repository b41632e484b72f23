"""``keymem ui`` in a real headless Chromium over a real deployment holding the demo story.

The browser is Debian's ``chromium`` driven through its ``chromium-driver`` (.ci/run installs
both); when they are missing these tests fail, they never skip. The page is walked as a user
walks it, Newton → apple → fruit → strawberry, and each change is checked in the store through
the router, not in the page's own words.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pytest
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from keymem.protocol.client import Client
from keymem.protocol.endpoints import ipc_endpoints
from keymem.services.cli.demo import NAMESPACE as DEMO
from keymem.services.ui.access import COOKIE, TOKEN_FILE
from keymem.services.ui.app import KEY_MEMORIES, MEMORIES_PAGE
from keymem.store.database import graph_path
from tests.supervised import Deployment, running_deployment

pytestmark = pytest.mark.supervised

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The flags Chromium needs as root on a machine without a network (no sandbox, no GPU, no
# background fetches), and a profile of its own.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WINDOW = (1280, 720)
UI_START_S = 120  # keymem ui's start-up on a loaded box: imports, readiness check, bind
WAIT_S = 30  # one step of the page (a call through the router and a render)
CHANGES = "ui-changes"  # the namespace the change tests write into, apart from the demo's
PAGES = "ui-pages"  # a namespace with more memories under one key than the page shows at once
PAGE_MEMORIES = MEMORIES_PAGE + 5  # more than one page
STALE_AGE_DAYS = 400  # a standard (90-day half-life) memory this old is stale
SECONDS_PER_DAY = 86_400
# A screenshot is not blank when its pixels vary and it holds more than a handful of colours.
MIN_PIXEL_STD = 10.0
MIN_COLOURS = 32

Found = TypeVar("Found")


@dataclass
class UI:
    deployment: Deployment
    base: str
    token: str
    ids: dict[str, str]  # the change tests' memories in CHANGES, by what is done to them
    pages: set[str]  # the memories in PAGES, all under the key "daily log"

    def call(self, method: str, body: dict[str, Any]) -> Any:
        return call(self.deployment, method, body)

    def stored(self, name: str) -> dict[str, Any] | None:
        """The memory as the store holds it now (None once forgotten)."""
        reply = self.call(
            "get_memories",
            {"ids": [self.ids[name]], "namespace": CHANGES, "include_inactive": True},
        )
        found: list[dict[str, Any]] = reply["memories"]
        return found[0] if found else None


def call(deployment: Deployment, method: str, body: dict[str, Any]) -> Any:
    with Client(ipc_endpoints(deployment.home).frontend, timeout_ms=20_000) as client:
        return client.call("memory", method, body)


def seed_pages(deployment: Deployment) -> set[str]:
    batch = [
        {"content": f"Daily log entry number {i}", "keys": ["daily log"], "namespace": PAGES}
        for i in range(PAGE_MEMORIES)
    ]
    saved = call(deployment, "remember_batch", {"items": batch})["results"]
    return {result["saved"] for result in saved}


def seed_changes(deployment: Deployment) -> dict[str, str]:
    """Memories for the change tests, one of them last confirmed long ago."""
    items = {
        "confirm": ("The office coffee machine is on the third floor", ["coffee", "office"]),
        "correct": ("The team standup is at 9:30", ["standup", "meeting"]),
        "dismiss": ("The standup notes live in the wiki", ["standup", "wiki"]),
        "forget": ("The parking code is 4417", ["parking", "office"]),
        "stale": ("The build server is named atlas", ["build server", "atlas"]),
    }
    batch = [{"content": c, "keys": k, "namespace": CHANGES} for c, k in items.values()]
    saved = call(deployment, "remember_batch", {"items": batch})["results"]
    ids = {name: result["saved"] for name, result in zip(items, saved, strict=True)}
    # The same text saved again under a shared key supersedes the first copy and is flagged
    # as contradicting it.
    clash = {"content": "The deploy window is Friday", "keys": ["deploy"], "namespace": CHANGES}
    ids["clashed"] = call(deployment, "remember", clash)["saved"]
    ids["clashing"] = call(deployment, "remember", {**clash, "keys": ["deploy", "release"]})[
        "saved"
    ]
    # The graph file has one owner: age the stale memory while the services are down.
    deployment.keymem("down")
    old = time.time() - STALE_AGE_DAYS * SECONDS_PER_DAY
    with duckdb.connect(str(graph_path(deployment.home))) as db:
        db.execute(
            "UPDATE memories SET created_at = ?, last_confirmed_at = ? WHERE id = ?",
            [old, old, ids["stale"]],
        )
    deployment.keymem("up")
    return ids


def start_ui(deployment: Deployment) -> tuple[subprocess.Popen[str], str]:
    """``keymem ui --port 0`` and the URL it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "keymem.services.cli", "ui", "--port", "0"],
        env=deployment.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    give_up = time.monotonic() + UI_START_S
    while time.monotonic() < give_up:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        line = process.stdout.readline() if ready else ""
        found = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", line)
        if found:
            return process, found.group(0)
        if ready and not line:  # it exited
            break
    process.kill()
    _, err = process.communicate(timeout=10)
    raise AssertionError(f"keymem ui printed no URL within {UI_START_S} s: {err}")


@pytest.fixture(scope="module")
def ui() -> Iterator[UI]:
    # With hubs from two memories up, the demo's apple and fruit are hubs.
    with running_deployment(KEYMEM_KEY_HUB_MIN_LINKS="2") as deployment:
        deployment.keymem("demo")
        pages = seed_pages(deployment)
        ids = seed_changes(deployment)
        process, url = start_ui(deployment)
        try:
            base, _, token = url.partition("/?token=")
            yield UI(deployment, base, token, ids, pages)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One Chromium for the module (each test opens the page anew)."""
    assert CHROMIUM.exists() and CHROMEDRIVER.exists(), (
        "the UI tests need Debian's chromium and chromium-driver: "
        "apt-get install -y chromium chromium-driver (.ci/run installs them)"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    with tempfile.TemporaryDirectory(prefix="km-chromium-") as profile:
        for flag in (
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--window-size={},{}".format(*WINDOW),
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=DriverService(str(CHROMEDRIVER)), options=options)
        try:
            yield driver
        finally:
            driver.quit()


# ---- the page, as a user sees it ----------------------------------------------------------


def wait_for(driver: WebDriver, find: Callable[[WebDriver], Found | None]) -> Found:
    """``find``'s first answer that is not None (the page re-renders between tries)."""
    wait = WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))
    found: Found = wait.until(lambda d: find(d) or False)
    return found


def open_page(driver: WebDriver, ui: UI, namespace: str) -> None:
    driver.get(f"{ui.base}/?token={ui.token}&ns={namespace}")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#keys button.key") or None)


def key_button(driver: WebDriver, concept: str) -> WebElement:
    selector = f'#keys button.key[data-concept="{concept}"]'
    return wait_for(driver, lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, selector)), None))


def open_key(driver: WebDriver, concept: str) -> None:
    """Click the key in the key space and wait for its memories."""
    key_button(driver, concept).click()
    titled(driver, f"Memories under “{concept}”")


def titled(driver: WebDriver, title: str) -> None:
    wait_for(
        driver, lambda d: d.find_element(By.ID, "memories-title").text.startswith(title) or None
    )


def card(driver: WebDriver, text: str) -> WebElement:
    """The memory card whose content holds ``text``."""

    def find(d: WebDriver) -> WebElement | None:
        for article in d.find_elements(By.CSS_SELECTOR, "#memories article.memory"):
            if text in article.find_element(By.CLASS_NAME, "content").text:
                return article
        return None

    return wait_for(driver, find)


def shown_ids(driver: WebDriver) -> list[str]:
    cards = driver.find_elements(By.CSS_SELECTOR, "#memories article.memory")
    return [str(c.get_attribute("data-memory-id")) for c in cards]


def graph_ids(driver: WebDriver, kind: str) -> list[str]:
    nodes = driver.find_elements(By.CSS_SELECTOR, f"#graph g.{kind}")
    return [str(n.get_attribute("data-memory-id")) for n in nodes]


def graph_concepts(driver: WebDriver, kind: str) -> list[str]:
    nodes = driver.find_elements(By.CSS_SELECTOR, f"#graph g.key-node.{kind}")
    return [str(n.get_attribute("data-concept")) for n in nodes]


def cards_text(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "memories").text)


def chip(article: WebElement, concept: str) -> WebElement:
    return article.find_element(By.CSS_SELECTOR, f'.key-chip[data-concept="{concept}"]')


def classes(element: WebElement) -> list[str]:
    return (element.get_attribute("class") or "").split()


def button(scope: WebElement, label: str) -> WebElement:
    """The button whose label starts with ``label``."""
    found = [b for b in scope.find_elements(By.TAG_NAME, "button") if b.text.startswith(label)]
    assert len(found) == 1, f"{len(found)} buttons labelled {label!r}"
    return found[0]


def noticed(driver: WebDriver, text: str) -> None:
    wait_for(driver, lambda d: text in d.find_element(By.ID, "notice").text or None)


def search(driver: WebDriver, query: str) -> None:
    box = driver.find_element(By.ID, "query")
    box.clear()
    box.send_keys(query + "\n")
    wait_for(
        driver, lambda d: d.find_element(By.ID, "keys-title").text == f"Keys for “{query}”" or None
    )


def assert_not_blank(png: bytes, viewport: tuple[int, int]) -> None:
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == viewport
    pixels = np.asarray(image.convert("RGB"))
    assert float(pixels.std()) > MIN_PIXEL_STD
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > MIN_COLOURS


# ---- the tests ----------------------------------------------------------------------------


def test_the_demo_story_is_walked_newton_apple_fruit_strawberry(
    ui: UI, browser: WebDriver, tmp_path: Path
) -> None:
    open_page(browser, ui, DEMO)
    search(browser, "Newton")
    open_key(browser, "Newton")
    newton = card(browser, "Newton discovered gravity when an apple fell")
    assert "here" in classes(chip(newton, "Newton"))

    chip(newton, "apple").click()
    titled(browser, "Memories under “apple”")
    apple = card(browser, "Apples are a fruit")
    card(browser, "Newton discovered gravity")  # the key's other memory, one click away
    fruit_chip = chip(apple, "fruit")
    assert "is-hub" in classes(fruit_chip) and "hub" in fruit_chip.text

    fruit_chip.click()
    titled(browser, "Memories under “fruit”")
    card(browser, "The user likes strawberries more than any other fruit")
    assert "Newton" not in cards_text(browser)  # only what the fruit key links
    # The graph: the fruit memories on one side, their keys on the other, hubs marked.
    assert sorted(graph_ids(browser, "memory-node")) == sorted(shown_ids(browser))
    assert {"fruit", "apple"} <= set(graph_concepts(browser, "is-hub"))
    selected = browser.find_element(By.CSS_SELECTOR, "#keys button.key.selected")
    assert selected.get_attribute("data-concept") == "fruit"

    png = browser.get_screenshot_as_png()
    (tmp_path / "ui.png").write_bytes(png)  # docs/ui.png is this picture (docs/UI.md)
    viewport = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert_not_blank(png, tuple(viewport))

    strawberry = '#graph g.key-node[data-concept="strawberry"] circle'
    browser.find_element(By.CSS_SELECTOR, strawberry).click()  # a key node opens its memories
    titled(browser, "Memories under “strawberry”")
    card(browser, "The user likes strawberries more than any other fruit")
    trail = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#trail li")]
    assert trail == ["search “Newton”", "Newton", "apple", "fruit", "strawberry"]


def test_a_request_without_the_token_is_refused_and_changes_nothing(ui: UI) -> None:
    host = ui.base.removeprefix("http://")
    target = ui.ids["forget"]
    forget = f"/api/memories/{target}/forget?ns={CHANGES}"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"{COOKIE}=wrong"}):
        for method, path in (("GET", "/"), ("GET", "/api/overview"), ("POST", forget)):
            status, _, _ = request(host, method, path, headers)
            assert status == 401, (method, path, headers)
    assert ui.stored("forget") is not None

    status, headers, _ = request(host, "GET", f"/?token={ui.token}", {})
    assert status == 303 and headers["location"].endswith("/")
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={ui.token};")
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    status, headers, body = request(host, "GET", "/", {"Cookie": f"{COOKIE}={ui.token}"})
    assert status == 200 and b"/static/ui.js" in body
    assert "default-src 'self'" in headers["content-security-policy"]  # nothing from elsewhere
    status, _, body = request(host, "GET", "/api/overview", {"Authorization": f"Bearer {ui.token}"})
    assert status == 200 and DEMO.encode() in body
    # A page of another site that resolves its name to loopback (DNS rebinding) is refused.
    status, _, _ = request(
        host, "GET", "/api/overview", {"Cookie": f"{COOKIE}={ui.token}", "Host": "evil.test"}
    )
    assert status == 400
    token_file = ui.deployment.home / TOKEN_FILE
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token_file.read_text().strip() == ui.token


def request(
    host: str, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(host, timeout=WAIT_S)
    try:
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_bad_input_gets_a_typed_error_and_changes_nothing(ui: UI) -> None:
    host = ui.base.removeprefix("http://")
    auth = {"Authorization": f"Bearer {ui.token}", "Content-Type": "application/json"}
    target = f"/api/memories/{ui.ids['stale']}"
    cases = [
        ("POST", f"{target}/correct?ns={CHANGES}", b"[1]", 400, "bad_request"),
        ("POST", f"{target}/correct?ns={CHANGES}", b'{"content": ""}', 400, "bad_request"),
        ("POST", f"{target}/dismiss?ns={CHANGES}", b"{}", 400, "bad_request"),
        ("POST", f"{target}/rename?ns={CHANGES}", b"{}", 404, "not_found"),
        ("POST", f"{target}/forget?ns=another", b"", 404, "not_found"),  # a namespace is a boundary
        ("GET", f"/api/keys?ns={CHANGES}&offset=x", b"", 400, "bad_request"),
        ("GET", f"/api/search?ns={CHANGES}&q=", b"", 400, "bad_request"),
    ]
    before = state_of(ui.stored("stale"))
    for method, path, body, status, code in cases:
        got, _, reply = request(host, method, path, auth, body)
        assert (got, json.loads(reply)["error"]) == (status, code), (method, path, reply)
    assert state_of(ui.stored("stale")) == before


def state_of(memory: dict[str, Any] | None) -> tuple[Any, ...]:
    """What a change would change (validity's age moves with the clock alone)."""
    assert memory is not None
    links = sorted((k["key_id"], k["link_weight"]) for k in memory["keys"])
    confirmed = memory["validity"]["confirmation_count"]
    return memory["content"], memory["superseded_by"], confirmed, links


def test_long_lists_come_a_page_at_a_time(ui: UI, browser: WebDriver) -> None:
    open_page(browser, ui, PAGES)
    page_through(browser, ui, f"Newest memories in {PAGES}", MEMORIES_PAGE)
    open_key(browser, "daily log")
    page_through(browser, ui, "Memories under “daily log”", KEY_MEMORIES)


def page_through(browser: WebDriver, ui: UI, title: str, page_size: int) -> None:
    titled(browser, f"{title}: {PAGE_MEMORIES}")
    assert len(shown_ids(browser)) == page_size
    more = browser.find_element(By.ID, "more-memories")
    more.click()
    wait_for(browser, lambda d: len(shown_ids(d)) == PAGE_MEMORIES or None)
    assert sorted(shown_ids(browser)) == sorted(ui.pages)
    assert not more.is_displayed()


def test_validity_is_coloured(ui: UI, browser: WebDriver) -> None:
    open_page(browser, ui, CHANGES)
    titled(browser, f"Newest memories in {CHANGES}")  # browsing shows memories without a click
    stale = card(browser, "The build server is named atlas")
    assert "v-stale" in classes(stale)
    assert ui.ids["stale"] in graph_ids(browser, "memory-node.v-stale")
    assert stale.find_element(By.CLASS_NAME, "validity").text == "stale"
    open_key(browser, "coffee")
    current = card(browser, "coffee machine")
    assert "v-current" in classes(current)


def test_a_flagged_contradiction_is_shown(ui: UI, browser: WebDriver) -> None:
    open_page(browser, ui, CHANGES)
    open_key(browser, "release")
    flag = card(browser, "deploy window").find_element(By.CSS_SELECTOR, ".flag")
    assert flag.get_attribute("data-flag") == "contradicts"
    assert ui.ids["clashed"] in flag.text
    open_key(browser, "coffee")
    assert not card(browser, "coffee machine").find_elements(By.CSS_SELECTOR, ".flag")


def test_confirm_correct_and_dismiss_change_the_store_after_a_click(
    ui: UI, browser: WebDriver
) -> None:
    open_page(browser, ui, CHANGES)
    before = ui.stored("confirm")
    assert before is not None
    open_key(browser, "coffee")
    button(card(browser, "coffee machine"), "Confirm").click()
    noticed(browser, "confirmed")
    after = ui.stored("confirm")
    assert after is not None
    assert after["validity"]["confirmation_count"] == before["validity"]["confirmation_count"] + 1

    open_key(browser, "standup")
    standup = card(browser, "The team standup is at 9:30")
    button(standup, "Correct").click()
    editor = standup.find_element(By.TAG_NAME, "textarea")
    editor.clear()
    editor.send_keys("The team standup is at 10:00")
    pending = ui.stored("correct")
    assert pending is not None and pending["superseded_by"] is None  # typed, not yet saved
    button(standup, "Save correction").click()
    corrected = card(browser, "The team standup is at 10:00")
    old = ui.stored("correct")
    assert old is not None and old["superseded_by"] is not None
    new = ui.call("history", {"memory_id": old["superseded_by"], "namespace": CHANGES})
    assert [v["content"] for v in new["versions"]] == [
        "The team standup is at 9:30",
        "The team standup is at 10:00",
    ]
    button(corrected, "History").click()
    superseded = wait_for(
        browser, lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, "li.v-superseded")), None)
    )
    assert "9:30" in superseded.text

    weight = link_weight(ui, "standup")
    button(card(browser, "The standup notes live in the wiki"), "Dismiss from").click()
    noticed(browser, "dismissed")
    assert link_weight(ui, "standup") < weight


def link_weight(ui: UI, concept: str) -> float:
    memory = ui.stored("dismiss")
    assert memory is not None
    return float(next(k["link_weight"] for k in memory["keys"] if k["concept"] == concept))


def test_forget_asks_first_and_cancel_keeps_the_memory(ui: UI, browser: WebDriver) -> None:
    open_page(browser, ui, CHANGES)
    open_key(browser, "parking")
    parking = card(browser, "The parking code is 4417")
    button(parking, "Forget").click()
    button(parking, "Cancel").click()
    assert not parking.find_elements(By.CLASS_NAME, "ask")
    assert ui.stored("forget") is not None

    button(parking, "Forget").click()
    assert ui.stored("forget") is not None  # asking changed nothing
    button(parking, "Yes, forget it").click()
    noticed(browser, "forgotten")
    assert ui.stored("forget") is None
    assert "parking code" not in cards_text(browser)
