"""The Responses API translation (server/responses_translate.py): pure functions, no server."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ollama_py.errors import BadRequest
from ollama_py.server import responses_translate as rt
from tests.helpers.completions import final

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()


def test_a_string_input_with_instructions_is_a_system_and_a_user_message():
    p = rt.parse_responses({"model": "m", "input": "Hi", "instructions": "Be brief."})
    assert p.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert p.options == {"temperature": 1.0}  # top_p is left to the model unless given, as Ollama does
    assert (p.stream, p.tools, p.format, p.think) == (False, None, None, None)


def test_sampling_fields_become_options():
    p = rt.parse_responses({"input": "Hi", "temperature": 0, "top_p": 0.5, "max_output_tokens": 7})
    assert p.options == {"temperature": 0.0, "top_p": 0.5, "num_predict": 7}
    assert (p.echo["temperature"], p.echo["top_p"], p.echo["max_output_tokens"]) == (0.0, 0.5, 7)


def test_input_items_become_native_messages():
    p = rt.parse_responses({"input": [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is "}, {"type": "input_text", "text": "this?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
            {"type": "input_image", "file_id": "file-1"}]},
        {"type": "reasoning", "encrypted_content": "They want the weather."},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is 22 C."}]},
    ]})
    assert p.messages == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "What is this?", "images": [PNG]},
        {"role": "assistant", "content": "", "thinking": "They want the weather.",
         "tool_calls": [{"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "22 C", "tool_call_id": "call_1", "tool_name": "get_weather"},
        {"role": "assistant", "content": "It is 22 C."},
    ]


def test_a_function_call_joins_the_assistant_message_before_it():
    p = rt.parse_responses({"input": [
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}]})
    assert p.messages == [{"role": "assistant", "content": "Let me look.",
                           "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}]


def test_tools_json_schema_and_reasoning():
    p = rt.parse_responses({"input": "Hi", "reasoning": {"effort": "low"},
                            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                            "tools": [{"type": "function", "name": "f", "description": "d",
                                       "parameters": {"type": "object"}}]})
    assert p.tools == [{"type": "function", "function": {"name": "f", "description": "d",
                                                         "parameters": {"type": "object"}}}]
    assert p.format == {"type": "object"}
    assert p.think == "low"
    assert p.echo["reasoning"] == {"effort": "low", "summary": None}
    assert rt.parse_responses({"input": "Hi", "reasoning": {"effort": "none"}}).think is False


@pytest.mark.parametrize(("body", "message"), [
    ({"input": [{"type": "telepathy"}]}, 'input[0]: unknown input item type: "telepathy"'),
    ({"input": [{"content": "x"}]}, "input[0]: input item missing required 'type' field"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0]: invalid role 'robot'"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "file inputs are not currently supported"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{oops"}]},
     "input[0]: failed to parse function call arguments"),
    ({"input": 5}, "input must be a string or array"),
    ({"input": ""}, "input is required"),
    ({"input": "Hi", "reasoning": {"effort": "extreme"}},
     'invalid reasoning value: "extreme" (must be "minimal", "low", "medium", "high", "xhigh", "ultra", "max", '
     'or "none")'),
    ({"input": "Hi", "previous_response_id": "resp_1"}, "previous_response_id is not supported"),
    ({"input": "Hi", "tools": [{"type": "namespace", "name": "ns"}]}, 'tools[0]: a namespace needs a name and its'),
    ({"input": "Hi", "tools": [{"type": "function", "name": "f", "parameters": "x"}]},
     "tools[0].parameters must be a JSON schema object"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "invalid image input"),
    ({"input": "Hi", "tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark"}}]},
     "tools[0].format: a grammar needs its syntax and definition"),
    ({"input": "Hi", "tools": [{"type": "custom", "name": "c", "format": {"type": "json"}}]},
     "tools[0].format.type must be text or grammar"),
    ({"input": [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": {"x": 1}}]},
     "input[0]: a custom_tool_call needs a name and its input (a string)"),
    ({"input": [{"role": "user", "content": "Hi"}, {"type": "additional_tools", "tools": {"type": "function"}}]},
     "input[1]: additional_tools needs its tools (an array)"),
])
def test_bad_requests_are_refused_with_a_clear_message(body: dict[str, Any], message: str):
    with pytest.raises(BadRequest) as e:
        rt.parse_responses(body)
    assert message in str(e.value)


ECHO = rt.parse_responses({"input": "Hi"}).echo


def test_a_whole_response_has_the_message_and_the_usage():
    out = rt.response("resp_1", "msg_1", "smollm2", ECHO, final(text="Hello!", prompt_tokens=12, eval_count=3))
    assert (out["id"], out["object"], out["status"], out["model"]) == ("resp_1", "response", "completed", "smollm2")
    assert out["output"] == [{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": "Hello!", "annotations": [],
                                           "logprobs": []}]}]
    assert out["usage"]["input_tokens"] == 12 and out["usage"]["output_tokens"] == 3
    assert out["usage"]["total_tokens"] == 15


def test_a_whole_response_with_thinking_and_a_tool_call():
    calls = [{"id": "call_9", "function": {"name": "f", "arguments": {"a": 1}}}]
    out = rt.response("resp_1", "msg_1", "m", ECHO, final(text="", thinking="Hmm.", tool_calls=calls))
    assert [o["type"] for o in out["output"]] == ["reasoning", "function_call"]
    assert out["output"][0]["summary"] == [{"type": "summary_text", "text": "Hmm."}]
    assert (out["output"][1]["call_id"], out["output"][1]["arguments"]) == ("call_9", '{"a":1}')



def test_the_text_before_a_tool_call_is_a_message_item_ahead_of_it():
    calls = [{"id": "call_9", "function": {"name": "f", "arguments": {"a": 1}}}]
    out = rt.response("resp_1", "msg_1", "m", ECHO, final(text="Let me check. ", tool_calls=calls))
    assert [o["type"] for o in out["output"]] == ["message", "function_call"]
    assert out["output"][0]["content"][0]["text"] == "Let me check. "
    s = rt.ResponseStream("resp_1", "msg_1", "m", ECHO)
    events = [*s.text("Let me check. "), *s.finish(final(text="Let me check. ", tool_calls=calls))]
    done = [d["item"]["type"] for k, d in events if k == "response.output_item.done"]
    assert done == ["message", "function_call"]
    assert [o["type"] for o in events[-1][1]["response"]["output"]] == ["message", "function_call"]

def test_the_stream_of_events():
    s = rt.ResponseStream("resp_1", "msg_1", "m", ECHO)
    events = [*s.thinking("Hmm."), *s.text("Hel"), *s.text("lo"), *s.text(""),
              *s.finish(final(text="Hello", thinking="Hmm."))]
    assert [k for k, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    assert all(k == d["type"] for k, d in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert [d["output_index"] for k, d in events if k == "response.output_text.delta"] == [1, 1]
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert [o["type"] for o in completed["output"]] == ["reasoning", "message"]
    assert completed["output"][1]["content"][0]["text"] == "Hello"


@pytest.mark.parametrize(("effort", "think"), [
    ("minimal", "low"), ("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "max"), ("ultra", "max"),
    ("max", "max"), ("none", False), ("", None), (None, None),
])
def test_every_effort_ollama_maps(effort: Any, think: Any):
    assert rt.parse_responses({"input": "Hi", "reasoning": {"effort": effort}}).think == think


NAMESPACE = {"type": "namespace", "name": "muse", "description": "Muse tools", "tools": [
    {"type": "function", "name": "bash", "description": "Runs a command", "strict": True,
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"type": "function", "name": "muse.read_file", "description": "Reads a file", "parameters": {"type": "object"}},
]}


def test_a_namespace_expands_to_qualified_functions_and_web_search_is_not_offered():
    params = rt.parse_responses({"input": "Hi", "tools": [
        NAMESPACE, {"type": "web_search", "external_web_access": False},
        {"type": "function", "name": "web_search", "parameters": {"type": "object"}},  # the built-in owns the name
        {"type": "function", "name": "plain", "parameters": {"type": "object"}},
        {"type": "local_shell"}]})
    assert [t["function"]["name"] for t in params.tools or []] == ["muse.bash", "muse.read_file", "plain"]
    assert params.tools and params.tools[0]["function"]["parameters"]["required"] == ["command"]
    assert params.tools[0]["function"]["description"] == "Runs a command"
    assert params.offered.namespaces == {"muse.bash": ("muse", "bash"), "muse.read_file": ("muse", "read_file")}
    assert params.echo["tools"][0] is NAMESPACE  # the client sees its own declarations


def test_a_call_of_a_namespace_member_goes_back_with_its_namespace():
    params = rt.parse_responses({"input": "Hi", "tools": [NAMESPACE]})
    call = {"id": "call_1", "function": {"name": "muse.bash", "arguments": {"command": "ls"}}}
    out = rt.response("resp_1", "msg_1", "m", params.echo, final(text="", tool_calls=[call]), params.offered)
    item = out["output"][-1]
    assert (item["type"], item["namespace"], item["name"], json.loads(item["arguments"])) == (
        "function_call", "muse", "bash", {"command": "ls"})
    stream = rt.ResponseStream("resp_1", "msg_1", "m", params.echo, params.offered)
    done = [d["item"] for k, d in stream.finish(final(text="", tool_calls=[call])) if k == "response.output_item.done"]
    assert (done[-1]["namespace"], done[-1]["name"]) == ("muse", "bash")
    # ... and comes back in the next request's history under the name the model was offered
    history = rt.parse_responses({"input": [
        {"type": "function_call", "namespace": "muse", "name": "bash", "arguments": '{"command": "ls"}',
         "call_id": "call_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}}]})
    assert history.messages[0]["tool_calls"][0]["function"]["name"] == "muse.bash"
    assert history.messages[1] == {"role": "tool", "content": "a.txt", "tool_call_id": "call_1",
                                   "tool_name": "muse.bash"}


def test_fields_codex_sends_are_accepted():
    params = rt.parse_responses({"input": "Hi", "store": False, "include": ["reasoning.encrypted_content"],
                                 "prompt_cache_key": "conv-1", "client_metadata": {"x": "y"},
                                 "parallel_tool_calls": False, "tool_choice": "auto", "service_tier": "auto"})
    assert params.messages == [{"role": "user", "content": "Hi"}]
    assert rt.response("resp_1", "msg_1", "m", params.echo, final())["prompt_cache_key"] == "conv-1"
    assert rt.parse_responses({"input": "Hi", "tools": [NAMESPACE], "tool_choice": "none"}).tools is None


APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark", "definition": 'start: begin_patch hunk+ end_patch'}}


def test_a_custom_tool_is_offered_as_a_function_of_one_string_that_names_its_grammar():
    params = rt.parse_responses({"input": "Hi", "tools": [
        APPLY_PATCH, {"type": "custom", "name": "note"},
        {"type": "namespace", "name": "ed", "tools": [{"type": "custom", "name": "replace",
                                                       "format": {"type": "text"}}]}]})
    fns = [t["function"] for t in params.tools or []]
    assert [f["name"] for f in fns] == ["apply_patch", "note", "ed.replace"]
    assert all(f["parameters"]["required"] == ["input"] for f in fns)
    assert all(f["parameters"]["properties"]["input"]["type"] == "string" for f in fns)
    assert fns[0]["description"] == "Edit files."
    assert "lark grammar:\nstart: begin_patch hunk+ end_patch" in fns[0]["parameters"]["properties"]["input"][
        "description"]
    assert "grammar" not in fns[1]["parameters"]["properties"]["input"]["description"]
    assert params.offered.custom == {"apply_patch", "note", "ed.replace"}
    assert params.offered.namespaces == {"ed.replace": ("ed", "replace")}


@pytest.mark.parametrize(("arguments", "text"), [
    ({"input": "*** Begin Patch\n*** End Patch"}, "*** Begin Patch\n*** End Patch"),
    ({"patch": "the one string, named otherwise"}, "the one string, named otherwise"),
    ({}, ""),
    ({"a": 1, "b": "x"}, '{"a":1,"b":"x"}'),
])
def test_a_call_of_a_custom_tool_goes_back_with_its_text_as_input(arguments: dict[str, Any], text: str):
    params = rt.parse_responses({"input": "Hi", "tools": [APPLY_PATCH, {"type": "function", "name": "ls"}]})
    calls = [{"id": "call_1", "function": {"name": "apply_patch", "arguments": arguments}},
             {"id": "call_2", "function": {"name": "ls", "arguments": {}}}]
    out = rt.response("resp_1", "msg_1", "m", params.echo, final(text="", tool_calls=calls), params.offered)
    custom, function = out["output"]
    assert (custom["type"], custom["name"], custom["call_id"], custom["input"]) == (
        "custom_tool_call", "apply_patch", "call_1", text)
    assert custom["id"].startswith("ctc_") and "arguments" not in custom
    assert (function["type"], function["arguments"]) == ("function_call", "{}")

    stream = rt.ResponseStream("resp_1", "msg_1", "m", params.echo, params.offered)
    events = list(stream.finish(final(text="", tool_calls=calls)))
    kinds = [k for k, _ in events]
    first = kinds[:kinds.index("response.output_item.done") + 1]
    assert first == ["response.created", "response.in_progress", "response.output_item.added",
                     *(["response.custom_tool_call_input.delta"] if text else []),
                     "response.custom_tool_call_input.done", "response.output_item.done"]
    data = dict(events[kinds.index("response.custom_tool_call_input.done")][1])
    assert (data["input"], data["item_id"], data["output_index"]) == (text, custom["id"], 0)
    assert events[2][1]["item"]["input"] == "" and events[2][1]["item"]["type"] == "custom_tool_call"
    assert events[-1][1]["response"]["output"] == out["output"]


def test_a_custom_tool_call_and_its_output_in_the_history():
    params = rt.parse_responses({"input": [
        {"role": "user", "content": "Add a file"},
        {"type": "reasoning", "encrypted_content": "A patch will do."},
        {"type": "custom_tool_call", "call_id": "c1", "name": "replace", "namespace": "ed", "input": "a -> b"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}]})
    assert params.messages[1:] == [
        {"role": "assistant", "content": "", "thinking": "A patch will do.",
         "tool_calls": [{"function": {"name": "ed.replace", "arguments": {"input": "a -> b"}}, "id": "c1"}]},
        {"role": "tool", "content": "Done", "tool_call_id": "c1", "tool_name": "ed.replace"}]


def test_tools_declared_in_an_additional_tools_item_are_offered_with_the_requests_own():
    """Codex's newest models get their tools so: a developer input item, a `functions` namespace in it."""
    params = rt.parse_responses({"tools": [{"type": "function", "name": "ls"}], "input": [
        {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "description": "", "tools": [
                {"type": "custom", "name": "exec", "description": "Run JavaScript"},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}}]}]},
        {"role": "user", "content": "Hi"}]})
    assert [t["function"]["name"] for t in params.tools or []] == ["ls", "functions.exec", "functions.wait"]
    assert params.messages == [{"role": "user", "content": "Hi"}]
    assert params.echo["tools"] == [{"type": "function", "name": "ls"}]
    call = {"id": "call_1", "function": {"name": "functions.exec", "arguments": {"input": "text(1)"}}}
    [item] = rt.response("resp_1", "msg_1", "m", params.echo, final(text="", tool_calls=[call]),
                         params.offered)["output"]
    assert (item["type"], item["namespace"], item["name"], item["input"]) == (
        "custom_tool_call", "functions", "exec", "text(1)")


