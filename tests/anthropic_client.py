"""Drive Hearth's Anthropic door (POST /v1/messages and /v1/messages/count_tokens) with the official
`anthropic` Python package, as a Claude client would, and check every answer against the package's
own types (`model_validate` on the raw JSON, events included).

Written from Anthropic's API reference and the package's types, not from Hearth's code. The model
is tiny (SmolLM2-135M-Instruct): its words are nonsense and it never picks a tool on its own, so
answers are compared with each other (streamed against whole, greedy), never with expected text.

Usage: python tests/anthropic_client.py BASE_URL MODEL_ID
Exits non-zero (with an assertion message that shows the offending JSON) when anything is off.
"""
import json
import os
import sys
import typing
import urllib.error
import urllib.request

import anthropic
import jsonschema
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HAIKU = [{"role": "user", "content": "Write a haiku about autumn."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon."}]
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
# Sampling knobs go in the body: the package dropped temperature/top_p/top_k from its signatures
# in 1.x (newer Claude models fix them), but the API takes them and Hearth honours them.
GREEDY = {"temperature": 0}
STOP_REASONS = set(typing.get_args(anthropic.types.StopReason))

BASE = MODEL = None


def event_types(union):
    """{type literal: class} for a union of event classes, to validate each event by its own class."""
    while typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in typing.get_args(union)}


EVENTS = event_types(RawMessageStreamEvent)


def show(obj, n=1200):
    return json.dumps(obj)[:n]


def validate_message(body, where):
    """`body` (raw JSON) is a whole Message: the package's type validates it, and the fields the
    API always sends (nullable ones included) are there with sensible values."""
    try:
        msg = Message.model_validate(body)
    except Exception as e:  # pydantic's ValidationError, said whole
        raise AssertionError(f"{where}: not a valid Message: {e}\n{show(body)}") from None
    for key in ("id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"):
        assert key in body, f"{where}: no {key!r}: {show(body)}"
    assert body["type"] == "message" and body["role"] == "assistant", f"{where}: {show(body)}"
    assert body["id"].startswith("msg_"), f"{where}: id {body['id']!r} is not msg_…"
    assert body["model"] == MODEL, f"{where}: model {body['model']!r} is not {MODEL!r}"
    assert body["stop_reason"] in STOP_REASONS, f"{where}: stop_reason: {show(body)}"
    assert (body["stop_sequence"] is not None) == (body["stop_reason"] == "stop_sequence"), \
        f"{where}: stop_sequence and stop_reason disagree: {show(body)}"
    usage = body["usage"]
    for key in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        assert type(usage.get(key)) is int and usage[key] >= 0, f"{where}: usage.{key}: {show(usage)}"
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, f"{where}: usage: {show(usage)}"
    for block in body["content"]:
        assert block["type"] in ("text", "tool_use", "thinking", "redacted_thinking"), f"{where}: {show(block)}"
        if block["type"] == "tool_use":
            assert block["id"].startswith("toolu_") and isinstance(block["input"], dict), f"{where}: {show(block)}"
    return msg


def create(client, where, **kw):
    """messages.create, the raw JSON validated; returns (json, Message)."""
    raw = client.messages.with_raw_response.create(model=MODEL, **kw)
    assert raw.http_response.status_code == 200, raw.http_response.status_code
    assert raw.http_response.headers["content-type"].startswith("application/json"), raw.http_response.headers
    body = raw.http_response.json()
    msg = validate_message(body, where)
    raw.parse()  # the package's own reading of it
    return body, msg


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def http(method, path, data=None, headers=None):
    """A bare request (no package): (status, headers, body bytes)."""
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def sse(path, body):
    """POST `body` and read the server-sent events: [(event name, data JSON)], pings included."""
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})
    events, name, data = [], None, []
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200, r.status
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers["content-type"]
        for raw in r:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:
                    events.append((name, json.loads("\n".join(data))))
                name, data = None, []
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:][1:] if line[5:].startswith(" ") else line[5:])
    if data:
        events.append((name, json.loads("\n".join(data))))
    return events


DELTAS = {"text": {"text_delta", "citations_delta"}, "tool_use": {"input_json_delta"},
          "thinking": {"thinking_delta", "signature_delta"}}


