"""Decode speed and time to first token of an OpenAI-compatible server (`/v1/completions`),
with 1, 4 and 8 requests at once. Standard library only (the machine it runs on may have
nothing else).

    stream_bench.py URL [--tokens 256] [--streams 1,4,8] [--rounds 2] [--prompt-words 400]

Prints one JSON object: for each count, the decode rate of all requests together (their
tokens over the time from the first request sent to the last answer: llama-batched-bench's
S t/s; short prompts, so that nearly all of it is decoding) and the server's own decode rate
of one (the median request's `timings.predicted_per_second`, where the server reports it),
with each request's time in the queue, in prefill, in decode and outside the server's
timings (HTTP, the client) and how far apart they were sent and answered, for the best round
and the others; and the median time to first token, streamed, of a prompt of about `--prompt-words` tokens on
its own. The decode rounds are not streamed: one Python client parsing a streamed token per
line from 8 threads at once falls behind a GPU (about 600 lines a second), and would measure
itself.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars rise above "
         "an old stone bridge near the quiet river ").split()


def prompt(words, salt):
    body = " ".join(WORDS[i % len(WORDS)] for i in range(words))
    return f"{salt}: {body}"


def stream(url, text, tokens):
    """One streamed completion: (time of the first token, time of the end, tokens)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": text, "max_tokens": tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{resp.status}: {resp.read()[:500]!r}")
    first, count, prompt_tokens = None, 0, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        usage = chunk.get("usage")
        if usage and usage.get("completion_tokens"):
            count = usage["completion_tokens"]
            prompt_tokens = usage.get("prompt_tokens", 0)
        if any(c.get("text") for c in chunk.get("choices", [])):
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    conn.close()
    return start, first or end, end, count, prompt_tokens


def whole(url, text, tokens):
    """One completion, not streamed: (sent, answered, tokens, the server's decode rate)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": text, "max_tokens": tokens, "temperature": 0,
                       "ignore_eos": True})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    end = time.perf_counter()
    conn.close()
    if resp.status != 200:
        raise SystemExit(f"{resp.status}: {data[:500]!r}")
    answer = json.loads(data)
    timings = answer.get("timings") or {}
    return start, end, answer["usage"]["completion_tokens"], timings


def round_of(url, n, tokens, words, salt):
    results = [None] * n

    def run(i):
        results[i] = whole(url, prompt(words, f"{salt}-{i}"), tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    total = sum(r[2] for r in results)
    rates = [r[3]["predicted_per_second"] for r in results if r[3].get("predicted_per_second")]
    out = {"aggregate": total / (end - start), "tokens": total,
           "server_per_request": statistics.median(rates) if rates else None}
    # Where a round's time went, per request (the server's own timings, where it gives them):
    # waiting for a slot, prefill, decode, and the rest (HTTP, the client); and how far apart
    # the requests were sent and answered.
    if all("predicted_ms" in r[3] for r in results):
        ms = lambda key: [round(r[3].get(key, 0.0), 1) for r in results]
        out["queued_ms"], out["prompt_ms"], out["predicted_ms"] = (
            ms("queued_ms"), ms("prompt_ms"), ms("predicted_ms"))
        out["outside_ms"] = [round((r[1] - r[0]) * 1000 - r[3].get("queued_ms", 0.0)
                                   - r[3].get("prompt_ms", 0.0) - r[3]["predicted_ms"], 1)
                             for r in results]
    out["sent_spread_ms"] = round((max(r[0] for r in results) - start) * 1000, 1)
    out["answered_spread_ms"] = round((end - min(r[1] for r in results)) * 1000, 1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=400)
    args = ap.parse_args()
    out = {"streams": {}}
    # Warm up: the first request pays for loading and compiling shaders.
    stream(args.url, prompt(16, "warm"), 8)
    for n in [int(s) for s in args.streams.split(",")]:
        # A round first that is not counted: a GPU driver compiles its kernels for each new
        # shape of batch the first time it sees it.
        round_of(args.url, n, 16, 16, f"warm{n}")
        rounds = [round_of(args.url, n, args.tokens, 16, f"r{n}-{k}") for k in range(args.rounds)]
        best = max(rounds, key=lambda r: r["aggregate"])
        out["streams"][str(n)] = best
        out.setdefault("other_rounds", {})[str(n)] = [r for r in rounds if r is not best]
    ttfts, prompt_tokens = [], 0
    for k in range(3):
        s, first, _, _, prompt_tokens = stream(args.url, prompt(args.prompt_words, f"ttft-{k}"), 1)
        ttfts.append(first - s)
    out["ttft_s"] = statistics.median(ttfts)
    out["ttft_prompt_tokens"] = prompt_tokens
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
