"""[groups."name"] in the config file: parsed and validated with line numbers, the pure may-stay decision, and a
server over the fake llama-server where loading an exclusive group's member unloads the other models, each once
its request has ended."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ollama_py.api.names import parse_name
from ollama_py.config_file import Group, GroupTable, parse_config
from ollama_py.errors import ConfigError
from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.model_settings import plan_with_settings
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.app import create_app
from ollama_py.server.live_config import LiveConfig
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings


def test_groups_are_parsed_in_file_order() -> None:
    config = parse_config('[groups."box"]\nmembers = ["qwen3*", "smollm2:135m"]\nexclusive = true\n\n'
                          '[groups."pair"]\nmembers = ["a", "b"]\n')
    assert config.groups.groups == (Group("box", ("qwen3*", "smollm2:135m"), True), Group("pair", ("a", "b")))
    assert [g.line for g in config.groups.groups] == [1, 5]


@pytest.mark.parametrize(("text", "line", "words"), [
    ('[groups."g"]\nexclusive = true\n', 1, 'groups."g" needs members (model names or globs)'),
    ('[groups."g"]\nmembers = []\n', 2, 'groups."g".members must be a list of model names or globs'),
    ('[groups."g"]\nmembers = "a"\n', 2, 'groups."g".members must be a list of model names or globs'),
    ('[groups."g"]\nmembers = ["a", "bad name!"]\n', 2, "groups.\"g\".members: 'bad name!' is not a valid model"),
    ('[groups."g"]\nmembers = ["a"]\nexclusive = "yes"\n', 3, 'groups."g".exclusive must be true or false'),
    ('[groups."g"]\nmembers = ["a"]\nexclsive = true\n', 3, "unknown setting 'exclsive' in [groups.\"g\"] "
                                                            "(did you mean 'exclusive'?)"),
    ('groups = 3\n', 1, "'groups' must be tables"),
    ('[groups]\ng = 1\n', 2, 'groups."g" must be a table'),
    ('[group."g"]\nmembers = ["a"]\n', 1, "unknown table 'group'"),
], ids=["no-members", "empty-members", "members-not-a-list", "bad-member", "exclusive-not-bool", "typo",
        "not-tables", "group-not-a-table", "table-name-typo"])
def test_group_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, "config.toml")
    assert str(e.value).startswith(f"config.toml:{line}: ")
    assert words in str(e.value)


TABLE = GroupTable((Group("box", ("qwen3*",), exclusive=True), Group("pair", ("x", "y")),
                    Group("duo", ("solo", "a"), exclusive=True), Group("trio", ("solo", "a", "c"), exclusive=True)))


@pytest.mark.parametrize(("loading", "loaded", "stays"), [
    ("qwen3:8b", "qwen3:0.6b", True),
    ("qwen3:8b", "smollm2:135m", False),
    ("smollm2:135m", "qwen3:8b", True),
    ("x", "y", True),
    ("solo", "a", True),
    ("solo", "c", False),
    ("solo", "b", False),
], ids=["same-exclusive-group", "outside-the-exclusive-group", "loading-a-non-member", "plain-group",
        "in-every-exclusive-group", "in-one-of-two", "in-none"])
def test_may_stay(loading: str, loaded: str, stays: bool) -> None:
    assert TABLE.may_stay(parse_name(loading), parse_name(loaded)) is stays


# -- a server over the fake runner ---------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    """The app with this config file and three models on their own weights: tiny, other, big."""

    async def start(text: str, fake_env: dict[str, str] | None = None) -> Any:
        path = tmp_path / "config.toml"
        path.write_text(text)
        settings = make_settings(tmp_path, config_file=path, max_loaded_models=5)
        create_tiny_model(settings, tiny_gguf, "tiny")
        create_tiny_model(settings, write_tiny_gguf(tmp_path / "other.gguf", blocks=3), "other")
        create_tiny_model(settings, write_tiny_gguf(tmp_path / "big.gguf", blocks=4), "big")
        live = LiveConfig(settings)

        def plan(model: Any, options: dict[str, Any], embedding: bool):
            return plan_with_settings(live.for_model(model), settings, options,
                                      lambda s, o, r: plan_load(s, [], 1 << 40, model, o, embedding, runner=r))

        scheduler = Scheduler(settings, plan=plan, runner_factory=fake_runner_factory(settings, fake_env),
                              default_keep_alive=live.keep_alive, may_stay=live.may_stay)
        return await aiohttp_client(create_app(settings, scheduler=scheduler, live_config=live))

    return start


async def generate(client: Any, model: str, **options: Any) -> dict[str, Any]:
    r = await client.post("/api/generate", json={"model": model, "prompt": "hi", "stream": False,
                                                 "options": options})
    assert r.status == 200, await r.text()
    return await r.json()


async def loaded(client: Any) -> set[str]:
    return {m["name"] for m in (await (await client.get("/api/ps")).json())["models"]}


async def test_loading_an_exclusive_member_unloads_the_others(served) -> None:
    client = await served('[groups."alone"]\nmembers = ["big"]\nexclusive = true\n')
    await generate(client, "tiny")
    await generate(client, "other")
    assert await loaded(client) == {"tiny:latest", "other:latest"}
    await generate(client, "big")
    assert await loaded(client) == {"big:latest"}
    await generate(client, "tiny")  # tiny is in no exclusive group: it loads beside big
    assert await loaded(client) == {"big:latest", "tiny:latest"}


async def test_members_of_the_group_stay(served) -> None:
    client = await served('[groups."pair"]\nmembers = ["big", "ti*"]\nexclusive = true\n')
    await generate(client, "tiny")
    await generate(client, "other")
    await generate(client, "big")
    assert await loaded(client) == {"big:latest", "tiny:latest"}


async def test_a_busy_model_is_unloaded_only_after_its_request(served) -> None:
    client = await served('[groups."alone"]\nmembers = ["big"]\nexclusive = true\n',
                          {"FAKE_TOKEN_DELAY": "0.02", "FAKE_TOKENS": "60"})
    answering = asyncio.ensure_future(generate(client, "tiny", num_predict=60))
    while "tiny:latest" not in await loaded(client):
        await asyncio.sleep(0.01)
    big = await generate(client, "big", num_predict=1)
    assert answering.done()  # big waited for tiny's request to end
    assert (await answering)["eval_count"] == 60  # not cut short
    assert big["response"] and await loaded(client) == {"big:latest"}


def test_config_show_prints_the_groups_as_toml() -> None:
    from ollama_py.config_file import resolve, show

    config = parse_config('[groups."box"]\nmembers = ["qwen3*", "smollm2:135m"]\nexclusive = true\n')
    shown = show(resolve({}, config))
    assert '[groups."box"]  # line 1\nmembers = ["qwen3*", "smollm2:135m"]\nexclusive = true\n' in shown
    assert parse_config(shown).groups == config.groups
