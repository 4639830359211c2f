"""Drive a Hearth node's /v1/embeddings with the official `openai` Python package, as a real client would.

Usage: python tests/openai_embeddings.py BASE_URL MODEL_ID
Written from OpenAI's public embeddings API reference and the package's behaviour only.
Exits non-zero (with an assertion message) when anything the package sees is off.
"""
import base64
import math
import struct
import sys

import openai
from openai import OpenAI

CAT = "The cat sat on the mat."
CAT2 = "A cat was sitting on the mat."
TAX = "Quarterly tax filings are due in April."


def norm(v) -> float:
    return math.sqrt(sum(x * x for x in v))


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


def check_response(where, resp, n_inputs, dim=None):
    """One `data` item per input, in order, all of one dimension; usage counts the prompt. Returns vectors."""
    assert resp.object == "list", f"{where}: object is {resp.object!r}, expected 'list'"
    assert isinstance(resp.model, str) and resp.model, f"{where}: model is {resp.model!r}"
    assert len(resp.data) == n_inputs, f"{where}: {len(resp.data)} data items for {n_inputs} inputs"
    for i, item in enumerate(resp.data):
        assert item.index == i, f"{where}: data[{i}].index is {item.index!r}"
        assert item.object == "embedding", f"{where}: data[{i}].object is {item.object!r}"
    u = resp.usage
    assert u is not None, f"{where}: no usage"
    assert isinstance(u.prompt_tokens, int) and u.prompt_tokens > 0, f"{where}: usage.prompt_tokens is {u.prompt_tokens!r}"
    assert u.total_tokens == u.prompt_tokens, (
        f"{where}: usage.total_tokens {u.total_tokens} != prompt_tokens {u.prompt_tokens}")
    return [check_vector(f"{where} data[{i}]", item.embedding, dim) for i, item in enumerate(resp.data)]


def check_vector(where, v, dim=None):
    assert isinstance(v, list) and v, f"{where}: the embedding is not a non-empty list of floats: {str(v)[:200]}"
    assert all(isinstance(x, float) and math.isfinite(x) for x in v), f"{where}: not all finite floats"
    if dim is not None:
        assert len(v) == dim, f"{where}: {len(v)} dimensions, expected {dim}"
    # OpenAI documents its embeddings as normalized to length 1.
    assert abs(norm(v) - 1) < 1e-3, f"{where}: L2 norm {norm(v)}, expected 1"
    return v


def decode_base64(where, s, dim):
    """encoding_format='base64': little-endian float32s, base64-encoded."""
    assert isinstance(s, str), f"{where}: base64 was asked for, the embedding is a {type(s).__name__}"
    raw = base64.b64decode(s, validate=True)
    assert len(raw) == 4 * dim, f"{where}: {len(raw)} bytes of base64 data, expected {4 * dim} ({dim} float32s)"
    return list(struct.unpack(f"<{dim}f", raw))


def close(a, b, tol=1e-6) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def main() -> None:
    base, model = sys.argv[1].rstrip("/"), sys.argv[2]
    client = OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=120)

    # One string, floats asked for explicitly.
    single = client.embeddings.create(model=model, input=CAT, encoding_format="float")
    [v_cat] = check_response("one string", single, 1)
    dim = len(v_cat)

    # A batch of three.
    batch_in = [CAT, CAT2, TAX]
    batch = client.embeddings.create(model=model, input=batch_in, encoding_format="float")
    v_b = check_response("batch of 3", batch, 3, dim)
    assert batch.usage.prompt_tokens > single.usage.prompt_tokens, (
        f"batch of 3: prompt_tokens {batch.usage.prompt_tokens} not above one string's {single.usage.prompt_tokens}")
    assert cosine(v_b[0], v_cat) > 0.999, "the same text embeds differently alone and in a batch"

    # base64: the same vectors, as little-endian float32.
    b64 = client.embeddings.create(model=model, input=batch_in, encoding_format="base64")
    assert b64.object == "list" and len(b64.data) == 3, f"base64: {b64!r}"[:600]
    for i, item in enumerate(b64.data):
        assert item.index == i and item.object == "embedding", f"base64: data[{i}] is {item!r}"[:300]
        decoded = decode_base64(f"base64 data[{i}]", item.embedding, dim)
        assert close(decoded, v_b[i]), (
            f"base64 data[{i}]: differs from the float vector by up to "
            f"{max(abs(x - y) for x, y in zip(decoded, v_b[i]))}")

    # No encoding_format: the package itself asks for base64 and decodes it to floats.
    default = client.embeddings.create(model=model, input=batch_in)
    v_d = check_response("default encoding", default, 3, dim)
    for i in range(3):
        assert close(v_d[i], v_b[i]), f"default encoding data[{i}]: differs from the float vector"

    # Token ids: a list of token-id arrays (one embedding each), and one flat token-id array.
    toks = client.embeddings.create(model=model, input=[[100, 200, 300, 400], [500, 600, 700]], encoding_format="float")
    check_response("token-id arrays", toks, 2, dim)
    assert toks.usage.prompt_tokens >= 7, f"token-id arrays: prompt_tokens {toks.usage.prompt_tokens} < the 7 ids sent"
    flat = client.embeddings.create(model=model, input=[100, 200, 300, 400], encoding_format="float")
    check_response("one token-id array", flat, 1, dim)

    # Meaning: two close sentences are nearer than two unrelated ones.
    near, far = cosine(v_b[0], v_b[1]), cosine(v_b[0], v_b[2])
    assert near > far, f"cosine({CAT!r}, {CAT2!r}) = {near:.4f} is not above cosine({CAT!r}, {TAX!r}) = {far:.4f}"

    # Errors.
    try:
        client.embeddings.create(model="no-such-model", input=CAT, encoding_format="float")
        raise AssertionError("an unknown model was accepted")
    except openai.APIStatusError as e:
        assert isinstance(e, openai.NotFoundError), f"unknown model: HTTP {e.status_code}, expected 404: {e.body!r}"
        assert isinstance(e.body, dict) and e.body.get("message"), f"unknown model: error body {e.body!r}"
        assert e.body.get("code") == "model_not_found", f"unknown model: error body {e.body!r}"
    try:
        client.embeddings.create(model=model, input=[], encoding_format="float")
        raise AssertionError("an empty input list was accepted")
    except openai.APIStatusError as e:
        assert isinstance(e, openai.BadRequestError), f"empty input: HTTP {e.status_code}, expected 400: {e.body!r}"
        assert isinstance(e.body, dict) and e.body.get("message"), f"empty input: error body {e.body!r}"

    print(f"openai embeddings OK: {dim} dimensions, cosine near {near:.3f} > far {far:.3f}")


if __name__ == "__main__":
    main()
