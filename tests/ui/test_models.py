"""The console's models view in a real browser: list, details, copy, delete, create, pull with progress, cancel.

Pulls come from Debian's docker-registry on loopback (tests/registry_fixture.py) holding the tiny GGUF model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from ollama_py.api.names import parse_name
from ollama_py.store.models import ModelStore
from ollama_py.store.registry import RegistryOptions, push_model
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.screens import shoot
from tests.registry_fixture import BlobProxy, Rule, registry

__all__ = ["registry"]  # the fixture, imported for pytest
pytestmark = pytest.mark.browser


def open_models(page: Any, url: str) -> None:
    page.goto(f"{url}/ui/#models")
    expect(page.locator("#models-table tbody tr").first).to_be_visible()


def row(page: Any, name: str) -> Any:
    return page.locator(f'#models-table tbody tr[data-model="{name}"]')


def test_list_details_copy_and_delete(page: Any, fake_console: Any) -> None:
    console = fake_console()
    open_models(page, console.url)
    expect(row(page, "tiny:latest")).to_contain_text("llama")  # the family column

    row(page, "tiny:latest").get_by_role("button", name="Details").click()
    details = page.locator("#model-details")
    expect(details).to_contain_text("Capabilities")
    expect(details).to_contain_text("completion")
    expect(details.locator("h3", has_text="Modelfile")).to_be_visible()

    row(page, "tiny:latest").get_by_role("button", name="Copy").click()
    page.fill("#confirm-input", "tiny-copy:1")
    page.click("#confirm-ok")
    expect(row(page, "tiny-copy:1")).to_be_visible()

    row(page, "tiny-copy:1").get_by_role("button", name="Delete").click()
    expect(page.locator("#confirm-text")).to_contain_text("Delete tiny-copy:1?")
    page.click("#confirm-ok")
    expect(row(page, "tiny-copy:1")).to_have_count(0)
    expect(row(page, "tiny:latest")).to_be_visible()  # the original stays
    shoot(page, "models")


def test_delete_can_be_called_off(page: Any, fake_console: Any) -> None:
    console = fake_console()
    open_models(page, console.url)
    row(page, "tiny:latest").get_by_role("button", name="Delete").click()
    page.locator("#confirm-dialog").get_by_role("button", name="Cancel").click()
    expect(row(page, "tiny:latest")).to_be_visible()


def test_create_from_a_modelfile(page: Any, fake_console: Any) -> None:
    console = fake_console()
    open_models(page, console.url)
    page.fill("#create-name", "pirate:latest")
    page.fill("#create-modelfile", "FROM tiny\nSYSTEM You are a pirate.\nPARAMETER temperature 0.3\n")
    page.click("#create-start")
    expect(page.locator("#create-status")).to_contain_text("success")
    expect(row(page, "pirate:latest")).to_be_visible()
    row(page, "pirate:latest").get_by_role("button", name="Details").click()
    expect(page.locator("#model-details")).to_contain_text("You are a pirate.")


def test_create_reports_a_bad_modelfile(page: Any, fake_console: Any) -> None:
    console = fake_console()
    open_models(page, console.url)
    page.fill("#create-name", "broken")
    page.fill("#create-modelfile", "SYSTEM no FROM here\n")
    page.click("#create-start")
    expect(page.locator("#create-status")).to_contain_text("error: no FROM line")
    expect(row(page, "broken:latest")).to_have_count(0)


def publish_tiny(reg: Any, tmp: Path, repo_tag: str, *, blocks: int) -> str:
    """A small model (weights the console's store does not have yet) pushed to the registry; its full name."""
    settings = make_settings(tmp / "publisher")
    name = reg.model(repo_tag)
    create_tiny_model(settings, write_tiny_gguf(tmp / f"{blocks}.gguf", blocks=blocks, embd=128), name=name)
    for _ in push_model(ModelStore(settings.models), parse_name(name), options=RegistryOptions(insecure=True)):
        pass
    return name


@pytest.mark.registry
def test_pull_shows_each_layer_reaching_100_percent(page: Any, fake_console: Any, registry: Any,
                                                    tmp_path: Path) -> None:
    name = publish_tiny(registry, tmp_path, "test/pulled:1", blocks=3)
    console = fake_console()
    open_models(page, console.url)
    page.fill("#pull-name", name)
    page.check("#pull-insecure")
    page.click("#pull-start")
    expect(page.locator("#pull-status")).to_have_text("success")
    layers = page.locator("#pull-layers .layer")
    expect(layers).not_to_have_count(0)
    for i in range(layers.count()):
        expect(layers.nth(i).locator(".pct")).to_have_text("100 %")
        expect(layers.nth(i).locator("progress")).to_have_attribute("value", "100")
    expect(row(page, name)).to_be_visible()
    shoot(page, "pull")


@pytest.mark.registry
def test_cancel_stops_a_pull(page: Any, fake_console: Any, registry: Any, tmp_path: Path) -> None:
    publish_tiny(registry, tmp_path, "test/slow:1", blocks=4)
    with BlobProxy(registry.url) as proxy:
        for blob in (tmp_path / "publisher" / "models" / "blobs").iterdir():  # every blob trickles in
            proxy.rules[blob.name.replace("sha256-", "sha256:")] = Rule(rate=32 * 1024)
        slow = proxy.model("test/slow:1")
        console = fake_console()
        open_models(page, console.url)
        page.fill("#pull-name", slow)
        page.check("#pull-insecure")
        page.click("#pull-start")
        expect(page.locator("#pull-layers .layer").first).to_be_visible()
        page.click("#pull-cancel")
        expect(page.locator("#pull-status")).to_have_text("canceled")
        expect(page.locator("#pull-start")).to_be_enabled()
        assert re.search(r"\d+ %", page.locator("#pull-layers .pct").first.inner_text())
        expect(row(page, slow)).to_have_count(0)


def test_with_no_models_the_chat_points_to_the_models_page(page: Any, fake_console: Any) -> None:
    console = fake_console()
    requests.delete(f"{console.url}/api/delete", json={"model": "tiny"}, timeout=30).raise_for_status()
    page.goto(f"{console.url}/ui/")
    expect(page.locator("#messages .hint")).to_contain_text("no local model yet")
    page.locator("#messages .hint a").click()
    expect(page.locator("#models-empty")).to_be_visible()
    expect(page.locator("#pull-form")).to_be_visible()
