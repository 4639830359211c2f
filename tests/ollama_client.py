"""Drive a Hearth node with the official `ollama` Python package, as a real client would.

Usage: python tests/ollama_client.py BASE_URL MODEL_NAME
BASE_URL is like http://127.0.0.1:PORT (the node's Ollama-compatible API, paths /api/...).
Written from Ollama's public docs/api.md and the package's README only: it checks what users of
the package rely on, not what the server happens to do. Exits non-zero with an assertion message
when anything the package sees is off.
"""
import json
import math
import re
import sys
import time

import httpx
import ollama
from pydantic import BaseModel

UNKNOWN = "no-such-model-hearth-test:latest"
GREEDY16 = {"temperature": 0, "num_predict": 16}
CHAT = [{"role": "user", "content": "Write a haiku about autumn."}]
PROMPT = "Write a short story about a dragon who learns to bake bread."


def full_name(name: str) -> str:
    """Ollama's model names are `model:tag`, the tag defaulting to `latest` (api.md, Model names)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def same_model(a, b) -> bool:
    return a is not None and b is not None and full_name(a) == full_name(b)


def is_pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def norm(v) -> float:
    return math.sqrt(sum(x * x for x in v))


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def expect_error(what, fn, status=None, min_status=None, mentions=()):
    """Call fn (draining it if it streams); it must raise ollama.ResponseError as specified."""
    try:
        out = fn()
        if not isinstance(out, (dict, BaseModel)) and hasattr(out, "__iter__"):
            out = list(out)
        raise AssertionError(f"{what}: expected ollama.ResponseError, got a success: {out!r}"[:600])
    except ollama.ResponseError as e:
        msg = e.error
        assert isinstance(msg, str) and msg.strip(), f"{what}: the error has no message: {e!r}"
        # The package pulls `error` out of a JSON body {"error": "..."}; a raw body shows through.
        assert not msg.lstrip().startswith(("{", "<")), (
            f"{what}: the error body is not Ollama's {{\"error\": \"...\"}} JSON: {msg[:300]!r}")
        if status is not None:
            assert e.status_code == status, f"{what}: status {e.status_code}, expected {status} ({msg!r})"
        if min_status is not None:
            assert e.status_code >= min_status, (
                f"{what}: status {e.status_code}, expected an HTTP error >= {min_status} ({msg!r})")
        for word in mentions:
            assert word.lower() in msg.lower(), f"{what}: the message does not mention {word!r}: {msg!r}"
        return e


def check_details(where, details):
    assert details is not None, f"{where}: no `details`"
    assert details.format == "gguf", f"{where}: details.format is {details.format!r}, expected 'gguf'"
    for field in ("family", "parameter_size", "quantization_level"):
        value = getattr(details, field)
        assert isinstance(value, str) and value, f"{where}: details.{field} is {value!r}: {details!r}"


def check_final_stats(where, r, wall_ns=None, max_tokens=None):
    """The statistics the final object carries (api.md: durations in nanoseconds)."""
    assert r.done is True, f"{where}: done is {r.done!r}"
    assert r.done_reason in ("stop", "length"), f"{where}: done_reason is {r.done_reason!r}"
    assert is_pos_int(r.eval_count), f"{where}: eval_count is {r.eval_count!r}"
    assert is_pos_int(r.prompt_eval_count), f"{where}: prompt_eval_count is {r.prompt_eval_count!r}"
    assert is_pos_int(r.total_duration), f"{where}: total_duration is {r.total_duration!r}"
    assert is_pos_int(r.eval_duration), f"{where}: eval_duration is {r.eval_duration!r}"
    assert r.eval_duration > 100_000, (
        f"{where}: eval_duration {r.eval_duration} for {r.eval_count} tokens is under 0.1 ms: not nanoseconds?")
    assert r.total_duration >= r.eval_duration, (
        f"{where}: total_duration {r.total_duration} < eval_duration {r.eval_duration}")
    if r.prompt_eval_duration is not None:
        assert isinstance(r.prompt_eval_duration, int) and r.prompt_eval_duration >= 0, (
            f"{where}: prompt_eval_duration is {r.prompt_eval_duration!r}")
    if wall_ns is not None:
        assert r.total_duration <= wall_ns * 1.1 + 5_000_000, (
            f"{where}: total_duration {r.total_duration} ns exceeds the {wall_ns} ns the call took")
    if max_tokens is not None:
        assert r.eval_count <= max_tokens, f"{where}: eval_count {r.eval_count} > num_predict {max_tokens}"
        if r.done_reason == "length":
            assert r.eval_count == max_tokens, (
                f"{where}: done_reason 'length' but eval_count {r.eval_count} != num_predict {max_tokens}")


def check_stream(where, chunks, text_of):
    """Several chunks; only the last has done=True and the statistics. Returns the whole text."""
    assert len(chunks) >= 2, f"{where}: {len(chunks)} chunk(s), expected a stream: {chunks!r}"[:600]
    for i, c in enumerate(chunks[:-1]):
        assert c.done is False, f"{where}: chunk {i} of {len(chunks)} has done={c.done!r} (only the last may)"
        assert c.eval_count is None and c.done_reason is None, (
            f"{where}: chunk {i} (not the last) carries final statistics: {c!r}")
    pieces = [text_of(c) or "" for c in chunks]
    assert sum(1 for p in pieces if p) >= 3, f"{where}: fewer than 3 chunks carry text: {pieces!r}"
    return "".join(pieces)


def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def vercel_provider_shapes(base: str, model: str) -> None:
    """The fields the Vercel AI SDK's Ollama providers (ollama-ai-provider 1.x and -v2) require
    of each answer, as their response schemas declare them: a provider rejects the whole answer
    when one is missing ("Invalid JSON response"). Written from those schemas' field lists."""
    e = httpx.post(f"{base}/api/embed", json={"model": model, "input": ["a", "b"]}, timeout=60).json()
    assert isinstance(e.get("model"), str) and len(e.get("embeddings", [])) == 2, e
    for k in ("total_duration", "load_duration", "prompt_eval_count"):
        assert is_count(e.get(k)), f"/api/embed: {k} is {e.get(k)!r}"
    c = httpx.post(f"{base}/api/chat", timeout=60, json={
        "model": model, "stream": False, "messages": CHAT, "options": GREEDY16}).json()
    assert c.get("done") is True and isinstance(c.get("created_at"), str) and isinstance(c.get("model"), str), c
    assert isinstance(c["message"].get("content"), str) and c["message"].get("role") == "assistant", c
    for k in ("eval_count", "eval_duration", "total_duration"):
        assert is_count(c.get(k)), f"/api/chat: {k} is {c.get(k)!r}"
    with httpx.stream("POST", f"{base}/api/chat", timeout=60, json={
            "model": model, "messages": CHAT, "options": GREEDY16}) as r:
        lines = [json.loads(l) for l in r.iter_lines() if l.strip()]
    for line in lines[:-1]:
        assert line["done"] is False and isinstance(line["message"]["content"], str), line
        assert isinstance(line["created_at"], str) and line["message"]["role"] == "assistant", line
    assert lines[-1]["done"] is True and is_count(lines[-1].get("eval_count")), lines[-1]
    for raw in (False, True):
        g = httpx.post(f"{base}/api/generate", timeout=60, json={
            "model": model, "prompt": "Hi", "raw": raw, "stream": False, "options": GREEDY16}).json()
        assert isinstance(g.get("context"), list), f"/api/generate (raw {raw}): context is {g.get('context')!r}"


