"""A TealeNet-shaped LAN peer, written from protocols/cluster-messages.md and NOTES.md (never
from Hearth's code): plain length-prefixed JSON frames, every message in the `_0` envelope,
lowercase UUIDs, and only `heartbeatAck` of its own, as the Rust node does.

    tealenet_peer.py HOST PORT serve PASSCODE MODEL   # hello, heartbeat, one inference, cancel one
    tealenet_peer.py HOST PORT refused PASSCODE       # hello; the node must close the connection
    tealenet_peer.py HOST PORT raw HEX                # send these bytes first; report what happens
    tealenet_peer.py HOST PORT linger PASSCODE        # hello and a hot heartbeatAck, then stay
                                                      # connected until a line on stdin
    tealenet_peer.py HOST PORT provide PASSCODE MODEL [SPEED [THERMAL]]  # offer MODEL (its
                                                      # heartbeat with this decode speed and
                                                      # thermal level); answer the node's one
                                                      # inferenceRequest with a fixed text
    tealenet_peer.py HOST PORT fetch PASSCODE MODEL ABS [MORE...]  # ask for MODEL and for
                                                      # path names (ABS an absolute one); fetch
                                                      # MODEL (and each of MORE) whole
    tealenet_peer.py HOST 0 listen PASSCODE MODEL     # the listening side: print the port, take
                                                      # hellos (closing those whose passcode hash
                                                      # differs), answer one inferenceRequest for
                                                      # MODEL as `provide` does, answer heartbeats
                                                      # until a line on stdin

Prints one JSON object with what it saw; exits non-zero on anything the documents forbid.
"""

import base64
import hashlib
import json
import select
import socket
import struct
import sys
import time
import uuid

TIMEOUT = 30


