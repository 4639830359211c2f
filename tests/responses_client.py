"""Drive Hearth's OpenAI Responses door (POST /v1/responses, GET and DELETE /v1/responses/{id})
with the official `openai` Python package's `client.responses`, and check every answer against the
package's own types (`model_validate` on the raw JSON, stream events included).

Written from OpenAI's API reference and the package's types, not from Hearth's code. The model is
tiny (SmolLM2-135M-Instruct): its words are nonsense and it never picks a tool on its own, so
answers are compared with each other (streamed against whole, greedy), never with expected text.

Usage: python tests/responses_client.py BASE_URL MODEL_ID
Exits non-zero (with an assertion message that shows the offending JSON) when anything is off.
"""
import json
import os
import sys
import typing
import urllib.error
import urllib.request

import jsonschema
import openai
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
HAIKU = "Write a haiku about autumn."
STORY = "Write a long story about a dragon."
PARIS = "What is the weather in Paris?"
# Fields OpenAI's response object always carries (null where unset), beyond those the type requires.
ALWAYS = ("status", "error", "incomplete_details", "instructions", "max_output_tokens", "metadata",
          "previous_response_id", "temperature", "top_p", "text", "usage")

BASE = MODEL = None


def event_types(union):
    """{type literal: class} for a union of event classes, to validate each event by its own class."""
    while typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return {typing.get_args(c.model_fields["type"].annotation)[0]: c for c in typing.get_args(union)}


EVENTS = event_types(ResponseStreamEvent)


class Person(BaseModel):
    name: str
    age: int


def show(obj, n=1200):
    return json.dumps(obj)[:n]


def validate_response(body, where):
    """`body` (raw JSON) is a whole Response: the package's type validates it, and the fields the
    API always sends are there with sensible values. Returns the validated Response."""
    try:
        resp = Response.model_validate(body)
    except Exception as e:  # pydantic's ValidationError, said whole
        raise AssertionError(f"{where}: not a valid Response: {e}\n{show(body)}") from None
    for key in ALWAYS:
        assert key in body, f"{where}: no {key!r}: {show(body)}"
    assert body["object"] == "response" and body["id"].startswith("resp_"), f"{where}: {show(body)}"
    assert body["model"] == MODEL, f"{where}: model {body['model']!r} is not {MODEL!r}"
    assert body["error"] is None, f"{where}: {show(body)}"
    assert body["status"] in ("completed", "incomplete"), f"{where}: status: {show(body)}"
    if body["status"] == "incomplete":
        assert body["incomplete_details"]["reason"] == "max_output_tokens", f"{where}: {show(body)}"
    else:
        assert body["incomplete_details"] is None, f"{where}: {show(body)}"
    usage = body["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, f"{where}: usage: {show(usage)}"
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], f"{where}: usage: {show(usage)}"
    assert type(usage["input_tokens_details"]["cached_tokens"]) is int, f"{where}: usage: {show(usage)}"
    assert type(usage["output_tokens_details"]["reasoning_tokens"]) is int, f"{where}: usage: {show(usage)}"
    assert body["output"], f"{where}: no output: {show(body)}"
    for item in body["output"]:
        assert item["type"] in ("message", "function_call", "reasoning"), f"{where}: {show(item)}"
        if item["type"] == "message":
            assert item["role"] == "assistant" and item["status"] in ("completed", "incomplete"), f"{where}: {show(item)}"
            for part in item["content"]:
                assert part["type"] == "output_text" and isinstance(part["annotations"], list), f"{where}: {show(part)}"
        if item["type"] == "function_call":
            assert item["call_id"] and item["name"] and isinstance(item["arguments"], str), f"{where}: {show(item)}"
    return resp


def create(client, where, **kw):
    """responses.create, the raw JSON validated; returns (json, Response)."""
    raw = client.responses.with_raw_response.create(model=MODEL, **kw)
    assert raw.http_response.status_code == 200, raw.http_response.status_code
    assert raw.http_response.headers["content-type"].startswith("application/json"), raw.http_response.headers
    body = raw.http_response.json()
    resp = validate_response(body, where)
    raw.parse()  # the package's own reading of it
    return body, resp


