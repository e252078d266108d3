"""The web UI in a real browser (issue 21 section 5): headless Chromium (the Debian package
`chromium`, driven by Playwright) against a running `lakeward serve` on the demo tables.

The daemon is a real process (`tests/support/daemon_process.py`) serving the two tables of
`lakeward serve --demo` (`orders`, merge-on-read with log files to compact, and `customers`)
and a `broken` table whose pending compaction lost its log file, with the demo's token, on the
local engine and with scheduled work off, so that the numbers on the pages hold still while
they are compared with the JSON API and the tables themselves; the demo's writer is not
started for the same reason. One browser serves the module; each test has a fresh browser
context (its own local storage: no token kept).

Checked: the pages show the API's numbers (health score, findings, pending plans, instants,
timeline, file-group numbers, explain); a trigger from the table page starts a run that then
shows as succeeded (and a screenshot of that page is saved: build/web-ui-table.png, or the
path in LAKEWARD_UI_SCREENSHOT, e.g. docs/images/web-ui-table.png to refresh the README's); a
wrong token shows the API's 403 and changes nothing; pause and resume from the page; the
broken table's plan fails, is quarantined, shows with its error and is released from the page.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from lakeward.core.table import Table
from lakeward.services import demo
from tests.support.daemon_process import DaemonProcess
from tests.support.waiting import wait_until
from tests.support.zookeeper import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Saved outside tracked files unless asked: a test run must not change the checkout.
SCREENSHOT = Path(
    os.environ.get(
        "LAKEWARD_UI_SCREENSHOT",
        Path(__file__).resolve().parents[2] / "build" / "web-ui-table.png",
    )
)
DELTA_COMMITS = 2  # upserts into orders before the daemon starts: log files for a compaction


def make_broken_table(path: Path) -> str:
    """A merge-on-read table with a pending compaction plan whose log file is gone (lost by storage):
    the daemon runs the plan, which fails, and quarantines it at once (`quarantine_after_failures: 1`)."""
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": list(range(10)), "v": [0] * 10, "ts": [0] * 10}))
    table.upsert(pa.table({"id": [1, 2], "v": [1, 1], "ts": [1, 1]}))
    instant = table.schedule_compaction(force=True)
    logs = list(path.rglob(".*.log.*"))
    assert instant is not None and logs
    for log in logs:
        log.unlink()
    return instant


class Served:
    """The running daemon: its URL, the JSON API, the demo tables' paths, its log."""

    def __init__(self, process: DaemonProcess, folder: Path):
        self.process = process
        self.url = process.url
        self.folder = folder

    def api(self, path: str) -> Any:
        answer = httpx.get(f"{self.url}/api/v1{path}", timeout=10)
        answer.raise_for_status()
        return answer.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("web-ui")
    orders, _ = demo.create_demo_tables(folder)
    for round_no in range(1, DELTA_COMMITS + 1):
        ids = list(range(0, demo.KEYS, 7))
        orders.upsert(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "region": [demo.REGIONS[i % len(demo.REGIONS)] for i in ids],
                    "amount": [float(round_no)] * len(ids),
                    "ts": pa.array([round_no] * len(ids), pa.int64()),
                }
            )
        )
    make_broken_table(folder / "broken")
    config = demo.demo_config(folder, free_port())
    config["tables"]["refresh_interval_s"] = 1
    config["tables"]["static"].append({"path": str(folder / "broken")})
    config["concurrency"] = {"max_running": 2, "retries": {"max_attempts": 1}, "quarantine_after_failures": 1}
    config["spark"] = {"engine": "local"}
    config["policies"] = {
        "defaults": {action: {"enabled": False} for action in ("compaction", "clean", "archival", "clustering")}
    }
    process = DaemonProcess("ui1", config, folder, demo.DEMO_TOKEN)
    process.start()
    try:
        process.wait_ready(time.monotonic() + 90)
        found = Served(process, folder)
        wait_until(
            lambda: all(h["score"] is not None for h in found.api("/health")),
            60,
            "both demo tables scored",
            process.tail,
        )
        yield found
        assert process.terminate() == 0
    finally:
        process.cleanup()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (./test.sh installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


def open_page(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")  # ui.js has bound the buttons


def same(read_api: Callable[[], Any], read_page: Callable[[], Any], timeout_s: float = 15) -> Any:
    """The page's numbers equal the API's, read around the same discovery cycle (retried while a
    cycle lands between the two reads); the API's value."""
    last: list[Any] = []

    def check() -> Any:
        api, shown = read_api(), read_page()
        last[:] = [api, shown]
        return api == shown and [api]

    try:
        return wait_until(check, timeout_s, "the page to show the API's numbers", step_s=0.5)[0]
    except AssertionError:
        raise AssertionError(f"API {last[0]!r}\npage {last[1]!r}") from None


def answer(page: Page, request: str | None = None) -> tuple[str, Any]:
    """The API answer the page shows: its status line and its body (parsed JSON). `request`
    ("POST /api/v1/..."): wait for the answer to that request, not an earlier one still shown."""
    page.wait_for_selector("#answer:not([hidden])")
    if request is not None:
        page.wait_for_function(
            "prefix => document.querySelector('#answer-status').innerText.startsWith(prefix)", arg=request
        )
    return page.inner_text("#answer-status"), json.loads(page.inner_text("#answer-body"))


# -- the tests ----------------------------------------------------------------------------------
def test_start_up_log_names_the_web_ui(served: Served) -> None:
    assert f"web UI on {served.url}/ui" in served.process.log_path.read_text()


def test_tables_page_shows_each_tables_health_and_state_as_the_api(served: Served, page: Page) -> None:
    def from_api() -> dict[str, tuple[str, ...]]:
        health = {h["table"]: h for h in served.api("/health")}
        return {
            t["name"]: (
                str(health[t["name"]]["score"]),
                str(len(health[t["name"]]["findings"])),
                str(len(t["pending_plans"])),
                str(t["completed_instants"]),
                t["last_completed_instant"],
            )
            for t in served.api("/tables")
        }

    def from_page() -> dict[str, tuple[str, ...]]:
        open_page(page, f"{served.url}/ui")
        cells = (".health", ".findings", ".pending-plans", ".instants", ".mono:not(small)")
        return {
            row.get_attribute("data-table"): tuple(row.locator(f"td{c}").inner_text().strip() for c in cells)
            for row in page.locator("tr[data-table]").all()
        }

    shown = same(from_api, from_page)
    assert set(shown) == {"orders", "customers", "broken"}
    for name in shown:  # and the tables themselves agree
        assert shown[name][4] == Table.open(str(served.folder / name)).timeline().completed()[-1].time
    assert page.locator("tr[data-table] svg.sparkline").count() == 3


def test_table_page_shows_timeline_file_groups_and_explain_as_the_api(served: Served, page: Page) -> None:
    def from_api() -> dict[str, Any]:
        health = served.api("/tables/orders/health")
        explained = served.api("/tables/orders/explain")["actions"]
        return {
            "score": str(health["score"]),
            "log_files_max": str(int(health["log_files"]["max"])),
            "live_files": str(health["live_files"]),
            "timeline": [i["instant"] for i in served.api("/tables/orders/timeline?limit=30")],
            "explain": [(d["action"], "yes" if d["would_run"] else "no") for d in explained],
        }

    def from_page() -> dict[str, Any]:
        open_page(page, f"{served.url}/ui/tables/orders")
        return {
            "score": page.inner_text("#health-score").strip(),
            "log_files_max": page.inner_text("#log-files td:nth-child(4)").strip(),
            "live_files": page.inner_text("#live-files").strip(),
            "timeline": [c.strip() for c in page.locator("#timeline tbody td:first-child").all_inner_texts()],
            "explain": [
                (row.get_attribute("data-action"), row.locator(".would-run").inner_text().strip())
                for row in page.locator("#explain tr[data-action]").all()
            ],
        }

    shown = same(from_api, from_page)
    orders = Table.open(str(served.folder / "orders"))
    assert shown["timeline"][0] == orders.timeline().completed()[-1].time  # newest first, as on disk
    assert int(shown["log_files_max"]) == DELTA_COMMITS  # each upsert appended one log file per file group
    assert {a for a, _ in shown["explain"]} >= {"compaction", "clean"}


def test_trigger_from_the_page_starts_a_run_that_shows_as_succeeded(served: Served, page: Page) -> None:
    open_page(page, f"{served.url}/ui/tables/orders")
    page.fill("#token", demo.DEMO_TOKEN)
    page.click("#token-form button[type=submit]")
    page.select_option("#trigger-form select[name=action]", "compaction")
    page.click("#trigger")
    status, body = answer(page)
    assert status == "POST /api/v1/tables/orders/trigger: 202", body
    run_id = body["run_id"]
    assert body["action"] == "compaction" and body["trigger"] == "api"

    def succeeded() -> bool:
        open_page(page, f"{served.url}/ui/tables/orders")
        row = page.locator(f"#recent-runs tr[data-run='{run_id}'] td.state")
        return row.count() == 1 and row.inner_text().strip() == "succeeded"

    wait_until(succeeded, 60, f"run {run_id} to show as succeeded on the table page", served.process.tail, 1.0)
    assert served.api(f"/runs/{run_id}")["outcome"] == "succeeded"
    assert Table.open(str(served.folder / "orders")).pending_compactions() == []
    # The run is listed with its replica on the runs page, and in the table's sparkline.
    open_page(page, f"{served.url}/ui/runs")
    assert page.locator(f"tr[data-run='{run_id}'] td:nth-child(5)").inner_text().strip() == "ui1"
    open_page(page, f"{served.url}/ui")
    assert page.locator("tr[data-table=orders] svg.sparkline rect.succeeded").count() >= 1
    # The screenshot in the README: the table page with its succeeded compaction.
    open_page(page, f"{served.url}/ui/tables/orders")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size < 400_000


def test_a_wrong_token_shows_the_apis_refusal_and_changes_nothing(served: Served, page: Page) -> None:
    open_page(page, f"{served.url}/ui/tables/customers")
    page.once("dialog", lambda dialog: dialog.accept("not-the-token"))  # no token kept: the page asks
    page.click("#pause")
    status, body = answer(page)
    assert status == "POST /api/v1/tables/customers/pause: 403"
    assert body == {"detail": "the bearer token is not one of http.api_tokens"}
    assert "failed" in (page.get_attribute("#answer", "class") or "")
    assert served.api("/tables/customers")["paused"] is False


def test_pause_and_resume_from_the_page(served: Served, page: Page) -> None:
    open_page(page, f"{served.url}/ui/tables/customers")
    page.once("dialog", lambda dialog: dialog.accept(demo.DEMO_TOKEN))
    page.fill("#pause-form input[name=reason]", "on-call looks at it")
    page.click("#pause")
    status, body = answer(page)
    assert status == "POST /api/v1/tables/customers/pause: 200"
    assert body == {"table": "customers", "paused": True, "changed": True, "paused_by": "on-call"}
    table = served.api("/tables/customers")
    assert table["paused_by"] == "on-call" and table["pause_reason"] == "on-call looks at it"
    page.click("#answer-reload")
    page.wait_for_selector("body[data-ready=true]")
    assert "paused by on-call: on-call looks at it" in page.inner_text("#table-state")
    page.click("text=Resume")  # the token is kept now: no second question
    status, body = answer(page, "POST /api/v1/tables/customers/resume")
    assert status == "POST /api/v1/tables/customers/resume: 200" and body["paused"] is False
    assert served.api("/tables/customers")["paused"] is False


def test_a_pause_reason_reading_true_is_sent_as_text(served: Served, page: Page) -> None:
    """The page turned every field reading "true" or "false" into a JSON boolean (meant for the dry-run
    box): a reason typed as "true" got a 422 and the table stayed unpaused."""
    open_page(page, f"{served.url}/ui/tables/customers")
    page.once("dialog", lambda dialog: dialog.accept(demo.DEMO_TOKEN))
    page.fill("#pause-form input[name=reason]", "true")
    page.click("#pause")
    status, _ = answer(page)
    assert status == "POST /api/v1/tables/customers/pause: 200"
    assert served.api("/tables/customers")["pause_reason"] == "true"
    page.click("text=Resume")  # the pause's answer is still shown until the resume's arrives
    status, _ = answer(page, "POST /api/v1/tables/customers/resume")
    assert status == "POST /api/v1/tables/customers/resume: 200"
    # the dry-run box is the one field sent as a boolean
    open_page(page, f"{served.url}/ui/tables/customers")
    page.select_option("#trigger-form select[name=action]", "clean")
    page.check("#trigger-form input[name=dry_run]")
    page.click("#trigger")
    status, body = answer(page)
    assert status == "POST /api/v1/tables/customers/trigger: 202", body
    assert body["mode"] == "dry_run" and body["detail"].startswith("dry run"), body


def test_quarantine_page_lists_the_failed_plan_and_release_from_the_page(served: Served, page: Page) -> None:
    quarantined = wait_until(lambda: served.api("/quarantine"), 60, "the broken plan quarantined", served.process.tail)
    assert [q["key"].split("/")[:2] for q in quarantined] == [["broken", "compaction"]]
    key = quarantined[0]["key"]

    def from_page() -> list[tuple[str, str]]:
        open_page(page, f"{served.url}/ui/quarantine")
        return [
            (row.get_attribute("data-key"), row.locator("td:nth-child(3)").inner_text().strip())
            for row in page.locator("tr[data-key]").all()
        ]

    assert same(lambda: [(q["key"], str(q["failures"])) for q in served.api("/quarantine")], from_page) == [(key, "1")]
    # The failed run shows its error on the table page, and the plan is marked quarantined there.
    open_page(page, f"{served.url}/ui/tables/broken")
    assert "quarantined" in page.inner_text(f"#plans tr[data-key='{key}']")
    assert page.locator("#recent-runs pre.error").first.inner_text().strip() != ""
    assert page.locator("#recent-runs td.state").first.inner_text().strip() == "failed"
    open_page(page, f"{served.url}/ui/quarantine")
    page.once("dialog", lambda dialog: dialog.accept(demo.DEMO_TOKEN))
    page.click(f"tr[data-key='{key}'] button")
    status, body = answer(page)
    assert status == "POST /api/v1/quarantine/release: 200" and body == {"key": key, "released": True}
    audit = httpx.get(f"{served.url}/api/v1/audit", params={"target": key}, timeout=10).json()
    assert [(a["path"], a["status"]) for a in audit] == [("/api/v1/quarantine/release", 200)]
