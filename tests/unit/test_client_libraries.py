"""LiteLLM and LlamaIndex, unchanged, over the real app and the fake runner: what an application built on them
sends to an Ollama server -- LiteLLM's `ollama_chat/` (/api/chat), `ollama/` (/api/generate) and `openai/`
(/v1) providers, LlamaIndex's `Ollama` LLM and `OllamaEmbedding` -- answered as Ollama answers it: text, streamed
token by token, tool calls the library turns into its own, embeddings, the token limit's finish reason, a
missing model's 404. (LangChain's ChatOllama: test_langchain_ollama.py; ollama-js:
tests/integration/test_ollama_js.py.)

`serve` runs as its own process over the fake runner, as an application would reach it: both libraries make
blocking calls inside their async ones (LiteLLM asks /api/show for a model's details after a stream, LlamaIndex
reads its `metadata` from /api/show), which an app served on the test's own event loop would never answer."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM would fetch its price list from GitHub

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import litellm  # noqa: E402
import pytest  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.embeddings.ollama import OllamaEmbedding  # noqa: E402
from llama_index.llms.ollama import Ollama  # noqa: E402

from tests.fakes.gguf_files import write_tiny_gguf  # noqa: E402
from tests.helpers.processes import start_fake_serve  # noqa: E402
from tests.helpers.serve import stop_serve  # noqa: E402
from tests.helpers.tool_calls import CALL, GGUF_TEMPLATE, TOOLS, WORDS  # noqa: E402

ASK = [{"role": "user", "content": "Weather in Paris?"}]
SENTENCE = "".join(WORDS)


def _serve(tmp: Path, fake_env: dict[str, str]) -> Iterator[str]:
    """`serve` over the fake runner with the model "tiny" (a GGUF template that mentions tools)."""
    proc, url = start_fake_serve(tmp, write_tiny_gguf(tmp / "tiny.gguf", chat_template=GGUF_TEMPLATE), fake_env)
    try:
        yield url
    finally:
        stop_serve(proc)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The model answers the fake's sentence."""
    yield from _serve(tmp_path_factory.mktemp("serve"), {})


@pytest.fixture(scope="module")
def call_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The model answers with a call of get_weather for Paris."""
    yield from _serve(tmp_path_factory.mktemp("serve-call"), {"FAKE_REPLY": CALL})


# -- LiteLLM ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("provider", ["ollama_chat", "ollama"])
async def test_litellm_answers_and_counts(url: str, provider: str) -> None:
    reply = await litellm.acompletion(model=f"{provider}/tiny", api_base=url, messages=ASK)
    choice = reply.choices[0]
    assert choice.message.content.startswith(SENTENCE)
    assert choice.finish_reason == "stop"
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0


@pytest.mark.parametrize("provider", ["ollama_chat", "ollama"])
async def test_litellm_streams_token_by_token(url: str, provider: str) -> None:
    stream = await litellm.acompletion(model=f"{provider}/tiny", api_base=url, messages=ASK,
                                       stream=True)
    pieces = [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]
    assert pieces[:len(WORDS)] == WORDS


async def test_litellm_openai_provider_on_v1(url: str) -> None:
    reply = await litellm.acompletion(model="openai/tiny", api_base=url + "/v1", api_key="x",
                                      messages=ASK, max_tokens=3)
    assert reply.choices[0].message.content == "".join(WORDS[:3])
    assert reply.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
async def test_litellm_tool_call(call_url: str, stream: bool) -> None:
    reply = await litellm.acompletion(model="ollama_chat/tiny", api_base=call_url, messages=ASK, tools=TOOLS,
                                      stream=stream)
    if stream:
        chunks = [c async for c in reply]
        calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
        reason = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason][-1]
    else:
        calls, reason = reply.choices[0].message.tool_calls, reply.choices[0].finish_reason
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", '{"city": "Paris"}')]
    assert reason == "tool_calls"


async def test_litellm_token_limit_and_options(url: str) -> None:
    reply = await litellm.acompletion(model="ollama_chat/tiny", api_base=url, messages=ASK,
                                      max_tokens=3, temperature=0.2, top_p=0.9, seed=1, stop=["zzz"])
    assert reply.choices[0].message.content == "".join(WORDS[:3])
    assert reply.choices[0].finish_reason == "length"


async def test_litellm_embedding(url: str) -> None:
    reply = await litellm.aembedding(model="ollama/tiny", api_base=url, input=["hello", "world"])
    vectors = [d["embedding"] for d in reply.data]
    assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0
    assert vectors[0] != vectors[1]


async def test_litellm_missing_model_is_not_found(url: str) -> None:
    with pytest.raises(litellm.NotFoundError) as e:
        await litellm.acompletion(model="ollama_chat/nope", api_base=url, messages=ASK)
    assert "model 'nope' not found" in str(e.value)


# -- LlamaIndex ---------------------------------------------------------------------------------------------------

def llm(url: str) -> Ollama:
    return Ollama(model="tiny", base_url=url, request_timeout=30)


async def test_llamaindex_complete_and_chat(url: str) -> None:
    model = llm(url)
    assert (await model.acomplete("Hello")).text.startswith(SENTENCE)
    answer = await model.achat([ChatMessage(role="user", content="Hello")])
    assert answer.message.role == "assistant" and answer.message.content.startswith(SENTENCE)


async def test_llamaindex_streams_token_by_token(url: str) -> None:
    stream = await llm(url).astream_chat([ChatMessage(role="user", content="Hello")])
    deltas = [c.delta async for c in stream if c.delta]
    assert deltas[:len(WORDS)] == WORDS


async def test_llamaindex_metadata_from_show(url: str) -> None:
    meta = llm(url).metadata
    assert meta.is_chat_model and meta.is_function_calling_model and meta.model_name == "tiny"


async def test_llamaindex_tool_call(call_url: str) -> None:
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    model = llm(call_url)
    response = await model.achat_with_tools([FunctionTool.from_defaults(fn=get_weather)],
                                            user_msg="Weather in Paris?")
    [selection] = model.get_tool_calls_from_response(response)
    assert (selection.tool_name, selection.tool_kwargs) == ("get_weather", {"city": "Paris"})


async def test_llamaindex_embeddings(url: str) -> None:
    embed = OllamaEmbedding(model_name="tiny", base_url=url)
    one = await embed.aget_text_embedding("hello")
    batch = await embed.aget_text_embedding_batch(["hello", "world"])
    assert len(one) > 0 and [len(v) for v in batch] == [len(one), len(one)]
    assert batch[0] == pytest.approx(one)