def check_stream(events, where):
    """The exact order Anthropic documents: message_start; per block content_block_start,
    content_block_delta*, content_block_stop, indexes 0, 1, … in turn; message_delta; message_stop;
    pings anywhere after message_start. Every event valid for the package's type, named by its
    `event:` line. Returns what it adds up to."""
    assert events, f"{where}: no events"
    for name, data in events:
        assert name == data.get("type"), f"{where}: event {name!r} carries {show(data)}"
    kinds = [d["type"] for _, d in events]
    assert kinds[0] == "message_start", f"{where}: first event {kinds[0]}: {kinds}"
    blocks, open_, delta, stopped = [], None, None, False
    start = events[0][1]
    for _, d in events:
        kind = d["type"]
        assert not stopped, f"{where}: {kind} after message_stop: {kinds}"
        if kind == "ping":
            continue
        assert kind != "error", f"{where}: an error event: {show(d)}"
        assert kind in EVENTS, f"{where}: an event type the package does not know: {show(d)}"
        try:
            EVENTS[kind].model_validate(d)
        except Exception as e:
            raise AssertionError(f"{where}: not a valid {kind} event: {e}\n{show(d)}") from None
        if kind == "message_start":
            assert d is start, f"{where}: a second message_start: {kinds}"
            m = d["message"]
            assert m["content"] == [] and m["stop_reason"] is None and m["role"] == "assistant", f"{where}: {show(d)}"
            assert m["id"].startswith("msg_") and m["model"] == MODEL, f"{where}: {show(d)}"
            assert m["usage"]["input_tokens"] > 0, f"{where}: message_start usage: {show(d)}"
        elif kind == "content_block_start":
            assert open_ is None and delta is None, f"{where}: block starts inside another: {kinds}"
            assert d["index"] == len(blocks), f"{where}: block index {d['index']} after {len(blocks)}: {show(d)}"
            block = d["content_block"]
            if block["type"] == "text":
                assert block["text"] == "", f"{where}: a text block starts non-empty: {show(d)}"
            if block["type"] == "tool_use":
                assert block["input"] == {} and block["id"].startswith("toolu_"), f"{where}: {show(d)}"
            blocks.append({"block": block, "pieces": []})
            open_ = d["index"]
        elif kind == "content_block_delta":
            assert d["index"] == open_, f"{where}: delta for block {d['index']} while {open_} is open: {show(d)}"
            btype = blocks[open_]["block"]["type"]
            assert d["delta"]["type"] in DELTAS.get(btype, ()), f"{where}: {d['delta']['type']} in a {btype} block"
            piece = d["delta"].get("text", d["delta"].get("partial_json", d["delta"].get("thinking", "")))
            blocks[open_]["pieces"].append(piece)
        elif kind == "content_block_stop":
            assert d["index"] == open_, f"{where}: stop for block {d['index']} while {open_} is open: {show(d)}"
            open_ = None
        elif kind == "message_delta":
            assert open_ is None and delta is None, f"{where}: message_delta out of place: {kinds}"
            assert d["delta"]["stop_reason"] in STOP_REASONS, f"{where}: {show(d)}"
            assert d["usage"]["output_tokens"] > 0, f"{where}: {show(d)}"
            delta = d
        elif kind == "message_stop":
            assert delta is not None, f"{where}: message_stop without message_delta: {kinds}"
            stopped = True
        else:
            raise AssertionError(f"{where}: unknown event {kind}: {show(d)}")
    assert stopped, f"{where}: no message_stop: {kinds}"
    text = "".join("".join(b["pieces"]) for b in blocks if b["block"]["type"] == "text")
    calls = [(b["block"]["name"], json.loads("".join(b["pieces"]) or "{}")) for b in blocks
             if b["block"]["type"] == "tool_use"]
    return {"text": text, "calls": calls, "stop_reason": delta["delta"]["stop_reason"],
            "stop_sequence": delta["delta"].get("stop_sequence"), "output_tokens": delta["usage"]["output_tokens"],
            # message_delta's usage is the final count (message_start's is said before the
            # prompt cache is known); the SDK's own accumulation reads it the same way.
            "input_tokens": delta["usage"].get("input_tokens", start["message"]["usage"]["input_tokens"]),
            "cache_read": delta["usage"].get("cache_read_input_tokens") or 0, "kinds": kinds}


