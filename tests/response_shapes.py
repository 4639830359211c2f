"""Every answer of the OpenAI and Ollama doors against the official Python packages' own types:
each is validated by the type (`model_validate`: required fields and their types) and compared
with the type's field list, so a field a client's type declares and Hearth leaves out fails
here unless it is in that type's list of fields Hearth leaves out on purpose (each with why).

Usage: python tests/response_shapes.py BASE_URL MODEL_ID
"""
import json
import sys

import httpx
import ollama
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

# Fields a type declares that Hearth does not send, and why.
LEFT_OUT = {
    # OpenAI's own: no fingerprint of a backend configuration, no service tiers, no moderation.
    "ChatCompletion": {"system_fingerprint", "service_tier", "moderation"},
    "ChatCompletionChunk": {"system_fingerprint", "service_tier", "usage", "moderation"},
    "Completion": {"system_fingerprint"},
    # Audio, annotations (web search) and the deprecated function_call are not made; tool_calls
    # only when the model called one.
    "ChatCompletionMessage": {"annotations", "audio", "function_call", "tool_calls"},
    "ChoiceDelta": {"function_call", "refusal", "tool_calls", "content", "role", "reasoning_content"},
    # Ollama: no images or a logprobs option on these doors.
    "Message": {"images", "tool_name", "thinking", "tool_calls"},
    "ChatResponse": {"logprobs"},
    # Image generation's progress (`completed`, `total`, `image`) is not a text model's.
    "GenerateResponse": {"logprobs", "thinking", "completed", "total", "image"},
    # The package's type inherits a generation's statistics; Ollama's /api/embed sends none.
    "EmbedResponse": {"created_at", "done", "done_reason", "eval_count", "eval_duration",
                      "prompt_eval_duration"},
    # /api/show: no license, projector, tensors or system prompt of Ollama's Modelfile store.
    "ShowResponse": {"license", "projector_info", "tensors", "system", "messages", "parser", "renderer"},
    # /api/ps: an embedding model's or a cloud model's fields.
    "Model": {"remote_model", "remote_host"},
}


def fields(cls):
    return {f.alias or name for name, f in cls.model_fields.items()}


PROBLEMS = []


def check(where, cls, obj, name=None):
    """`obj` validates as `cls`, and holds every field `cls` declares but those left out."""
    name = name or cls.__name__
    try:
        cls.model_validate(obj)
    except Exception as e:  # pydantic's ValidationError, said whole
        PROBLEMS.append(f"{where}: not a valid {name}: {e}")
    missing = fields(cls) - set(obj) - LEFT_OUT.get(name, set())
    if missing:
        PROBLEMS.append(f"{where}: {name} declares {sorted(missing)}, which Hearth left out: {json.dumps(obj)[:300]}")


def openai_side(base, model):
    http = httpx.Client(base_url=f"{base}/v1", timeout=120)
    ask = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}
    c = http.post("/chat/completions", json=ask).json()
    check("chat", ChatCompletion, c)
    check("chat choice", ChatCompletion.model_fields["choices"].annotation.__args__[0], c["choices"][0], "Choice")
    from openai.types.chat import ChatCompletionMessage
    check("chat message", ChatCompletionMessage, c["choices"][0]["message"])
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    t = http.post("/chat/completions", json=ask | {"tools": [tool], "tool_choice": "required", "max_tokens": 80}).json()
    check("chat with a call", ChatCompletion, t)
    from openai.types.chat import ChatCompletionMessageFunctionToolCall
    check("a call", ChatCompletionMessageFunctionToolCall, t["choices"][0]["message"]["tool_calls"][0])
    with http.stream("POST", "/chat/completions", json=ask | {"stream": True, "stream_options": {"include_usage": True}}) as r:
        chunks = [json.loads(l[6:]) for l in r.iter_lines() if l.startswith("data: {")]
    assert chunks and not chunks[-1]["choices"] and chunks[-1]["usage"], chunks[-1:]
    for i, chunk in enumerate(chunks):
        check(f"chunk {i}", ChatCompletionChunk, chunk)
        from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice, ChoiceDelta
        for choice in chunk["choices"]:
            check(f"chunk {i} choice", ChunkChoice, choice, "ChunkChoice")
            check(f"chunk {i} delta", ChoiceDelta, choice["delta"])
    comp = http.post("/completions", json={"model": model, "prompt": "Once", "max_tokens": 4}).json()
    check("completion", Completion, comp)
    for m in http.get("/models").json()["data"]:
        check("models", Model, m)
    check("models/{id}", Model, http.get(f"/models/{model}").json())
    check("embeddings", CreateEmbeddingResponse, http.post("/embeddings", json={"model": model, "input": "hi"}).json())


def ollama_side(base, model):
    http = httpx.Client(base_url=base, timeout=120)
    t = ollama._types
    chat = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "stream": False,
            "options": {"temperature": 0, "num_predict": 8}}
    c = http.post("/api/chat", json=chat).json()
    check("chat", t.ChatResponse, c)
    check("chat message", t.Message, c["message"])
    with http.stream("POST", "/api/chat", json=chat | {"stream": True}) as r:
        for i, line in enumerate(l for l in r.iter_lines() if l.strip()):
            obj = json.loads(line)
            # Streamed pieces carry no statistics, as Ollama's own do not.
            t.ChatResponse.model_validate(obj)
            if obj["done"]:
                check(f"chat line {i}", t.ChatResponse, obj)
    g = http.post("/api/generate", json={"model": model, "prompt": "Hi", "stream": False,
                                         "options": {"num_predict": 8}}).json()
    check("generate", t.GenerateResponse, g)
    check("embed", t.EmbedResponse, http.post("/api/embed", json={"model": model, "input": "hi"}).json())
    check("embeddings", t.EmbeddingsResponse, http.post("/api/embeddings", json={"model": model, "prompt": "hi"}).json())
    tags = http.get("/api/tags").json()
    check("tags", t.ListResponse, tags)
    for m in tags["models"]:
        check("tags model", t.ListResponse.Model, m, "ListModel")
    check("show", t.ShowResponse, http.post("/api/show", json={"model": model}).json())
    ps = http.get("/api/ps").json()
    check("ps", t.ProcessResponse, ps)
    for m in ps["models"]:
        check("ps model", t.ProcessResponse.Model, m)


def main():
    base, model = sys.argv[1].rstrip("/"), sys.argv[2]
    openai_side(base, model)
    ollama_side(base, model)
    assert not PROBLEMS, "\n".join(PROBLEMS)
    print("response shapes OK")


if __name__ == "__main__":
    main()
