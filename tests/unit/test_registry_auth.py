"""The pure parts of the registry client: WWW-Authenticate challenges, token URLs, credentials files, download
part planning and the saved part state a resumed download starts from."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from ollama_py.errors import Unauthorized
from ollama_py.store.download_state import Part, check_parts, plan_parts, read_part_state, write_part_state
from ollama_py.store.registry_auth import Challenge, load_credentials, parse_challenge, parse_challenges, token_url

MB = 1000 * 1000


@pytest.mark.parametrize(("header", "expected"), [
    pytest.param('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                 'scope="repository:library/ubuntu:pull"',
                 [Challenge("bearer", "https://auth.docker.io/token", "registry.docker.io",
                            "repository:library/ubuntu:pull")], id="docker-hub"),
    pytest.param('Bearer realm="https://ollama.com/token",service="ollama.com",scope="repository:a/b:pull,push"',
                 [Challenge("bearer", "https://ollama.com/token", "ollama.com", "repository:a/b:pull,push")],
                 id="comma-inside-quotes"),
    pytest.param('Basic realm="Registry Realm"', [Challenge("basic", "Registry Realm")], id="basic"),
    pytest.param('bearer realm=https://r.example/t, service=r.example',
                 [Challenge("bearer", "https://r.example/t", "r.example")], id="unquoted-lowercase-spaces"),
    pytest.param('Bearer realm="r",error="invalid_token",error_description="the token \\"x\\" expired"',
                 [Challenge("bearer", "r", error="invalid_token")], id="escaped-quote"),
    pytest.param('Basic realm="a", Bearer realm="https://t/",service="s"',
                 [Challenge("basic", "a"), Challenge("bearer", "https://t/", "s")], id="two-challenges"),
    pytest.param('Bearer realm="r",scope="repository:a:pull repository:b:pull"',
                 [Challenge("bearer", "r", scope="repository:a:pull repository:b:pull")], id="two-scopes"),
    pytest.param("", [], id="empty"),
    pytest.param("Negotiate", [Challenge("negotiate")], id="scheme-only"),
])
def test_parse_challenges(header: str, expected: list[Challenge]) -> None:
    assert parse_challenges(header) == expected


@pytest.mark.parametrize(("header", "scheme"), [
    pytest.param('Basic realm="a", Bearer realm="https://t/"', "bearer", id="bearer-preferred"),
    pytest.param('Basic realm="a"', "basic", id="basic"),
    pytest.param("Negotiate", None, id="unsupported"),
    pytest.param("", None, id="none"),
])
def test_parse_challenge_picks_what_we_can_answer(header: str, scheme: str | None) -> None:
    challenge = parse_challenge(header)
    assert (challenge.scheme if challenge else None) == scheme


@pytest.mark.parametrize(("challenge", "kw", "query"), [
    pytest.param(Challenge("bearer", "https://auth.docker.io/token", "registry.docker.io",
                           "repository:library/ubuntu:pull"), {},
                 [("service", "registry.docker.io"), ("scope", "repository:library/ubuntu:pull")], id="plain"),
    pytest.param(Challenge("bearer", "https://t.example/token", "svc", "repository:a:pull repository:b:pull"), {},
                 [("service", "svc"), ("scope", "repository:a:pull"), ("scope", "repository:b:pull")],
                 id="one-scope-param-each"),
    pytest.param(Challenge("bearer", "https://ollama.com/token", "ollama.com", "repository:x/y:pull"),
                 {"ts": 1700000000, "nonce": "bm9uY2U"},
                 [("service", "ollama.com"), ("scope", "repository:x/y:pull"), ("ts", "1700000000"),
                  ("nonce", "bm9uY2U")], id="signed"),
    pytest.param(Challenge("bearer", "https://t.example/token?client=x", "", ""), {},
                 [("client", "x")], id="realm-query-kept"),
])
def test_token_url(challenge: Challenge, kw: dict, query: list[tuple[str, str]]) -> None:
    url = token_url(challenge, **kw)
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == challenge.realm.split("?")[0]
    assert parse_qsl(parts.query) == query


def test_token_url_refuses_a_realm_that_is_not_a_url() -> None:
    with pytest.raises(Unauthorized):
        token_url(Challenge("bearer", "Registry Realm"))


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@pytest.mark.parametrize(("files", "host", "expected"), [
    pytest.param([{"auths": {"127.0.0.1:5000": {"auth": _b64("u:p")}}}], "127.0.0.1:5000", ("u", "p"), id="auth"),
    pytest.param([{"auths": {"r.example": {"username": "u", "password": "p:q"}}}], "r.example", ("u", "p:q"),
                 id="username-password"),
    pytest.param([{"auths": {"https://R.example/v1/": {"auth": _b64("u:p")}}}], "r.example", ("u", "p"),
                 id="scheme-path-case"),
    pytest.param([{"auths": {"r.example": {"auth": _b64("u:p")}}}], "r.example:5000", None, id="port-matters"),
    pytest.param([{"auths": {"r.example": {"auth": "not base64!"}}}, {"auths": {"r.example": {"auth": _b64("a:b")}}}],
                 "r.example", ("a", "b"), id="bad-entry-falls-through"),
    pytest.param([{"auths": {"r.example": {"auth": _b64("first:1")}}}, {"auths": {"r.example": {"auth": _b64("x:2")}}}],
                 "r.example", ("first", "1"), id="first-file-wins"),
    pytest.param([{"credsStore": "desktop"}], "r.example", None, id="no-auths"),
    pytest.param(["not json"], "r.example", None, id="unreadable-file"),
])
def test_load_credentials(tmp_path: Path, files: list, host: str, expected: tuple[str, str] | None) -> None:
    paths = []
    for i, content in enumerate(files):
        path = tmp_path / f"config{i}.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        paths.append(path)
    paths.append(tmp_path / "missing.json")
    assert load_credentials(host, paths) == expected


@pytest.mark.parametrize(("total", "kw", "expected"), [
    pytest.param(98 * MB, {}, [(0, 98 * MB)], id="under-the-minimum-one-part"),
    pytest.param(3200 * MB, {}, [(i * 200 * MB, 200 * MB) for i in range(16)], id="sixteen-parts"),
    pytest.param(250 * MB, {}, [(0, 100 * MB), (100 * MB, 100 * MB), (200 * MB, 50 * MB)], id="min-clamp-short-last"),
    pytest.param(32000 * MB, {}, [(i * 1000 * MB, 1000 * MB) for i in range(32)], id="max-clamp"),
    pytest.param(1000, {"min_size": 300}, [(0, 300), (300, 300), (600, 300), (900, 100)], id="small-parts"),
    pytest.param(0, {}, [], id="empty-blob"),
])
def test_plan_parts(total: int, kw: dict, expected: list[tuple[int, int]]) -> None:
    parts = plan_parts(total, **kw)
    assert [(p.offset, p.size) for p in parts] == expected
    assert [p.n for p in parts] == list(range(len(parts)))
    assert all(p.completed == 0 for p in parts)


@pytest.mark.parametrize(("parts", "total", "ok"), [
    pytest.param([Part(1, 10, 5, 5), Part(0, 0, 10, 3)], 15, True, id="unordered"),
    pytest.param([Part(0, 0, 10), Part(1, 11, 4)], 15, False, id="gap"),
    pytest.param([Part(0, 0, 10), Part(1, 9, 6)], 15, False, id="overlap"),
    pytest.param([Part(0, 0, 10)], 15, False, id="short"),
    pytest.param([Part(0, 0, 10), Part(3, 10, 5)], 15, False, id="bad-numbers"),
])
def test_check_parts(parts: list[Part], total: int, ok: bool) -> None:
    if ok:
        assert [p.offset for p in check_parts(parts, total)] == sorted(p.offset for p in parts)
    else:
        with pytest.raises(ValueError):
            check_parts(parts, total)


@pytest.mark.parametrize("obj", [
    pytest.param({"N": 0, "Offset": 0, "Size": 10, "Completed": 11}, id="more-than-size"),
    pytest.param({"N": 0, "Offset": 0, "Size": 10}, id="missing-field"),
    pytest.param({"N": 0, "Offset": -1, "Size": 10, "Completed": 0}, id="negative"),
    pytest.param({"N": True, "Offset": 0, "Size": 10, "Completed": 0}, id="bool"),
    pytest.param([0, 0, 10, 0], id="not-an-object"),
])
def test_part_state_rejects_nonsense(obj: object) -> None:
    with pytest.raises(ValueError):
        Part.from_json(obj)


def test_part_state_round_trip_in_ollamas_format(tmp_path: Path) -> None:
    data = tmp_path / ("sha256-" + "a" * 64 + "-partial")
    data.write_bytes(b"\0" * 250)
    parts = plan_parts(250, min_size=100)
    parts[0].completed, parts[2].completed = 100, 7
    for part in parts:
        write_part_state(data, part)
    # Ollama's field names, one file per part: sha256-<hex>-partial-<n>
    assert json.loads((tmp_path / (data.name + "-2")).read_text()) == {"N": 2, "Offset": 200, "Size": 50,
                                                                       "Completed": 7}
    resumed = read_part_state(data, 250)
    assert resumed == parts


@pytest.mark.parametrize("damage", ["data-missing", "data-wrong-size", "state-garbled", "state-missing-part"])
def test_unusable_part_state_means_start_over(tmp_path: Path, damage: str) -> None:
    data = tmp_path / ("sha256-" + "b" * 64 + "-partial")
    data.write_bytes(b"\0" * 250)
    for part in plan_parts(250, min_size=100):
        write_part_state(data, part)
    if damage == "data-missing":
        data.unlink()
    elif damage == "data-wrong-size":
        data.write_bytes(b"\0" * 249)
    elif damage == "state-garbled":
        (tmp_path / (data.name + "-1")).write_text('{"N": 1, "Off')
    else:
        (tmp_path / (data.name + "-1")).unlink()
    assert read_part_state(data, 250) is None


def test_no_part_state_means_nothing_to_resume(tmp_path: Path) -> None:
    assert read_part_state(tmp_path / ("sha256-" + "c" * 64 + "-partial"), 10) is None