def plain(client):
    """System prompt as a string and as text blocks with cache_control, sampling knobs, metadata;
    max_tokens a limit that stops it, and a large one that is only a ceiling."""
    _, m = create(client, "plain", max_tokens=16, messages=HAIKU, system="You are a poet.",
                  stop_sequences=["<<END>>"], metadata={"user_id": "hearth-test"},
                  extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 40})
    print("  plain:", m.stop_reason, m.usage.input_tokens, m.usage.output_tokens, repr(text_of(m)[:40]))
    system = [{"type": "text", "text": "You are a poet.", "cache_control": {"type": "ephemeral"}}]
    _, m = create(client, "system blocks", max_tokens=16, messages=HAIKU, system=system, extra_body=GREEDY)
    print("  system blocks with cache_control:", m.stop_reason, "cache read", m.usage.cache_read_input_tokens)

    body, m = create(client, "max_tokens 3", max_tokens=3, messages=STORY, extra_body=GREEDY)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, show(body)
    print("  max_tokens 3: stop_reason max_tokens, 3 tokens")

    # 32000 is far past the context: a ceiling, not a demand. Stop sequences end it soon.
    body, m = create(client, "max_tokens 32000", max_tokens=32000, messages=HAIKU, stop_sequences=["\n", ".", ","],
                     extra_body=GREEDY, timeout=120)
    assert m.stop_reason in ("end_turn", "stop_sequence"), show(body)
    print("  max_tokens 32000 accepted:", m.stop_reason, m.usage.output_tokens)

    # The answer continues a last assistant turn (prefill).
    prefill = HAIKU + [{"role": "assistant", "content": "Leaves"}]
    _, m = create(client, "prefill", max_tokens=8, messages=prefill, extra_body=GREEDY)
    print("  assistant prefill:", repr(text_of(m)[:40]))


def stop_sequences(client):
    """A word of the greedy answer as a stop sequence: the answer stops right before it."""
    body, m = create(client, "greedy", max_tokens=24, messages=HAIKU, extra_body=GREEDY)
    text = text_of(m)
    words = [w.strip(".,;:!?\"'()") for w in text.split()[1:]]
    words = [w for w in words if w and text.find(w) > 0]
    word = next((w for w in words if len(w) >= 3), None) or next(iter(words), None)
    assert word, f"no word to stop at in {show(body)}"
    cut = text[:text.find(word)]
    body2, m2 = create(client, "stop_sequence", max_tokens=24, messages=HAIKU, stop_sequences=["\u2603", word],
                       extra_body=GREEDY)
    assert m2.stop_reason == "stop_sequence" and m2.stop_sequence == word, (word, show(body2))
    assert word not in text_of(m2), (word, show(body2))
    assert text_of(m2).rstrip() == cut.rstrip(), (word, text, show(body2))
    print(f"  stop_sequence {word!r}: stopped after {text_of(m2)!r}")


def streaming(client):
    """The same greedy request whole, as raw events, through `stream=True` and through
    `messages.stream()`: one text, one stop reason, one count."""
    params = {"max_tokens": 24, "messages": HAIKU, "system": "You are a poet."}
    body, whole = create(client, "whole", extra_body=GREEDY, **params)
    text = text_of(whole)
    assert text, show(body)

    s = check_stream(sse("/v1/messages", {"model": MODEL, "stream": True, **GREEDY, **params}), "raw stream")
    assert s["text"] == text, (s["text"], text)
    assert s["stop_reason"] == whole.stop_reason and s["output_tokens"] == whole.usage.output_tokens, (s, show(body))
    # The prompt is the same; how much of it the prompt cache served may differ.
    assert s["input_tokens"] + s["cache_read"] == whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0), (s, show(body))
    print(f"  raw stream: {len(s['kinds'])} events, {s['kinds'].count('ping')} pings, same text and counts")

    # stream=True through the package (it drops pings itself).
    events = [e.model_dump(mode="json") for e in
              client.messages.create(model=MODEL, stream=True, extra_body=GREEDY, **params)]
    s2 = check_stream([(e["type"], e) for e in events], "package stream")
    assert s2["text"] == text and s2["stop_reason"] == whole.stop_reason, (s2, text)

    with client.messages.stream(model=MODEL, extra_body=GREEDY, **params) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == text_of(final) == text, (pieces, final)
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens, final
    validate_message(final.model_dump(mode="json"), "messages.stream() final message")
    print(f"  messages.stream(): {len(pieces)} text pieces, final message equals the whole answer")


