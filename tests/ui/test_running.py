"""The console's running view in a real browser: a model loaded with the Load button appears, Unload removes it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers.screens import shoot

pytestmark = pytest.mark.browser


def ps_row(page: Any, name: str) -> Any:
    return page.locator(f'#ps-table tbody tr[data-model="{name}"]')


def load_and_unload(page: Any, url: str, model: str, *, alone: bool = True) -> None:
    page.goto(f"{url}/ui/#running")
    # exactly this name: the shared live server also holds models named after it (copies, drafts)
    expect(page.locator("#load-model option", has_text=re.compile(f"^{re.escape(model)}$"))).to_have_count(1)
    page.select_option("#load-model", model)
    page.fill("#load-keepalive", "10m")
    page.click("#load-form button[type=submit]")
    expect(page.locator("#load-status")).to_have_text(f"{model} loaded")
    row = ps_row(page, model)
    expect(row).to_contain_text("100% CPU")  # pushed by the live stream, no reload
    expect(row).to_contain_text("minutes")  # the keep-alive left
    expect(row).to_contain_text("ready")
    shoot(page, "running")
    row.get_by_role("button", name="Unload").click()
    expect(row).to_have_count(0)
    if alone:  # the shared live server may hold other tests' models; the fake console holds only this one
        expect(page.locator("#ps-empty")).to_be_visible()


def test_load_and_unload_over_the_fake_runner(page: Any, fake_console: Any) -> None:
    console = fake_console()
    load_and_unload(page, console.url, "tiny:latest")


@pytest.mark.integration
def test_load_and_unload_smollm2(page: Any, live_server: Any) -> None:
    live_server.unload()
    load_and_unload(page, live_server.url, live_server.model, alone=False)
