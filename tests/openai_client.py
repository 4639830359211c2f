"""Drive a Hearth node with the official `openai` Python package, as a real client would.

Usage: python tests/openai_client.py BASE_URL MODEL_ID
Exits non-zero (with an assertion message) when anything the package sees is off.
"""
import sys

import openai
from openai import OpenAI


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

    print("openai client OK:", repr(text[:60]))


if __name__ == "__main__":
    main()