def tools(client):
    """A named tool_choice forces a call, whole and streamed; its result answered (as a string,
    as text blocks, as an error); "any" forces one too, "none" forbids it."""
    ask = {"max_tokens": 120, "messages": PARIS, "tools": [WEATHER]}
    body, m = create(client, "forced tool", tool_choice={"type": "tool", "name": "get_weather"},
                     extra_body=GREEDY, **ask)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses, show(body)
    assert all(u.name == "get_weather" for u in uses), show(body)
    call = uses[0]
    jsonschema.validate(call.input, WEATHER["input_schema"])
    print(f"  tool_choice tool: {call.id} get_weather({json.dumps(call.input)})")

    s = check_stream(sse("/v1/messages", {"model": MODEL, "stream": True, **GREEDY, **ask,
                                          "tool_choice": {"type": "tool", "name": "get_weather"}}), "tool stream")
    assert s["stop_reason"] == "tool_use" and s["calls"][0] == ("get_weather", call.input), (s, show(body))
    with client.messages.stream(model=MODEL, tool_choice={"type": "tool", "name": "get_weather"},
                                extra_body=GREEDY, **ask) as stream:
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert streamed and streamed[0].input == call.input and final.stop_reason == "tool_use", final
    print("  streamed tool call: input_json_delta pieces add up to the same input")

    turn = {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]}
    results = {
        "string": {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"},
        "text blocks": {"type": "tool_result", "tool_use_id": call.id,
                        "content": [{"type": "text", "text": "Sunny,"}, {"type": "text", "text": " 21 C"}]},
        "is_error": {"type": "tool_result", "tool_use_id": call.id, "content": "Weather service down",
                     "is_error": True},
    }
    for name, result in results.items():
        history = PARIS + [turn, {"role": "user", "content": [result]}]
        # Room for a whole answer: the model may call the tool again, and a call cut short is an error.
        _, answer = create(client, f"tool_result {name}", max_tokens=160, messages=history, tools=[WEATHER],
                           extra_body=GREEDY)
        print(f"  tool_result ({name}) answered:", answer.stop_reason, repr(text_of(answer)[:30]))

    body, m = create(client, "tool_choice any", tool_choice={"type": "any", "disable_parallel_tool_use": True},
                     extra_body=GREEDY, **ask)
    assert m.stop_reason == "tool_use" and [b for b in m.content if b.type == "tool_use"], show(body)
    jsonschema.validate([b for b in m.content if b.type == "tool_use"][0].input, WEATHER["input_schema"])
    body, m = create(client, "tool_choice none", max_tokens=16, messages=PARIS, tools=[WEATHER],
                     tool_choice={"type": "none"}, extra_body=GREEDY)
    assert m.stop_reason != "tool_use" and not [b for b in m.content if b.type == "tool_use"], show(body)
    print("  tool_choice any: a call; none: no call")

    expect_error(lambda: client.messages.create(model=MODEL, tool_choice={"type": "tool", "name": "launch"}, **ask),
                 400, "invalid_request_error", "tool_choice naming no given tool")


def thinking(client):
    """Extended-thinking settings are accepted (the model does not think), and a thinking block
    with its signature in the history too."""
    _, m = create(client, "thinking disabled", max_tokens=8, messages=HAIKU, thinking={"type": "disabled"})
    # budget_tokens must be >= 1024 and < max_tokens; stop sequences keep it short.
    _, m = create(client, "thinking enabled", max_tokens=1100, messages=HAIKU, stop_sequences=["\n", "."],
                  thinking={"type": "enabled", "budget_tokens": 1024})
    n = client.messages.count_tokens(model=MODEL, messages=HAIKU, thinking={"type": "enabled", "budget_tokens": 1024})
    assert n.input_tokens > 0, n
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": [
                   {"type": "thinking", "thinking": "The user greets me.", "signature": "c2lnbmF0dXJl"},
                   {"type": "text", "text": "Hello!"}]},
               {"role": "user", "content": "How are you?"}]
    _, m = create(client, "thinking in history", max_tokens=8, messages=history, extra_body=GREEDY)
    print("  thinking enabled/disabled accepted; a thinking block in the history too")


def count_tokens(client):
    """count_tokens: more for a longer prompt and for tools, and what create's usage says."""
    raw = client.messages.with_raw_response.count_tokens(model=MODEL, messages=HAIKU, system="You are a poet.")
    body = raw.http_response.json()
    try:
        MessageTokensCount.model_validate(body)
    except Exception as e:
        raise AssertionError(f"not a MessageTokensCount: {e}\n{show(body)}") from None
    n = body["input_tokens"]
    assert type(n) is int and n > 0, show(body)
    longer = client.messages.count_tokens(model=MODEL, system="You are a poet.", messages=[
        {"role": "user", "content": "Write a haiku about autumn, with red leaves, rain and a cold wind."}])
    assert longer.input_tokens > n, (longer, n)
    with_tools = client.messages.count_tokens(model=MODEL, messages=HAIKU, system="You are a poet.", tools=[WEATHER])
    assert with_tools.input_tokens > n, (with_tools, n)
    _, m = create(client, "counted", max_tokens=4, messages=HAIKU, system="You are a poet.", extra_body=GREEDY)
    # Anthropic's input_tokens leave out what the prompt cache served: together they are the prompt.
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == n, (m.usage, n)
    print(f"  count_tokens: {n} (= create's input_tokens + cache_read_input_tokens), longer {longer.input_tokens}, "
          f"with a tool {with_tools.input_tokens}")