SEARCH = {"type": "tool_search", "execution": "client", "description": "Finds deferred tools.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
                         "required": ["query"]}}


def test_a_client_run_tool_search_is_offered_and_its_call_goes_back_for_the_client_to_run():
    params = rt.parse_responses({"input": "Hi", "tools": [SEARCH, {"type": "function", "name": "ls"},
                                                          {"type": "tool_search"}]})  # a server-side one: not here
    assert [t["function"]["name"] for t in params.tools or []] == ["tool_search", "ls"]
    assert params.tools and params.tools[0]["function"]["parameters"] == SEARCH["parameters"]
    call = {"id": "call_1", "function": {"name": "tool_search", "arguments": {"query": "agents", "limit": 2}}}
    [item] = rt.response("resp_1", "msg_1", "m", params.echo, final(text="", tool_calls=[call]),
                         params.offered)["output"]
    assert item == {"id": "ts_resp_1_0", "type": "tool_search_call", "execution": "client", "status": "completed",
                    "call_id": "call_1", "arguments": {"query": "agents", "limit": 2}}
    stream = rt.ResponseStream("resp_1", "msg_1", "m", params.echo, params.offered)
    kinds = [k for k, _ in stream.finish(final(text="", tool_calls=[call]))]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"]


def test_the_tools_a_search_loaded_are_offered_and_the_model_is_told_which():
    loaded = {"type": "namespace", "name": "multi_agent", "description": "", "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
        {"type": "function", "name": "wait_agent", "parameters": {"type": "object"}}]}
    params = rt.parse_responses({"tools": [SEARCH, {"type": "function", "name": "ls"}], "input": [
        {"role": "user", "content": "Start a helper"},
        {"type": "tool_search_call", "call_id": "c1", "execution": "client", "arguments": {"query": "agent"}},
        {"type": "tool_search_output", "call_id": "c1", "execution": "client", "status": "completed",
         "tools": [loaded, {"type": "function", "name": "ls"}]}]})
    assert [t["function"]["name"] for t in params.tools or []] == [
        "tool_search", "ls", "multi_agent.spawn_agent", "multi_agent.wait_agent"]  # "ls" once
    assert params.messages[1:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "tool_search", "arguments": {"query": "agent"}}, "id": "c1"}]},
        {"role": "tool", "content": "Tools loaded: multi_agent.spawn_agent, multi_agent.wait_agent, ls",
         "tool_call_id": "c1", "tool_name": "tool_search"}]
    with pytest.raises(BadRequest, match=r"input\[0\]: tool_search_output needs its tools"):
        rt.parse_responses({"input": [{"type": "tool_search_output", "call_id": "c1", "tools": None}]})