def send(sock, name, payload):
    body = json.dumps({name: {"_0": payload}}).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv(sock):
    """The next message as (name, payload), or None when the node closed the connection."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    body = recv_exact(sock, length)
    if body is None:
        return None
    msg = json.loads(body)
    assert isinstance(msg, dict) and len(msg) == 1, msg
    (name, payload), = msg.items()
    # Either envelope shape is allowed by NOTES.md; this peer spoke `_0`, so expect it back.
    assert isinstance(payload, dict) and list(payload) == ["_0"], f"not the _0 shape: {msg}"
    return name, payload["_0"]


def recv_until(sock, wanted, seen):
    """Read until a message named in `wanted` arrives; others are recorded in `seen`."""
    while True:
        m = recv(sock)
        if m is None:
            raise SystemExit(f"closed while waiting for {wanted}: saw {seen}")
        if m[0] in wanted:
            return m
        seen.append(m[0])


def hello(passcode):
    h = hashlib.sha256(passcode.encode()).hexdigest() if passcode else None
    payload = {
        "deviceInfo": {
            "id": str(uuid.uuid4()),  # lowercase, as the Rust node sends
            "name": "python-teale",
            "hardware": {"chipFamily": "someNewChip", "chipName": "Test", "totalRAMGB": 8.0,
                         "gpuCoreCount": 0, "memoryBandwidthGBs": 10.0},
            "registeredAt": 798134400.0, "lastSeenAt": 798134400.0,
            "isCurrentDevice": True, "loadedModels": [],
        },
        "protocolVersion": 1,
        "loadedModels": [],
    }
    if h is not None:
        payload["clusterPasscodeHash"] = h
    return payload


def is_uuid(s):
    try:
        uuid.UUID(s)
        return True
    except (ValueError, TypeError):
        return False


def serve(sock, passcode, model):
    out = {}
    send(sock, "hello", hello(passcode))
    seen = []
    name, ack = recv_until(sock, {"helloAck"}, seen)
    info = ack["deviceInfo"]
    assert is_uuid(info["id"]) and info["id"] == info["id"].upper(), info
    assert isinstance(info["hardware"]["gpuCoreCount"], int), info
    for k in ["chipFamily", "chipName", "totalRAMGB", "memoryBandwidthGBs"]:
        assert k in info["hardware"], info
    out["ack_name"] = info["name"]
    out["ack_models"] = ack["loadedModels"]
    out["ack_passcode_hash"] = ack.get("clusterPasscodeHash")
    # Only heartbeatAck of its own, with a fresh device id (the Rust node's habit).
    send(sock, "heartbeatAck", {"deviceID": str(uuid.uuid4()), "timestamp": 798134401.0,
                                "thermalLevel": "nominal", "throttleLevel": 100,
                                "loadedModels": [], "isGenerating": False, "queueDepth": 0})
    send(sock, "heartbeat", {"deviceID": str(uuid.uuid4()), "timestamp": 798134401.0,
                             "thermalLevel": "nominal", "throttleLevel": 100,
                             "loadedModels": [], "isGenerating": False, "queueDepth": 0})
    _, hb = recv_until(sock, {"heartbeatAck"}, seen)
    assert isinstance(hb["throttleLevel"], int) and isinstance(hb["queueDepth"], int), hb
    assert hb["thermalLevel"] in ("nominal", "fair", "serious", "critical"), hb
    out["heartbeat_throttle"] = hb["throttleLevel"]
    # A frame that is no message of the document is skipped; the connection goes on.
    garbage = b"this is not json"
    sock.sendall(struct.pack(">I", len(garbage)) + garbage)
    # One inference, its requestID lowercase: echoed exactly.
    rid = str(uuid.uuid4())
    send(sock, "inferenceRequest", {"requestID": rid, "streaming": True, "request": {
        "model": model, "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": 6, "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "user": "u"}})
    text, usage, finish = "", None, None
    while True:
        name, p = recv_until(sock, {"inferenceChunk", "inferenceComplete", "inferenceError"}, seen)
        assert p["requestID"] == rid, p
        if name == "inferenceError":
            raise SystemExit(f"inferenceError: {p}")
        if name == "inferenceComplete":
            out["tokens_out"] = p.get("tokensOut")
            break
        c = p["chunk"]
        assert c["object"] == "chat.completion.chunk" and isinstance(c["created"], int), c
        assert c["id"] and c["model"], c
        for ch in c["choices"]:
            text += ch.get("delta", {}).get("content") or ""
            finish = ch.get("finish_reason") or finish
        usage = c.get("usage") or usage
    out["text"] = text
    out["finish_reason"] = finish
    out["usage"] = usage
    # A model it does not have: model_not_loaded, one of the six codes.
    rid2 = str(uuid.uuid4())
    send(sock, "inferenceRequest", {"requestID": rid2, "request": {
        "model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}})
    _, err = recv_until(sock, {"inferenceError"}, seen)
    assert err["requestID"] == rid2, err
    out["unknown_model_code"] = err.get("code")
    # Tools (an OpenAI field the peer's own documents do not give it): refused, not ignored.
    rid_tools = str(uuid.uuid4())
    send(sock, "inferenceRequest", {"requestID": rid_tools, "request": {
        "model": model, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}})
    _, err = recv_until(sock, {"inferenceError"}, seen)
    assert err["requestID"] == rid_tools, err
    out["tools_code"] = err.get("code")
    out["tools_error"] = err.get("errorMessage")
    # A long answer, cancelled by the consumer.
    rid3 = str(uuid.uuid4())
    send(sock, "inferenceRequest", {"requestID": rid3, "request": {
        "model": model, "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 900, "ignore_eos": True}})
    name, p = recv_until(sock, {"inferenceChunk"}, seen)
    send(sock, "inferenceError", {"requestID": rid3, "errorMessage": "user cancelled",
                                  "code": "cancelled"})
    # The connection stays open: the node's heartbeats must soon say it generates nothing,
    # and the cancelled request never completes.
    seen_before = len(seen)
    stopped = False
    for _ in range(25):
        send(sock, "heartbeat", {"deviceID": str(uuid.uuid4()), "timestamp": 798134402.0,
                                 "thermalLevel": "nominal", "throttleLevel": 100,
                                 "loadedModels": [], "isGenerating": False, "queueDepth": 0})
        _, hb = recv_until(sock, {"heartbeatAck"}, seen)
        if hb["isGenerating"] is False:
            stopped = True
            break
        time.sleep(0.2)
    # Whatever was still on its way has arrived within a second; none of it completes rid3.
    sock.settimeout(1.0)
    try:
        while True:
            m = recv(sock)
            if m is None:
                break
            seen.append(m[0])
            if m[0] == "inferenceComplete" and m[1].get("requestID") == rid3:
                seen.append("inferenceComplete")
    except socket.timeout:
        pass
    sock.settimeout(TIMEOUT)
    out["cancel_stopped"] = stopped
    out["cancelled_completed"] = "inferenceComplete" in seen[seen_before:]
    out["seen_also"] = sorted(set(seen))
    print(json.dumps(out), flush=True)


def refused(sock, passcode):
    send(sock, "hello", hello(passcode))
    m = recv(sock)
    print(json.dumps({"after_hello": m[0] if m else "closed"}), flush=True)


def linger(sock, passcode):
    send(sock, "hello", hello(passcode))
    recv_until(sock, {"helloAck"}, [])
    send(sock, "heartbeatAck", {"deviceID": str(uuid.uuid4()), "timestamp": 798134401.0,
                                "thermalLevel": "serious", "throttleLevel": 25,
                                "loadedModels": ["teale/model"], "isGenerating": True,
                                "queueDepth": 2})
    print(json.dumps({"lingering": True}), flush=True)
    sys.stdin.readline()


PROVIDED_TEXT = ["Hello", " from", " a", " TealeNet", " peer."]


def provide(sock, passcode, model, speed=None, thermal="nominal"):
    """A provider as the Rust node is one: it offers MODEL, answers one request with OpenAI
    chunks (an empty `delta` first, `choices: []` with usage last), then inferenceComplete.
    SPEED is the decode speed its heartbeat reports (`ewmaTokensPerSecond`, as the Rust node
    sends it), THERMAL its thermal level."""
    payload = hello(passcode)
    payload["loadedModels"] = [model]
    send(sock, "hello", payload)
    seen = []
    recv_until(sock, {"helloAck"}, seen)
    health = {"deviceID": str(uuid.uuid4()), "timestamp": 798134401.0,
              "thermalLevel": thermal, "throttleLevel": 100, "loadedModels": [model],
              "isGenerating": False, "queueDepth": 0}
    if speed is not None:
        health["ewmaTokensPerSecond"] = float(speed)
    send(sock, "heartbeatAck", health)
    print(json.dumps({"providing": model}), flush=True)
    out = answer_one(sock, model, seen)
    print(json.dumps(out), flush=True)
    sys.stdin.readline()


def answer_one(sock, model, seen):
    """Wait for one inferenceRequest for MODEL and answer it with PROVIDED_TEXT in OpenAI
    chunks, as the Rust node streams them; what the request carried."""
    _, req = recv_until(sock, {"inferenceRequest"}, seen)
    rid = req["requestID"]
    body = req["request"]
    assert is_uuid(rid), req
    assert body["model"] == model and body["messages"], req
    def chunk(delta, finish=None, usage=None):
        c = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
             "model": model, "choices": [] if usage else [{"index": 0, "delta": delta,
                                                           "finish_reason": finish}]}
        if usage:
            c["usage"] = usage
        send(sock, "inferenceChunk", {"requestID": rid, "chunk": c})
    chunk({})
    for piece in PROVIDED_TEXT:
        chunk({"content": piece})
    chunk({}, finish="stop")
    chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14})
    send(sock, "inferenceComplete", {"requestID": rid, "tokensOut": 5})
    return {"request_keys": sorted(body), "request_id": rid,
            "messages": body["messages"], "hearth_fields": [k for k in body if "hearth" in k]}


def transfer(sock, model, seen):
    """One modelTransferRequest for MODEL: its chunks in order until modelTransferComplete, as
    (file names seen, number of chunks, SHA-256 of the bytes, total bytes, and each file in
    order with its bytes and SHA-256). A model of several files comes one file after another,
    each from offset 0; a file ends when the next starts or the transfer completes (NOTES.md)."""
    tid = str(uuid.uuid4())
    send(sock, "modelTransferRequest", {"transferID": tid, "modelID": model})
    names, chunks, total, digest = set(), 0, 0, hashlib.sha256()
    files = []
    flagged = False
    while True:
        name, body = recv_until(sock, {"modelTransferChunk", "modelTransferComplete"}, seen)
        assert body["transferID"] == tid, body
        # As the reference sends it: only the last chunk of the last file is flagged.
        assert not flagged or name == "modelTransferComplete", ("a chunk after the last", body)
        if name == "modelTransferComplete":
            assert body["modelID"] == model, body
            assert flagged or not files, ("no chunk flagged last", files[-1]["file"])
            each = [{"file": f["file"], "bytes": f["bytes"], "sha256": f["digest"].hexdigest()}
                    for f in files]
            return sorted(names), chunks, digest.hexdigest(), total, each
        data = base64.b64decode(body["data"], validate=True)
        if not files or files[-1]["file"] != body["fileName"]:
            assert body["fileName"] not in names, ("a file sent twice", body["fileName"])
            files.append({"file": body["fileName"], "bytes": 0, "digest": hashlib.sha256(),
                          "short": False})
        f = files[-1]
        # 1,048,576-byte chunks (NOTES.md), the offset the file's bytes so far; only a file's
        # last chunk is short.
        assert body["offset"] == f["bytes"], (body["offset"], f["bytes"])
        assert len(data) <= 1 << 20 and not f["short"], body
        f["short"] = len(data) < 1 << 20
        flagged = body["isLastChunk"]
        names.add(body["fileName"])
        chunks += 1
        total += len(data)
        f["bytes"] += len(data)
        f["digest"].update(data)
        digest.update(data)


def fetch(sock, passcode, model, absolute, more):
    """A consumer fetching MODEL (and the models in MORE) from the node, and asking for names
    that are paths."""
    send(sock, "hello", hello(passcode))
    seen = []
    recv_until(sock, {"helloAck"}, seen)
    out = {"answers": {}, "transfers": {}}
    for asked in [model, "../secret", "../secret.gguf", absolute, "models/../../secret",
                  "./" + model]:
        send(sock, "modelQuery", {"modelID": asked})
        _, r = recv_until(sock, {"modelQueryResponse"}, seen)
        assert r["modelID"] == asked, r
        out["answers"][asked] = {"available": r["available"], "size": r.get("totalSizeBytes")}
    for asked in more:
        send(sock, "modelQuery", {"modelID": asked})
        _, r = recv_until(sock, {"modelQueryResponse"}, seen)
        out["answers"][asked] = {"available": r["available"], "size": r.get("totalSizeBytes")}
    for asked in ["../secret", absolute, model, *more]:
        names, chunks, sha, total, each = transfer(sock, asked, seen)
        out["transfers"][asked] = {"files": names, "chunks": chunks, "sha256": sha,
                                   "bytes": total, "each": each}
    print(json.dumps(out), flush=True)


def listen(host, passcode, model):
    """The listening side, as the document has it: the connecting side sends hello; a hash
    that differs from ours (one side without one included) closes the TCP connection; else a
    plain helloAck with our hash and models. Then the connection is served: heartbeats get a
    heartbeatAck (this peer sends no heartbeat of its own), and one inferenceRequest for MODEL
    is answered. Each hello is reported (whether it offered Hearth's transport and carried a
    hash) as it comes."""
    ours = hashlib.sha256(passcode.encode()).hexdigest() if passcode else None
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen(4)
    server.settimeout(TIMEOUT)
    print(json.dumps({"listening": server.getsockname()[1]}), flush=True)
    hellos = []
    while True:
        sock, _ = server.accept()
        sock.settimeout(TIMEOUT)
        m = recv(sock)
        if m is None or m[0] != "hello":
            sock.close()
            continue
        h = m[1]
        hellos.append({"hearth": "hearth" in h, "hash": "clusterPasscodeHash" in h})
        print(json.dumps({"hello": hellos[-1]}), flush=True)
        if h.get("clusterPasscodeHash") != ours:
            sock.close()
            continue
        ack = hello(passcode)
        ack["loadedModels"] = [model]
        ack["deviceInfo"]["loadedModels"] = [model]
        send(sock, "helloAck", ack)
        break
    seen = []
    out = answer_one(sock, model, seen)
    out["hellos"] = hellos
    print(json.dumps(out), flush=True)
    # Heartbeats answered until told to stop (a line, or stdin closed).
    while True:
        ready, _, _ = select.select([sock, sys.stdin], [], [], TIMEOUT)
        if sys.stdin in ready or not ready:
            return
        m = recv(sock)
        if m is None:
            return
        if m[0] == "heartbeat":
            send(sock, "heartbeatAck", {"deviceID": str(uuid.uuid4()), "timestamp": 798134401.0,
                                        "thermalLevel": "nominal", "throttleLevel": 100,
                                        "loadedModels": [model], "isGenerating": False,
                                        "queueDepth": 0})


def raw(sock, hexbytes):
    sock.sendall(bytes.fromhex(hexbytes))
    try:
        m = recv(sock)
    except ConnectionResetError:
        m = None
    print(json.dumps({"after_raw": m[0] if m else "closed"}), flush=True)


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "listen":
        listen(host, sys.argv[4], sys.argv[5])
        return
    sock = socket.create_connection((host, port), timeout=TIMEOUT)
    if mode == "serve":
        serve(sock, sys.argv[4], sys.argv[5])
    elif mode == "refused":
        refused(sock, sys.argv[4])
    elif mode == "linger":
        linger(sock, sys.argv[4])
    elif mode == "provide":
        provide(sock, sys.argv[4], sys.argv[5], *sys.argv[6:8])
    elif mode == "fetch":
        fetch(sock, sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7:])
    elif mode == "raw":
        raw(sock, sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