def expect_error(call, status, kind, what):
    """The call fails with the package's typed error for `status`, and the body is Anthropic's
    {"type": "error", "error": {"type": kind, "message": …}}."""
    cls = {400: anthropic.BadRequestError, 404: anthropic.NotFoundError}[status]
    try:
        call()
    except anthropic.APIStatusError as e:
        try:
            full = e.response.json()
        except Exception:
            raise AssertionError(f"{what}: {e.status_code} with a body that is not JSON: {e.response.text[:300]}")
        assert isinstance(e, cls) and e.status_code == status, f"{what}: {e.status_code} {type(e).__name__}: {show(full)}"
        check_error_body(full, kind, what)
        print(f"  {what}: {status} {kind}: {full['error']['message'][:70]!r}")
        return
    raise AssertionError(f"{what} was accepted")


def check_error_body(full, kind, what):
    try:
        anthropic.types.ErrorResponse.model_validate(full)
    except Exception as e:
        raise AssertionError(f"{what}: not an ErrorResponse: {e}\n{show(full)}") from None
    assert full.get("type") == "error", f"{what}: {show(full)}"
    err = full["error"]
    assert err.get("type") == kind and isinstance(err.get("message"), str) and err["message"], f"{what}: {show(full)}"


def errors(client):
    expect_error(lambda: client.post("/v1/messages", cast_to=Message, body={"model": MODEL, "messages": HAIKU}),
                 400, "invalid_request_error", "no max_tokens")
    expect_error(lambda: client.messages.create(model="no-such-model", max_tokens=8, messages=HAIKU),
                 404, "not_found_error", "an unknown model")
    expect_error(lambda: client.messages.create(model=MODEL, max_tokens=8, messages=[]),
                 400, "invalid_request_error", "no messages")
    expect_error(lambda: client.messages.create(model=MODEL, max_tokens=8,
                                                messages=[{"role": "robot", "content": "Hi"}]),
                 400, "invalid_request_error", "role robot")
    expect_error(lambda: client.messages.create(model=MODEL, max_tokens=0, messages=HAIKU),
                 400, "invalid_request_error", "max_tokens 0")
    huge = [{"role": "user", "content": "hello " * 20000}]
    expect_error(lambda: client.messages.create(model=MODEL, max_tokens=8, messages=huge),
                 400, "invalid_request_error", "a prompt far past the context")

    status, headers, raw = http("POST", "/v1/messages", b'{"model": "' + MODEL.encode() + b'", "max_tokens": ')
    assert status == 400, (status, raw[:300])
    assert headers["content-type"].startswith("application/json"), headers
    check_error_body(json.loads(raw), "invalid_request_error", "malformed JSON")
    print("  malformed JSON: 400 invalid_request_error")


def auth():
    """No key is needed on loopback: x-api-key, a bearer token and no key at all are all served,
    with the anthropic-version (and an anthropic-beta) header."""
    for name, client in (("x-api-key", anthropic.Anthropic(base_url=BASE, api_key="sk-ant-anything", max_retries=0,
                                                           timeout=120)),
                         ("Authorization: Bearer", anthropic.Anthropic(base_url=BASE, api_key=None,
                                                                       auth_token="anything", max_retries=0,
                                                                       timeout=120))):
        create(client, name, max_tokens=2, messages=HAIKU, extra_body=GREEDY)
        print(f"  {name}: served")
    body = json.dumps({"model": MODEL, "max_tokens": 2, "messages": HAIKU}).encode()
    status, headers, raw = http("POST", "/v1/messages", body, {"anthropic-version": "2023-06-01",
                                                               "anthropic-beta": "prompt-caching-2024-07-31"})
    assert status == 200, (status, raw[:300])
    validate_message(json.loads(raw), "no key, anthropic-version and anthropic-beta headers")
    print("  no key, anthropic-version and anthropic-beta headers: served")


def main():
    global BASE, MODEL
    BASE, MODEL = sys.argv[1].rstrip("/"), sys.argv[2]
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        os.environ.pop(var, None)
    client = anthropic.Anthropic(base_url=BASE, api_key="not-needed", max_retries=0, timeout=120)
    print("anthropic", anthropic.__version__, "against", BASE, MODEL)
    plain(client)
    stop_sequences(client)
    streaming(client)
    tools(client)
    thinking(client)
    count_tokens(client)
    errors(client)
    auth()
    print("anthropic client OK")


if __name__ == "__main__":
    main()