def http(method, path, data=None):
    """A bare request (no package): (status, headers, body bytes)."""
    req = urllib.request.Request(BASE + path, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def sse(body):
    """POST /v1/responses with `body` and read the server-sent events: [(event name, data JSON)]."""
    req = urllib.request.Request(BASE + "/v1/responses", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    events, name, data = [], None, []
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200, r.status
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers["content-type"]
        for raw in r:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if data and data != ["[DONE]"]:
                    events.append((name, json.loads("\n".join(data))))
                name, data = None, []
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:][1:] if line[5:].startswith(" ") else line[5:])
    if data and data != ["[DONE]"]:
        events.append((name, json.loads("\n".join(data))))
    return events


def check_stream(events, where):
    """The order OpenAI documents: response.created, response.in_progress; per output item
    output_item.added, then (a message) per part content_part.added, output_text.delta+,
    output_text.done, content_part.done, or (a call) function_call_arguments.delta*,
    function_call_arguments.done; output_item.done; last response.completed (or .incomplete).
    sequence_number 0, 1, 2, …; ids and indexes consistent; the pieces add up to the final
    response. Every event valid for the package's type and named by its `event:` line.
    Returns (the final response JSON, [types])."""
    assert events, f"{where}: no events"
    for name, data in events:
        assert name is None or name == data.get("type"), f"{where}: event {name!r} carries {show(data)}"
    ev = [d for _, d in events]
    kinds = [d["type"] for d in ev]
    for i, d in enumerate(ev):
        assert d["type"] not in ("error", "response.failed"), f"{where}: {show(d)}"
        assert d["type"] in EVENTS, f"{where}: an event type the package does not know: {show(d)}"
        try:
            EVENTS[d["type"]].model_validate(d)
        except Exception as e:
            raise AssertionError(f"{where}: not a valid {d['type']} event: {e}\n{show(d)}") from None
        assert d["sequence_number"] == i, f"{where}: event {i} has sequence_number {d['sequence_number']}: {kinds}"
    assert kinds[:2] == ["response.created", "response.in_progress"], f"{where}: {kinds}"
    assert kinds[-1] in ("response.completed", "response.incomplete"), f"{where}: {kinds}"
    created = ev[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == [], f"{where}: {show(ev[0])}"
    final = ev[-1]["response"]
    assert final["id"] == created["id"] == ev[1]["response"]["id"], f"{where}: ids differ"
    assert final["status"] == kinds[-1].split(".")[1], f"{where}: {kinds[-1]} with status {final['status']}"
    validate_response(final, f"{where}: {kinds[-1]}")

    def take(kind, **same):
        nonlocal i
        d = ev[i]
        assert d["type"] == kind, f"{where}: event {i} is {d['type']}, not {kind}: {kinds}"
        for k, v in same.items():
            assert d[k] == v, f"{where}: {kind} {k}={d[k]!r}, not {v!r}: {show(d)}"
        i += 1
        return d

    i, items = 2, []
    while i < len(ev) - 1:
        added = take("response.output_item.added", output_index=len(items))["item"]
        at = {"output_index": len(items), "item_id": added["id"]}
        if added["type"] == "message":
            assert added["content"] == [] and added["status"] == "in_progress", f"{where}: {show(added)}"
            parts = []
            while ev[i]["type"] == "response.content_part.added":
                take("response.content_part.added", content_index=len(parts), **at)
                deltas = [take("response.output_text.delta", content_index=len(parts), **at)["delta"]]
                while ev[i]["type"] == "response.output_text.delta":
                    deltas.append(take("response.output_text.delta", content_index=len(parts), **at)["delta"])
                text = "".join(deltas)
                take("response.output_text.done", content_index=len(parts), text=text, **at)
                part = take("response.content_part.done", content_index=len(parts), **at)["part"]
                assert part["type"] == "output_text" and part["text"] == text, f"{where}: {show(part)}"
                parts.append(text)
            done = take("response.output_item.done", output_index=len(items))["item"]
            assert [p["text"] for p in done["content"]] == parts, f"{where}: {show(done)} after {parts}"
        elif added["type"] == "function_call":
            assert added["arguments"] == "" and added["name"] == final["output"][len(items)]["name"], show(added)
            deltas = []
            while ev[i]["type"] == "response.function_call_arguments.delta":
                deltas.append(take("response.function_call_arguments.delta", **at)["delta"])
            take("response.function_call_arguments.done", arguments="".join(deltas), **at)
            done = take("response.output_item.done", output_index=len(items))["item"]
            assert done["arguments"] == "".join(deltas) and done["call_id"] == added["call_id"], f"{where}: {show(done)}"
        else:
            raise AssertionError(f"{where}: an output item of type {added['type']}: {show(added)}")
        assert done["id"] == added["id"] and done["type"] == added["type"], f"{where}: {show(added)} / {show(done)}"
        items.append(done)
    assert final["output"] == items, f"{where}: the final output is not the streamed items:\n{show(final['output'])}\n{show(items)}"
    return final, kinds


def text_of(body):
    return "".join(p["text"] for o in body["output"] if o["type"] == "message" for p in o["content"])


def basic(client):
    """A string, instructions, message items of every role; a limit that stops it."""
    body, r = create(client, "string input", input=HAIKU, max_output_tokens=24, temperature=0, top_p=1)
    assert body["output"][0]["type"] == "message" and r.output_text, show(body)
    assert body["max_output_tokens"] == 24, show(body)
    print(f"  string input: {r.status}, {r.usage.input_tokens}+{r.usage.output_tokens} tokens, {r.output_text[:40]!r}")

    # Instructions replace the template's default system prompt: long ones, so the count must grow.
    long_instructions = "You are a poet who answers briefly, in plain words, without rhyme. " * 4
    body2, r2 = create(client, "instructions", input=HAIKU, instructions=long_instructions,
                       max_output_tokens=24, temperature=0.7, top_p=0.9)
    assert body2["instructions"] == long_instructions, show(body2)
    assert r2.usage.input_tokens > r.usage.input_tokens, (r2.usage, r.usage)
    print(f"  instructions: echoed, {r2.usage.input_tokens} input tokens > {r.usage.input_tokens}")

    items = [
        {"role": "system", "content": "You are a poet."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Answer in one line."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Write a haiku about spring."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Blossoms fall softly.", "annotations": []}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": HAIKU}]},
    ]
    body, r = create(client, "message items", input=items, max_output_tokens=16, temperature=0)
    assert r.output_text, show(body)
    print(f"  message items (system, developer, user, assistant): {r.output_text[:40]!r}")

    body, r = create(client, "max_output_tokens 16", input=STORY, max_output_tokens=16, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", show(body)
    assert r.usage.output_tokens == 16 and body["output"][0]["status"] == "incomplete", show(body)
    print("  max_output_tokens 16: incomplete (max_output_tokens), 16 tokens")


def streaming(client):
    """The same greedy request whole, as raw events, through stream=True and through
    responses.stream(): one text, one status, one count."""
    # A short question, room to finish: the tiny model mostly ends on its own, and the stream in
    # response.completed (response.incomplete when it does not, as OpenAI's does).
    params = {"input": "Say hello.", "instructions": "Answer briefly.", "max_output_tokens": 48, "temperature": 0}
    body, whole = create(client, "whole", **params)
    final, kinds = check_stream(sse({"model": MODEL, "stream": True, **params}), "raw stream")
    assert text_of(final) == whole.output_text, (text_of(final), whole.output_text)
    assert final["status"] == whole.status and final["usage"]["output_tokens"] == whole.usage.output_tokens, \
        (show(final), show(body))
    print(f"  raw stream: {len(kinds)} events in order, same text, status and counts as whole")

    events = [e.model_dump(mode="json") for e in client.responses.create(model=MODEL, stream=True, **params)]
    final2, kinds2 = check_stream([(e["type"], e) for e in events], "package stream")
    assert kinds2 == kinds and text_of(final2) == whole.output_text, (kinds2, kinds)

    with client.responses.stream(model=MODEL, **params) as stream:
        pieces = [e.delta for e in stream if e.type == "response.output_text.delta"]
        # The package's helper knows only response.completed; a cut answer ends in .incomplete.
        got = stream.get_final_response() if whole.status == "completed" else None
    assert "".join(pieces) == whole.output_text, (pieces, whole.output_text)
    assert got is None or got.output_text == whole.output_text, got
    print(f"  responses.stream(): {len(pieces)} deltas" + (", final response equals the whole answer" if got else
                                                           " (cut by max_output_tokens: no final response)"))


def tools(client):
    """A named tool_choice forces a call, whole and streamed; its output answered; "required"
    forces one, "none" forbids it; a tool_choice naming no tool is refused."""
    ask = {"input": PARIS, "tools": [WEATHER], "max_output_tokens": 120, "temperature": 0}
    body, r = create(client, "forced call", tool_choice={"type": "function", "name": "get_weather"}, **ask)
    calls = [o for o in body["output"] if o["type"] == "function_call"]
    assert calls and all(c["name"] == "get_weather" for c in calls), show(body)
    call = calls[0]
    args = json.loads(call["arguments"])
    assert isinstance(args, dict), call
    jsonschema.validate(args, WEATHER["parameters"])
    print(f"  tool_choice function: {call['call_id']} get_weather({call['arguments']})")

    final, kinds = check_stream(sse({"model": MODEL, "stream": True, **ask,
                                     "tool_choice": {"type": "function", "name": "get_weather"}}), "call stream")
    streamed = [o for o in final["output"] if o["type"] == "function_call"]
    assert streamed and streamed[0]["arguments"] == call["arguments"], (show(final), call)
    assert "response.function_call_arguments.delta" in kinds, kinds
    print("  streamed call: argument deltas add up to the same arguments")

    history = [{"role": "user", "content": PARIS}, call,
               {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C"}]
    body, r = create(client, "call output", input=history, tools=[WEATHER], max_output_tokens=160, temperature=0)
    print(f"  function_call_output answered: {r.status} {r.output_text[:30]!r}")

    body, r = create(client, "required", tool_choice="required", **ask)
    assert [o for o in body["output"] if o["type"] == "function_call"], show(body)
    body, r = create(client, "none", tool_choice="none", **(ask | {"max_output_tokens": 16}))
    assert not [o for o in body["output"] if o["type"] == "function_call"], show(body)
    print("  tool_choice required: a call; none: no call")

    expect_error(lambda: client.responses.create(model=MODEL, tool_choice={"type": "function", "name": "launch"},
                                                 **ask), 400, "a tool_choice naming no given tool")
    expect_error(lambda: client.responses.create(model=MODEL, tool_choice="sometimes", **ask),
                 400, "tool_choice 'sometimes'")


def structured(client):
    """text.format json_schema (raw and through responses.parse) and json_object."""
    fmt = {"format": {"type": "json_schema", "name": "person", "strict": True, "schema": PERSON}}
    body, r = create(client, "json_schema", input="Describe a person.", text=fmt, max_output_tokens=80, temperature=0)
    assert r.status == "completed", show(body)
    jsonschema.validate(json.loads(r.output_text), PERSON)
    print(f"  text.format json_schema: {r.output_text[:60]}")
    parsed = client.responses.parse(model=MODEL, input="Describe a person.", text_format=Person,
                                    max_output_tokens=80, temperature=0)
    assert isinstance(parsed.output_parsed, Person), parsed
    body, r = create(client, "json_object", input="Greet me.", text={"format": {"type": "json_object"}},
                     instructions="Answer with a JSON object of one short greeting.", max_output_tokens=200,
                     temperature=0)
    # The grammar holds the answer to JSON; a tiny model may ramble inside a string until the
    # limit, so a cut answer only has to be JSON so far.
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict), show(body)
    else:
        assert r.incomplete_details.reason == "max_output_tokens" and r.output_text.lstrip().startswith("{"), show(body)
    print(f"  responses.parse(text_format=Person): {parsed.output_parsed!r}; json_object: {r.output_text[:40]}")


def reasoning(client):
    body, r = create(client, "reasoning effort low", input=HAIKU, reasoning={"effort": "low"},
                     max_output_tokens=16, temperature=0)
    print(f"  reasoning effort low accepted, reasoning_tokens {r.usage.output_tokens_details.reasoning_tokens}")


def store(client):
    """Stored by default: retrieve gives it back, previous_response_id carries the conversation on,
    delete forgets it; store false keeps nothing."""
    body, r = create(client, "stored", input="Say hello.", max_output_tokens=16, temperature=0)
    raw = client.responses.with_raw_response.retrieve(r.id)
    got = raw.http_response.json()
    validate_response(got, "retrieved")
    for key in ("id", "created_at", "status", "model", "output", "usage", "instructions", "max_output_tokens"):
        assert got[key] == body[key], f"retrieved {key} differs:\n{show(got)}\n{show(body)}"
    print(f"  retrieve {r.id}: the same response")

    body2, r2 = create(client, "previous_response_id", input="Now say goodbye.", previous_response_id=r.id,
                       max_output_tokens=16, temperature=0)
    assert body2["previous_response_id"] == r.id, show(body2)
    assert r2.usage.input_tokens > r.usage.input_tokens, (r2.usage, r.usage)
    print(f"  previous_response_id: {r2.usage.input_tokens} input tokens > {r.usage.input_tokens} (history prepended)")

    body3, r3 = create(client, "store false", input="Say hello.", store=False, max_output_tokens=16, temperature=0)
    expect_error(lambda: client.responses.retrieve(r3.id), 404, "retrieve of a store=false response")
    expect_error(lambda: client.responses.create(model=MODEL, input="Hi", previous_response_id=r3.id,
                                                 max_output_tokens=16), (400, 404), "previous_response_id of a store=false response")

    deleted = client.responses.with_raw_response.delete(r2.id)
    assert deleted.http_response.status_code == 200, deleted.http_response.status_code
    print(f"  delete {r2.id}: {deleted.http_response.text[:80]}")
    expect_error(lambda: client.responses.retrieve(r2.id), 404, "retrieve after delete")
    expect_error(lambda: client.responses.delete(r2.id), 404, "delete twice")
    expect_error(lambda: client.responses.delete("resp_no_such_response"), 404, "delete of an unknown id")
    expect_error(lambda: client.responses.retrieve("resp_no_such_response"), 404, "retrieve of an unknown id")
    # OpenAI itself answers 400 (code previous_response_not_found); either is taken here.
    expect_error(lambda: client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_no_such_response",
                                                 max_output_tokens=16), (400, 404), "an unknown previous_response_id")


def expect_error(call, status, what):
    """The call fails with the package's typed error for `status` (or one of them), and the body is
    OpenAI's {"error": {"message", "type", "param", "code"}}."""
    statuses = status if isinstance(status, tuple) else (status,)
    classes = {400: openai.BadRequestError, 404: openai.NotFoundError}
    try:
        call()
    except openai.APIStatusError as e:
        try:
            full = e.response.json()
        except Exception:
            raise AssertionError(f"{what}: {e.status_code} with a body that is not JSON: {e.response.text[:300]}")
        assert e.status_code in statuses and isinstance(e, classes[e.status_code]), \
            f"{what}: {e.status_code} {type(e).__name__}: {show(full)}"
        check_error_body(full, what)
        print(f"  {what}: {e.status_code} {full['error']['type']}/{full['error']['code']}: {full['error']['message'][:60]!r}")
        return
    raise AssertionError(f"{what} was accepted")


def check_error_body(full, what):
    err = full.get("error")
    assert isinstance(err, dict) and set(err) >= {"message", "type", "param", "code"}, f"{what}: {show(full)}"
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str), f"{what}: {show(full)}"


def errors(client):
    expect_error(lambda: client.post("/responses", cast_to=Response, body={"model": MODEL}), 400, "no input")
    expect_error(lambda: client.responses.create(model="no-such-model", input=HAIKU), 404, "an unknown model")
    status, headers, raw = http("POST", "/v1/responses", b'{"model": "' + MODEL.encode() + b'", "input": ')
    assert status == 400, (status, raw[:300])
    assert headers["content-type"].startswith("application/json"), headers
    check_error_body(json.loads(raw), "malformed JSON")
    print("  malformed JSON: 400")


def main():
    global BASE, MODEL
    BASE, MODEL = sys.argv[1].rstrip("/"), sys.argv[2]
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        os.environ.pop(var, None)
    client = OpenAI(base_url=f"{BASE}/v1", api_key="not-needed", max_retries=0, timeout=120)
    print("openai", openai.__version__, "against", BASE, MODEL)
    basic(client)
    streaming(client)
    tools(client)
    structured(client)
    reasoning(client)
    store(client)
    errors(client)
    print("responses client OK")


if __name__ == "__main__":
    main()
