"""Drive a Hearth node with the official `openai` Python package, as a real client would.

Usage: python tests/openai_client.py BASE_URL MODEL_ID
Exits non-zero (with an assertion message) when anything the package sees is off.
"""
import json
import sys

import jsonschema
import openai
from openai import OpenAI
from pydantic import BaseModel

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


class Person(BaseModel):
    name: str
    age: int


def tools(client, model) -> None:
    """tool_choice "required": a call the package parses, with arguments valid for the schema,
    whole and streamed; then the tool's result answered."""
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=ask, tools=[WEATHER_TOOL], tool_choice="required",
                                       temperature=0, max_tokens=120)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", r
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather", call
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])

    stream = client.chat.completions.create(model=model, messages=ask, tools=[WEATHER_TOOL], tool_choice="required",
                                            temperature=0, max_tokens=120, stream=True)
    names, arguments, finish = {}, {}, None
    for chunk in stream:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                if d.function.name:
                    names[d.index] = d.function.name
                arguments[d.index] = arguments.get(d.index, "") + (d.function.arguments or "")
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and names == {0: "get_weather"}, (finish, names)
    assert json.loads(arguments[0]) == args, arguments

    history = ask + [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
    answer = client.chat.completions.create(model=model, messages=history, temperature=0, max_tokens=60)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls, answer

    try:
        client.chat.completions.create(model=model, messages=ask, tools=[WEATHER_TOOL],
                                       tool_choice={"type": "function", "function": {"name": "launch"}})
        raise AssertionError("an unknown tool_choice was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "tool_choice", e.body


def structured(client, model) -> None:
    """response_format json_schema through the package's own parse(): validated by pydantic,
    and by jsonschema against the schema it sent; streamed the same."""
    ask = [{"role": "user", "content": "Describe a person."}]
    parsed = client.chat.completions.parse(model=model, messages=ask, response_format=Person,
                                           temperature=0, max_tokens=80)
    person = parsed.choices[0].message.parsed
    assert isinstance(person, Person), parsed
    schema = Person.model_json_schema()
    jsonschema.validate(json.loads(parsed.choices[0].message.content), schema)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": schema}}
    stream = client.chat.completions.create(model=model, messages=ask, response_format=fmt,
                                            temperature=0, max_tokens=80, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)
    obj = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Greet me."}],
                                         response_format={"type": "json_object"}, temperature=0, max_tokens=60)
    assert isinstance(json.loads(obj.choices[0].message.content), dict), obj


def main() -> None:
    base, model = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=60)

    models = [m.id for m in client.models.list()]
    assert model in models, models
    one = client.models.retrieve(model)
    assert one.id == model and one.object == "model", one
    try:
        client.models.retrieve("no-such-model")
        raise AssertionError("an unknown model was retrieved")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body

    messages = [{"role": "user", "content": "Write a haiku about autumn."}]
    full = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=24)
    text = full.choices[0].message.content
    assert text, full
    assert full.choices[0].finish_reason in ("stop", "length"), full
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens

    stream = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(pieces) == text, ("".join(pieces), text)
    assert len(pieces) > 3, pieces
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens, usage
    assert finish == full.choices[0].finish_reason

    completion = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert completion.choices[0].text and completion.usage.completion_tokens == 8, completion

    try:
        client.chat.completions.create(model="no-such-model", messages=messages)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body

    try:
        client.chat.completions.create(model=model, messages=messages, temperature=-1)
        raise AssertionError("a negative temperature was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "temperature", e.body

    tools(client, model)
    structured(client, model)

    print("openai client OK:", repr(text[:60]))


if __name__ == "__main__":
    main()
