"""The console's server view, API keys and OLLAMA_NOUI, in a real browser."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from ollama_py import __version__

pytestmark = pytest.mark.browser


def test_server_view_shows_facts_settings_and_live_requests_and_log(page: Any, fake_console: Any) -> None:
    console = fake_console(max_queue=77)
    page.goto(f"{console.url}/ui/#server")
    expect(page.locator("#conn")).to_have_text("live")
    expect(page.locator("#server-info")).to_contain_text(__version__)
    expect(page.locator("#server-info")).to_contain_text("Memory")
    expect(page.locator("#settings-table")).to_contain_text("OLLAMA_MAX_QUEUE")
    expect(page.locator("#settings-table tr", has_text="OLLAMA_MAX_QUEUE")).to_contain_text("77")

    # A request made by someone else, after the page opened, streams in: its row and its log line.
    r = requests.post(f"{console.url}/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False},
                      timeout=60)
    assert r.ok
    row = page.locator("#requests-table tbody tr", has_text="/api/generate").first
    expect(row).to_contain_text("tiny:latest")
    expect(row).to_contain_text("200")
    expect(row).to_contain_text("→")  # prompt → generated tokens
    expect(page.locator("#log")).to_contain_text("path=/api/generate status=200")
    expect(page.locator("#chart")).to_be_visible()


def test_with_api_keys_the_page_asks_for_a_key_and_shows_nothing_without_it(page: Any, fake_console: Any) -> None:
    console = fake_console(api_keys=("s3cret",))
    assert requests.get(f"{console.url}/ui/api/server", timeout=10).status_code == 401
    assert requests.get(f"{console.url}/ui/api/events", timeout=10).status_code == 401
    page.goto(f"{console.url}/ui/#models")
    expect(page.locator("#key-dialog")).to_be_visible()
    expect(page.locator("#chat-model option")).to_have_count(0)
    expect(page.locator("#models-table tbody tr")).to_have_count(0)

    page.fill("#key-input", "wrong")
    page.click("#key-form button[type=submit]")
    expect(page.locator("#key-error")).to_be_visible()  # asked again: that key was refused
    expect(page.locator("#models-table tbody tr")).to_have_count(0)

    page.fill("#key-input", "s3cret")
    page.click("#key-form button[type=submit]")
    expect(page.locator("#key-dialog")).to_be_hidden()
    expect(page.locator('#models-table tbody tr[data-model="tiny:latest"]')).to_be_visible()
    expect(page.locator("#conn")).to_have_text("live")

    page.reload()  # the key is kept for the tab's session
    expect(page.locator('#models-table tbody tr[data-model="tiny:latest"]')).to_be_visible()
    expect(page.locator("#key-dialog")).to_be_hidden()


def test_noui_turns_the_console_off(fake_console: Any) -> None:
    console = fake_console(noui=True)
    assert requests.get(f"{console.url}/ui/", timeout=10).status_code == 404
    assert requests.get(f"{console.url}/ui/api/server", timeout=10).status_code == 404
    assert requests.get(f"{console.url}/api/tags", timeout=10).ok


def test_console_files_have_a_strict_csp_and_the_api_host_check(fake_console: Any) -> None:
    console = fake_console()
    for path in ("/ui/", "/ui/js/main.js", "/ui/vendor/purify.es.mjs"):
        r = requests.get(console.url + path, timeout=10)
        assert r.ok, path
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    assert requests.get(f"{console.url}/ui/", headers={"Host": "evil.example"}, timeout=10).status_code == 403
    assert requests.get(f"{console.url}/ui/../pyproject.toml", timeout=10).status_code == 404
    assert requests.get(f"{console.url}/ui/%2e%2e/%2e%2e/pyproject.toml", timeout=10).status_code == 404


@pytest.mark.integration
def test_serve_prints_the_console_url(live_server: Any) -> None:
    assert f"Web console: {live_server.url}/ui/" in live_server.log_path.read_text()