def get_weather(city: str) -> str:
    """Current weather in a city.

    Args:
      city: The city's name
    """
    return "Sunny, 21 C"


def tools_and_formats(client, model) -> None:
    """Tools as the package sends them (a Python function, turned into a schema by the package)
    and as dicts: whatever the model chose, a call the package parses with arguments valid for
    the schema, or text; a call's result sent back as a `tool` message gets an answer."""
    ask = [{"role": "user", "content": "Use get_weather to find the weather in Oslo."}]
    for stream in (False, True):
        out = client.chat(model, messages=ask, tools=[get_weather], options=GREEDY16 | {"num_predict": 120},
                          stream=stream)
        messages = list(out) if stream else [out]
        calls = [c for m in messages for c in (m.message.tool_calls or [])]
        text = "".join(m.message.content or "" for m in messages)
        assert calls or text.strip(), f"chat(tools, stream={stream}): neither a call nor text"
        for c in calls:
            assert c.function.name == "get_weather", c
            assert isinstance(c.function.arguments, dict) and isinstance(c.function.arguments.get("city"), str), c
    history = ask + [{"role": "assistant", "content": "",
                      "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                     {"role": "tool", "content": get_weather("Oslo"), "tool_name": "get_weather"}]
    r = client.chat(model, messages=history, options=GREEDY16 | {"num_predict": 60})
    assert r.message.content and r.message.content.strip() and not r.message.tool_calls, r
    expect_error("chat(tools: parameters not a schema)",
                 lambda: client.chat(model, messages=ask, tools=[{"type": "function", "function": {
                     "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "frobnicate"}}}}}]),
                 status=400, mentions=["f"])


def main() -> None:
    base, model = sys.argv[1].rstrip("/"), sys.argv[2]
    client = ollama.Client(host=base, timeout=180)

    # --- GET /api/version (the package has no method for it: raw HTTP with httpx) ---------------
    r = httpx.get(f"{base}/api/version", timeout=30)
    assert r.status_code == 200, f"/api/version: HTTP {r.status_code}: {r.text[:300]}"
    version = r.json().get("version")
    assert isinstance(version, str) and re.match(r"^\d+\.\d+", version), (
        f"/api/version: `version` is {version!r}, expected a version string like '0.5.1'")

    # --- client.list(): GET /api/tags ------------------------------------------------------------
    listed = client.list()
    assert isinstance(listed, ollama.ListResponse), type(listed)
    names = [m.model for m in listed.models]
    mine = [m for m in listed.models if same_model(m.model, model)]
    assert mine, f"list(): {model!r} is not among the models: {names!r}"
    entry = mine[0]
    assert entry.size is not None and int(entry.size) > 0, f"list(): size is {entry.size!r}"
    assert isinstance(entry.digest, str) and entry.digest, f"list(): digest is {entry.digest!r}"
    assert entry.modified_at is not None, "list(): no modified_at"
    check_details("list()", entry.details)
    # Older api.md shows only `name` per entry, the package reads `model`: clients use both.
    raw = httpx.get(f"{base}/api/tags", timeout=30).json()
    for m in raw["models"]:
        assert m.get("name") and m.get("model"), f"/api/tags: an entry lacks `name` or `model`: {m!r}"

    # --- client.show(): POST /api/show ------------------------------------------------------------
    shown = client.show(model)
    assert isinstance(shown, ollama.ShowResponse), type(shown)
    check_details("show()", shown.details)
    assert shown.modelfile or shown.template or shown.parameters or shown.modelinfo, (
        f"show(): none of modelfile, template, parameters, model_info: {shown!r}"[:600])
    if shown.modelinfo:
        arch = shown.modelinfo.get("general.architecture")
        assert isinstance(arch, str) and arch, f"show(): model_info lacks general.architecture: {shown.modelinfo!r}"[:600]
    assert isinstance(shown.capabilities, list) and "completion" in shown.capabilities, (
        f"show(): capabilities are {shown.capabilities!r}, expected a list with 'completion'")
    assert "tools" in shown.capabilities, f"show(): no 'tools' capability: {shown.capabilities!r}"
    expect_error("show(unknown)", lambda: client.show(UNKNOWN), status=404)

    # --- chat, not streamed ---------------------------------------------------------------------
    t0 = time.monotonic_ns()
    chat = client.chat(model, messages=CHAT, options=GREEDY16)
    wall = time.monotonic_ns() - t0
    assert isinstance(chat, ollama.ChatResponse), type(chat)
    assert same_model(chat.model, model), f"chat(): model is {chat.model!r}, expected {model!r}"
    assert isinstance(chat.created_at, str) and chat.created_at, f"chat(): created_at is {chat.created_at!r}"
    assert chat.message.role == "assistant", f"chat(): role is {chat.message.role!r}"
    text = chat.message.content
    assert isinstance(text, str) and text.strip(), f"chat(): empty content: {chat!r}"
    check_final_stats("chat()", chat, wall_ns=wall, max_tokens=16)

    # --- chat, streamed: the same greedy text, delivered in pieces -------------------------------
    chunks = list(client.chat(model, messages=CHAT, options=GREEDY16, stream=True))
    for c in chunks:
        assert isinstance(c, ollama.ChatResponse) and c.message.role == "assistant", f"chat(stream): {c!r}"
    streamed = check_stream("chat(stream)", chunks, lambda c: c.message.content)
    assert streamed == text, f"chat(stream) text differs from chat():\n  {streamed!r}\n  {text!r}"
    last = chunks[-1]
    check_final_stats("chat(stream) last chunk", last, max_tokens=16)
    assert last.eval_count == chat.eval_count, (
        f"chat(stream): eval_count {last.eval_count} != {chat.eval_count} not streamed")
    assert last.prompt_eval_count == chat.prompt_eval_count, (
        f"chat(stream): prompt_eval_count {last.prompt_eval_count} != {chat.prompt_eval_count}")
    assert last.done_reason == chat.done_reason, (last.done_reason, chat.done_reason)

    # A multi-turn conversation with a system message is accepted.
    turns = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Which colour do children most often use for the sky in their drawings?"},
        {"role": "assistant", "content": "Most children paint the sky a bright, cheerful blue."},
        {"role": "user", "content": "And which colour do they usually choose for the grass under it?"},
    ]
    multi = client.chat(model, messages=turns, options={"temperature": 0, "num_predict": 8})
    assert multi.message.role == "assistant" and multi.message.content.strip(), f"chat(multi-turn): {multi!r}"
    assert multi.prompt_eval_count > chat.prompt_eval_count, (
        f"chat(multi-turn): prompt_eval_count {multi.prompt_eval_count} not above the one-message chat's "
        f"{chat.prompt_eval_count}: were the earlier turns dropped?")

    # --- client.ps(): GET /api/ps, after the model has served requests ------------------------------
    running = client.ps()
    assert isinstance(running, ollama.ProcessResponse), type(running)
    loaded = [m for m in running.models if same_model(m.model, model)]
    assert loaded, f"ps(): {model!r} is not listed as loaded: {[m.model for m in running.models]!r}"
    assert loaded[0].size is not None and int(loaded[0].size) > 0, f"ps(): size is {loaded[0].size!r}"
    check_details("ps()", loaded[0].details)

    # --- generate, not streamed and streamed -------------------------------------------------------
    t0 = time.monotonic_ns()
    gen = client.generate(model, PROMPT, options=GREEDY16)
    wall = time.monotonic_ns() - t0
    assert isinstance(gen, ollama.GenerateResponse), type(gen)
    assert same_model(gen.model, model), f"generate(): model is {gen.model!r}"
    gtext = gen.response
    assert isinstance(gtext, str) and gtext.strip(), f"generate(): empty response: {gen!r}"
    check_final_stats("generate()", gen, wall_ns=wall, max_tokens=16)

    gchunks = list(client.generate(model, PROMPT, options=GREEDY16, stream=True))
    gstreamed = check_stream("generate(stream)", gchunks, lambda c: c.response)
    assert gstreamed == gtext, f"generate(stream) text differs from generate():\n  {gstreamed!r}\n  {gtext!r}"
    check_final_stats("generate(stream) last chunk", gchunks[-1], max_tokens=16)
    assert gchunks[-1].eval_count == gen.eval_count, (gchunks[-1].eval_count, gen.eval_count)
    assert gchunks[-1].done_reason == gen.done_reason, (gchunks[-1].done_reason, gen.done_reason)

    # num_predict caps the tokens generated.
    five = client.generate(model, PROMPT, options={"temperature": 0, "num_predict": 5})
    assert five.eval_count == 5, f"num_predict 5: eval_count is {five.eval_count!r}"
    assert five.done_reason == "length", f"num_predict 5: done_reason is {five.done_reason!r}"
    assert five.response and gtext.startswith(five.response), (
        f"num_predict 5: greedy output {five.response!r} is not a prefix of the 16-token one {gtext!r}")

    # --- stop sequences: the output ends just before the first occurrence -------------------------
    long_opts = {"temperature": 0, "num_predict": 48}
    free = client.generate(model, PROMPT, options=long_opts).response
    stop, cut = None, -1
    for m in re.finditer(r"[A-Za-z]{3,}", free):
        if m.start() >= 8:
            stop, cut = m.group(0), free.find(m.group(0))
            if cut > 0:
                break
    assert stop and cut > 0, f"stop: no word to stop on in the greedy output {free!r}"
    opts = dict(long_opts, stop=["\u00a7never-appears\u00a7", stop])
    stopped = client.generate(model, PROMPT, options=opts)
    assert stop not in stopped.response, f"stop {stop!r}: it is in the output {stopped.response!r}"
    assert stopped.response == free[:cut], (
        f"stop {stop!r}: output {stopped.response!r}, expected the greedy text up to it: {free[:cut]!r}")
    assert stopped.done_reason == "stop", f"stop {stop!r}: done_reason is {stopped.done_reason!r}"
    schunks = list(client.generate(model, PROMPT, options=opts, stream=True))
    sstreamed = "".join(c.response or "" for c in schunks)
    assert sstreamed == free[:cut], (
        f"stop {stop!r} streamed: {sstreamed!r}, expected {free[:cut]!r} (no part of the stop string)")
    assert schunks[-1].done and schunks[-1].done_reason == "stop", f"stop streamed: last chunk {schunks[-1]!r}"

    # --- seed: sampling at temperature > 0 is reproducible with a seed, and does sample ---------------
    def sampled(seed):
        return client.generate(model, PROMPT, options={"temperature": 1.0, "seed": seed, "num_predict": 24}).response

    a, b = sampled(1234), sampled(1234)
    assert a == b, f"seed 1234 at temperature 1 gave two different texts:\n  {a!r}\n  {b!r}"
    others = {sampled(s) for s in (1, 2, 3)} | {a}
    assert len(others) >= 2, f"seeds 1, 2, 3, 1234 at temperature 1 all gave the same text: {a!r}"

    # --- format: JSON mode and a JSON schema --------------------------------------------------------
    jm = client.generate(
        # A question the 135M default model answers in a few tokens (an open one makes it nest
        # objects until num_predict runs out: valid JSON so far, but never closed).
        model, 'What colour is the sky? Answer as a JSON object with one key, "colour".',
        format="json", options={"temperature": 0, "num_predict": 256},
    )
    try:
        parsed = json.loads(jm.response)
    except ValueError as e:
        raise AssertionError(f"format='json': not JSON ({e}; done_reason {jm.done_reason!r}): {jm.response!r}")
    assert isinstance(parsed, dict), f"format='json': not a JSON object: {parsed!r}"

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    js = client.generate(
        model, "Alice is 31 years old and lives in Paris. Respond using JSON with her name and age.",
        format=schema, options={"temperature": 0, "num_predict": 256},
    )
    try:
        person = json.loads(js.response)
    except ValueError as e:
        raise AssertionError(f"format=schema: not JSON ({e}; done_reason {js.done_reason!r}): {js.response!r}")
    assert isinstance(person, dict), f"format=schema: not an object: {person!r}"
    assert isinstance(person.get("name"), str), f"format=schema: `name` is not a string: {person!r}"
    assert isinstance(person.get("age"), int) and not isinstance(person.get("age"), bool), (
        f"format=schema: `age` is not an integer: {person!r}")

    # The package README's pattern: a pydantic model's schema on chat, validated back.
    class Person(BaseModel):
        name: str
        age: int

    pc = client.chat(
        model, messages=[{"role": "user", "content": "Bob is 42. Reply with his name and age as JSON."}],
        format=Person.model_json_schema(), options={"temperature": 0, "num_predict": 256},
    )
    try:
        Person.model_validate_json(pc.message.content)
    except Exception as e:
        raise AssertionError(f"chat(format=Person schema): does not validate ({e}): {pc.message.content!r}")

    # --- embeddings: POST /api/embed and the legacy /api/embeddings --------------------------------
    one = client.embed(model, input="The quick brown fox jumps over the lazy dog.")
    assert isinstance(one, ollama.EmbedResponse), type(one)
    assert len(one.embeddings) == 1, f"embed(str): {len(one.embeddings)} vectors, expected 1"
    dim = len(one.embeddings[0])
    assert dim > 0, "embed(str): an empty vector"
    if one.model is not None:
        assert same_model(one.model, model), f"embed(): model is {one.model!r}"
    if one.prompt_eval_count is not None:
        assert is_pos_int(one.prompt_eval_count), f"embed(): prompt_eval_count is {one.prompt_eval_count!r}"
    two = client.embed(model, input=["The quick brown fox jumps over the lazy dog.", "Paris is in France."])
    assert len(two.embeddings) == 2, f"embed([a, b]): {len(two.embeddings)} vectors, expected 2"
    for where, vecs in (("embed(str)", one.embeddings), ("embed([a, b])", two.embeddings)):
        for i, v in enumerate(vecs):
            assert len(v) == dim, f"{where}[{i}]: length {len(v)}, expected {dim}"
            assert all(isinstance(x, float) and math.isfinite(x) for x in v), f"{where}[{i}]: not finite floats"
            assert abs(norm(v) - 1) < 1e-3, f"{where}[{i}]: L2 norm {norm(v)}, expected 1 (normalized)"
    assert cosine(one.embeddings[0], two.embeddings[0]) > 0.999, (
        "embed: the same text embeds differently alone and in a batch")
    assert cosine(two.embeddings[0], two.embeddings[1]) < 0.9999, "embed: two different texts, one vector"

    legacy = client.embeddings(model, prompt="The quick brown fox jumps over the lazy dog.")
    assert isinstance(legacy, ollama.EmbeddingsResponse), type(legacy)
    assert len(legacy.embedding) == dim, f"embeddings(): length {len(legacy.embedding)}, expected {dim}"
    assert all(math.isfinite(x) for x in legacy.embedding), "embeddings(): not finite floats"
    # Ollama's legacy endpoint answers the pooled vector as the model made it, not normalized.
    assert abs(norm(legacy.embedding) - 1) > 1e-3, (
        f"embeddings() (legacy): L2 norm {norm(legacy.embedding)}, expected the raw vector (not normalized)")
    assert cosine(legacy.embedding, one.embeddings[0]) > 0.999, (
        "embeddings() (legacy) and embed() point different ways for the same text")

    # --- errors: unknown model (404), bad options (400) -------------------------------------------
    expect_error("chat(unknown model)", lambda: client.chat(UNKNOWN, messages=CHAT), status=404, mentions=["no-such-model"])
    expect_error("chat(unknown model, stream)", lambda: client.chat(UNKNOWN, messages=CHAT, stream=True), status=404)
    expect_error("generate(unknown model)", lambda: client.generate(UNKNOWN, PROMPT), status=404, mentions=["no-such-model"])
    expect_error("generate(unknown model, stream)", lambda: client.generate(UNKNOWN, PROMPT, stream=True), status=404)
    expect_error("embed(unknown model)", lambda: client.embed(UNKNOWN, input="hi"), status=404)

    expect_error("chat(temperature -1)", lambda: client.chat(model, messages=CHAT, options={"temperature": -1}),
                 status=400, mentions=["temperature"])
    expect_error("generate(temperature -1)", lambda: client.generate(model, PROMPT, options={"temperature": -1}),
                 status=400, mentions=["temperature"])
    expect_error("generate(num_predict 'many')",
                 lambda: client.generate(model, PROMPT, options={"num_predict": "many"}),
                 status=400, mentions=["num_predict"])
    expect_error("chat(num_predict 'many', stream)",
                 lambda: client.chat(model, messages=CHAT, options={"num_predict": "many"}, stream=True), status=400)

    # --- pull / delete of a name that is no hub file / no model here: an honest error -------------------
    e = expect_error("pull('x')", lambda: client.pull("x"), status=400, mentions=["OWNER/REPO/FILE.gguf"])
    try:
        list(client.pull("x", stream=True))
        raise AssertionError("pull('x', stream=True): no error")
    except ollama.ResponseError as e2:
        assert e2.error and e2.error.strip(), f"pull('x', stream=True): an empty error: {e2!r}"
    d = expect_error("delete('x')", lambda: client.delete("x"), min_status=400)
    assert any(same_model(m.model, model) for m in client.list().models), "the model vanished after pull/delete of 'x'"

    tools_and_formats(client, model)
    vercel_provider_shapes(base, model)

    print(f"ollama client OK: version {version}, {dim}-d embeddings, {text[:40]!r}; "
          f"pull: {e.error[:60]!r}; delete: {d.error[:60]!r}")


if __name__ == "__main__":
    main()
