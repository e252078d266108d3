"""The web UI's pages over a started daemon (no browser: tests/e2e/test_web_ui.py drives Chromium),
the timeline route they show, and the sparkline of a table's last runs."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from lakeward import Table
from lakeward.services.api import create_app
from lakeward.services.api.ui import SPARK_RUNS, sparkline
from lakeward.services.daemon import Daemon
from tests.services.test_api import (  # noqa: F401 (the daemon fixture)
    daemon,
    discovered_tables,
    make_tables,
    served_daemon,
    settings_for,
    wait_for,
)


@pytest.fixture
def client(daemon: Daemon) -> TestClient:  # noqa: F811
    return TestClient(create_app(daemon))


def test_timeline_route_lists_the_newest_instants_first_as_of_the_last_cycle(client, daemon, tmp_path):  # noqa: F811
    orders = Table.open(str(tmp_path / "orders"))
    plan = orders.schedule_compaction(force=True)
    daemon.set_paused("orders", True)  # the plan stays pending
    daemon.cycle()
    found = client.get("/api/v1/tables/orders/timeline").json()
    expected = sorted(orders.timeline(), key=lambda i: i.time, reverse=True)
    assert [(i["instant"], i["action"], i["state"]) for i in found] == [
        (i.time, i.action.value, i.state.value) for i in expected
    ]
    assert found[0] == {"instant": plan, "action": "compaction", "state": "requested", "completion_time": None}
    assert len(client.get("/api/v1/tables/orders/timeline?limit=1").json()) == 1
    assert client.get("/api/v1/tables/nope/timeline").status_code == 404


def test_pages_render_the_api_numbers_and_unknown_tables_are_404(client, daemon):  # noqa: F811
    daemon.cycle()
    tables = client.get("/ui")
    assert tables.status_code == 200 and tables.headers["content-type"].startswith("text/html")
    assert 'href="/ui/tables/orders"' in tables.text and 'data-table="gone"' in tables.text
    page = client.get("/ui/tables/orders").text
    detail = client.get("/api/v1/tables/orders").json()
    assert f'<dd class="mono" id="last-completed">{detail["last_completed_instant"]}</dd>' in page
    assert f'<dd id="completed-instants">{detail["completed_instants"]}</dd>' in page
    assert client.get("/ui/tables/nope").status_code == 404
    assert client.get("/ui/runs?state=bogus").status_code == 422
    for url in ("/ui/runs", "/ui/quarantine", "/ui/static/ui.js", "/ui/static/ui.css"):
        assert client.get(url).status_code == 200, url
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui"


def test_pages_are_off_while_reads_are_protected(tmp_path: Path) -> None:
    make_tables(tmp_path)
    protected = Daemon(settings_for(tmp_path, protect_reads=True))
    protected.start()
    try:
        wait_for(lambda: protected.ready)
        answer = TestClient(create_app(protected)).get("/ui")
        assert answer.status_code == 403 and "http.protect_reads" in answer.json()["detail"]
    finally:
        protected.drain(5)


def _run(started_at: float, duration_s: float, outcome: str | None, state: str = "finished") -> dict:
    return {
        "started_at": started_at,
        "duration_s": duration_s,
        "outcome": outcome,
        "state": state,
        "action": "compaction",
        "instant": "20260101000000000",
    }


def test_sparkline_draws_the_newest_runs_oldest_left_height_by_duration_colour_by_outcome() -> None:
    newest_first = [_run(30, 0.0, None, "running"), _run(20, 1.0, "failed"), _run(10, 4.0, "succeeded")]
    bars = sparkline(newest_first, height=20, width=5)
    assert [(b.x, b.height, b.outcome) for b in bars] == [(0, 20, "succeeded"), (6, 5, "failed"), (12, 3, "running")]
    assert "failed in 1.0s" in bars[1].title
    many = [_run(100 - i, 1.0, "succeeded") for i in range(SPARK_RUNS + 5)]
    assert len(sparkline(many)) == SPARK_RUNS
    assert sparkline([]) == []


def test_table_page_of_an_unreadable_table_says_why_and_pages_escape_what_they_show(client, daemon):  # noqa: F811
    daemon.cycle()
    gone = client.get("/ui/tables/gone")
    assert gone.status_code == 200
    assert "not a table" in gone.text and "cannot be read" in gone.text  # the problem, and explain's refusal
    daemon.set_paused("customers", True, "<script>alert(1)</script>")
    page = client.get("/ui/tables/customers").text
    assert "paused by on-call: &lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page


def test_the_page_of_a_table_that_cannot_be_read_says_its_plans_and_timeline_are_unknown(client, daemon, tmp_path):  # noqa: F811
    """A table with a pending plan whose hoodie.properties got damaged: the page said "No pending plans.",
    "scheduled" and "Not read yet." where the API answers 409 (its plans are unknown, not none)."""
    orders = Table.open(str(tmp_path / "orders"))
    assert orders.schedule_compaction(force=True) is not None
    (tmp_path / "orders" / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=orders\n")
    daemon.cycle()
    assert client.get("/api/v1/tables/orders/plans").status_code == 409
    page = client.get("/ui/tables/orders").text
    state = re.search(r'<dd id="table-state">(.*?)</dd>', page, re.S)
    assert state is not None and state.group(1).split()[:2] == ["not", "scheduled:"], state
    assert "No pending plans." not in page and "Not read yet." not in page
    assert re.search(r'<dd class="mono" id="pending-writes">unknown</dd>', page)
    row = re.search(r'<tr data-table="orders".*?</tr>', client.get("/ui").text, re.S)
    assert row is not None and '<td class="pending-plans">?</td>' in row.group(0), row
    assert page.count("unknown: orders cannot be read") == 2  # the plans and the timeline sections
    # the API's list says so too: its empty pending lists are unknown, not none
    listed = {t["name"]: t for t in client.get("/api/v1/tables").json()}
    assert listed["orders"]["state_known"] is False and listed["customers"]["state_known"] is True


def test_a_table_listed_from_its_metadata_table_shows_no_cleanable_count_as_not_counted(tmp_path):
    """Its health report has no cleanable-files count (None by design): the page printed "None"."""
    names = ["v9"]
    with served_daemon(discovered_tables(tmp_path, names, table_version=9)) as (d, _):
        client = TestClient(create_app(d))
        wait_for(lambda: len(d.tables()) == 1)
        d.cycle()
        page = client.get("/ui/tables/ingest.v9").text
        cell = re.search(r'<dd id="cleanable-files">(.*?)</dd>', page, re.S)
        assert cell is not None and "None" not in cell.group(1) and "metadata table" in cell.group(1), cell


def test_links_and_forms_reach_tables_whose_names_need_percent_encoding(tmp_path):
    """Discovered tables are named after their folders; the pages put '#' and '?' into their
    links and the forms' API addresses raw, so the link cut the name short."""
    names = ["x#y", "q?z", "sp ace"]
    with served_daemon(discovered_tables(tmp_path, names)) as (d, _):
        client = TestClient(create_app(d))
        wait_for(lambda: len(d.tables()) == len(names))
        d.cycle()
        listing = client.get("/ui").text
        links = re.findall(r'href="/ui/tables/([^"]+)"', listing)
        assert sorted(urllib.parse.unquote(link) for link in links) == sorted(f"ingest.{f}" for f in names)
        for link in links:
            page = client.get(f"/ui/tables/{link}")
            assert page.status_code == 200, link
            for api in re.findall(r'data-api="([^"]+)"', page.text):
                if "/tables/" in api:
                    assert api.split("/tables/")[1].split("/")[0] == link, api
