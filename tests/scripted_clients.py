"""The official `openai` and `ollama` Python packages reading a thinking block and a tool call,
from a node on the scripted engine that always answers:

    <think>Plan it.</think>

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Oslo"}}
    </tool_call>

Usage: python tests/scripted_clients.py BASE_URL OLLAMA_URL MODEL_ID
Exits non-zero with an assertion message when a package sees anything else.
"""
import sys

import ollama
from openai import OpenAI

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


def reasoning(message) -> str:
    # Not in the package's types (llama-server's and DeepSeek's field): kept as an extra.
    return (message.model_extra or {}).get("reasoning_content")


def openai_side(base: str, model: str) -> None:
    client = OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=60)
    r = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER_TOOL], max_tokens=50)
    m = r.choices[0].message
    assert reasoning(m) == "Plan it.", m
    assert m.content is None and r.choices[0].finish_reason == "tool_calls", r
    assert m.tool_calls[0].function.name == "get_weather", m
    assert m.tool_calls[0].function.arguments == '{"city":"Oslo"}', m

    thought, text, calls = "", "", {}
    for chunk in client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER_TOOL],
                                                max_tokens=50, stream=True):
        for c in chunk.choices:
            thought += (c.delta.model_extra or {}).get("reasoning_content") or ""
            text += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                calls[d.index] = (d.function.name, d.function.arguments)
    assert (thought, text) == ("Plan it.", ""), (thought, text)
    assert calls == {0: ("get_weather", '{"city":"Oslo"}')}, calls

    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=50).choices[0].message
    assert reasoning(plain) == "Plan it." and plain.content.startswith("<tool_call>"), plain


def ollama_side(url: str, model: str) -> None:
    client = ollama.Client(host=url)
    r = client.chat(model, messages=ASK, think=True, tools=[WEATHER_TOOL])
    assert r.message.thinking == "Plan it.", r
    assert r.message.tool_calls[0].function.name == "get_weather", r
    assert r.message.tool_calls[0].function.arguments == {"city": "Oslo"}, r
    thought, calls = "", []
    for part in client.chat(model, messages=ASK, think=True, tools=[WEATHER_TOOL], stream=True):
        thought += part.message.thinking or ""
        assert not part.message.content, part
        calls += part.message.tool_calls or []
    assert thought == "Plan it." and [c.function.name for c in calls] == ["get_weather"], (thought, calls)
    g = client.generate(model, "Weather in Oslo?", think=True)
    assert g.thinking == "Plan it." and g.response.startswith("<tool_call>"), g


def main() -> None:
    base, url, model = sys.argv[1], sys.argv[2], sys.argv[3]
    openai_side(base, model)
    ollama_side(url, model)
    print("scripted clients OK")


if __name__ == "__main__":
    main()
