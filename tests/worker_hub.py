#!/usr/bin/env python3
"""A small hub for the worker protocol, written from ../shared/protocols/worker-node.md and the
worker-node section of NOTES.md (not from Hearth's code), that drives a real Hearth worker.

It starts `hearth-node serve --join ws://127.0.0.1:PORT/node --join-token T` and checks:
- the connection's path and query (token, model, max_concurrency = the node's slots, name);
- tasks with bare-string and {role, content} messages, unknown fields, ids up to 2^32 - 1;
- binary frames: 4-byte big-endian id + text, each frame valid UTF-8 on its own, a 4-byte
  frame ending the task;
- a task whose id does not fit in 32 bits is refused with a warning while other tasks go on;
  so are a task that is not pending, a message that is not JSON and a stop for an unknown task;
- the stop frame {"id":N,"stop":true} ends a running task's frames;
- an empty text frame (keepalive) within 12 s;
- after the hub drops the connection, the worker connects again and serves;
- SIGTERM mid-task: the running task's end frame arrives before the connection closes (the
  reference server never ends the tasks of a closed connection).

Environment: HEARTH_NODE_BIN (the hearth-node binary), HEARTH_TEST_MODEL (the .gguf file).
Needs the `websockets` package (>= 14; scripts/setup.sh installs it into .venv).
Exits 0 and prints "worker hub OK" on success, non-zero with the worker's log tail on failure.
"""

import asyncio
import collections
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

TOKEN = f"hub-secret-{os.getpid()}"
NAME = "pyworker"
SLOTS = 2
OVERALL_TIMEOUT = 300
TASK_TIMEOUT = 120


class Conn:
    """One worker connection: every binary frame sorted by task id, every text frame kept."""

    def __init__(self, ws):
        self.ws = ws
        parts = urlsplit(ws.request.path)
        self.path = parts.path
        self.query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.opened = time.monotonic()
        self.by_id = collections.defaultdict(asyncio.Queue)
        self.seen_ids = set()
        self.texts = []
        self.errors = []
        self.closed = asyncio.Event()
        self.closed_at = None

    async def pump(self):
        try:
            async for msg in self.ws:
                now = time.monotonic()
                if isinstance(msg, bytes):
                    if len(msg) < 4:
                        self.errors.append(f"binary frame shorter than 4 bytes: {msg!r}")
                        continue
                    (tid,) = struct.unpack(">I", msg[:4])
                    payload = msg[4:]
                    try:
                        payload.decode("utf-8")  # strict: each frame on its own
                    except UnicodeDecodeError as e:
                        self.errors.append(f"task {tid}: a frame is not valid UTF-8 on its own: {e}")
                    self.seen_ids.add(tid)
                    await self.by_id[tid].put((now, payload))
                else:
                    self.texts.append((now, msg))
        except ConnectionClosed:
            pass
        finally:
            self.closed_at = time.monotonic()
            self.closed.set()

    async def send(self, obj):
        await self.ws.send(obj if isinstance(obj, str) else json.dumps(obj))

    async def collect(self, tid, timeout=TASK_TIMEOUT):
        """The text of task `tid`, up to its end frame."""
        text = b""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"task {tid} did not end within {timeout} s (text so far: {text!r})"
            _, payload = await asyncio.wait_for(self.by_id[tid].get(), left)
            if payload == b"":
                return text.decode("utf-8")
            text += payload


class Hub:
    def __init__(self):
        self.connections = asyncio.Queue()

    async def handler(self, ws):
        conn = Conn(ws)
        await self.connections.put(conn)
        await conn.pump()


def task(tid, messages, **extra):
    t = {
        "state": 0,
        "id": tid,
        "system": "You are a helpful assistant. Answer briefly.",
        "messages": messages,
        "max_new_tokens": 16,
        "temperature": 0,
        "created_at": int(time.time()),
    }
    t.update(extra)
    return t


def log_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            # Strip ANSI colours in case the logger adds them.
            return re.sub(r"\x1b\[[0-9;]*m", "", f.read())
    except OSError:
        return ""


async def wait_for_log(path, pattern, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, log_text(path)):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the worker's log never matched {pattern!r}")


async def run(binary, model, workdir, log_path):
    hub = Hub()
    async with serve(hub.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        env = dict(os.environ, NO_COLOR="1", RUST_LOG="info")
        for k in list(env):
            if k.startswith("HEARTH_") and k not in ("HEARTH_NODE_BIN", "HEARTH_TEST_MODEL"):
                del env[k]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    binary, "serve",
                    "--port", "0",
                    "--model", model,
                    "--data-dir", os.path.join(workdir, "data"),
                    "--name", NAME,
                    "--parallel", str(SLOTS),
                    "--ctx", "1024",
                    "--join", f"ws://127.0.0.1:{port}/node",
                    "--join-token", TOKEN,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        try:
            await drive(hub, log_path, proc)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.to_thread(proc.wait), 20)
                except asyncio.TimeoutError:
                    proc.kill()
                    await asyncio.to_thread(proc.wait)


async def drive(hub, log_path, proc):
    conn = await asyncio.wait_for(hub.connections.get(), 120)

    # The connection: the document's query parameters.
    assert conn.path == "/node", conn.path
    q = conn.query
    assert q.get("token") == TOKEN, q
    assert q.get("model"), q
    assert "smollm2" in q["model"].lower(), q
    assert q.get("max_concurrency") == str(SLOTS), q
    assert q.get("name") == NAME, q

    # The document's example shape: bare strings (user, then assistant, then user).
    await conn.send(task(1, ["Say hello.", "Hello!", "Say it again."]))
    text = await conn.collect(1)
    assert text.strip(), "task 1 produced no text"

    # {role, content} objects, the extra fields the reference server sends, the largest id.
    big_ok = 2**32 - 1
    await conn.send(task(
        big_ok,
        [{"role": "user", "content": "Name a colour."}],
        resp="", modLastCheckedPos=0, user={"id": 42},
    ))
    text = await conn.collect(big_ok)
    assert text.strip(), "the task with id 2^32-1 produced no text"

    # Refused with a warning while another task goes on: an id beyond 32 bits, a task that is
    # not pending, a message that is not JSON, a stop for a task the worker does not have.
    too_big = 2**32
    await conn.send(task(too_big, ["This task must be refused."]))
    await conn.send(task(20, ["Not pending."], state=1))
    await conn.send("this is not json")
    await conn.send({"id": 12345, "stop": True})
    await conn.send(task(7, ["Say yes."]))
    text = await conn.collect(7)
    assert text.strip(), "task 7 produced no text"
    await asyncio.sleep(1.0)
    assert 0 not in conn.seen_ids, "the 2^32 task was answered as id 0 (wrapped)"
    assert 20 not in conn.seen_ids, "a task that is not pending was processed"
    await wait_for_log(log_path, r"WARN.*4294967296")
    await wait_for_log(log_path, r"WARN.*not pending")
    await wait_for_log(log_path, r"WARN.*not running")
    await wait_for_log(log_path, r"WARN.*(JSON|json)")

    # Stop: a long task; after its first frame the hub stops it; its frames stop.
    await conn.send(task(9, ["Write a long story about a lighthouse."], max_new_tokens=400, temperature=0.7))
    first_at, _ = await asyncio.wait_for(conn.by_id[9].get(), TASK_TIMEOUT)
    await conn.send({"id": 9, "stop": True})
    stop_at = time.monotonic()
    await asyncio.sleep(2.0)
    late = []
    while not conn.by_id[9].empty():
        at, payload = conn.by_id[9].get_nowait()
        if at > stop_at + 0.5:
            late.append(payload)
    assert not late, f"task 9 kept streaming after the stop frame: {late[:5]!r}"
    # Both slots serve again.
    await conn.send(task(10, ["Say one."], max_new_tokens=8))
    await conn.send(task(11, ["Say two."], max_new_tokens=8))
    t10, t11 = await asyncio.gather(conn.collect(10), conn.collect(11))
    assert t10.strip() and t11.strip(), (t10, t11)

    # Keepalive: an empty text frame at least every 10 s.
    wait = conn.opened + 12.5 - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)
    keepalives = [t for t, m in conn.texts if m == ""]
    assert keepalives, f"no empty keepalive frame in {time.monotonic() - conn.opened:.1f} s"
    others = [m for _, m in conn.texts if m != ""]
    assert not others, f"the worker sent text frames other than keepalives to a non-Hearth hub: {others[:3]!r}"
    assert not conn.errors, conn.errors

    # Reconnect: the hub drops the connection; the worker comes back (backoff of about 1 s).
    await conn.ws.close()
    conn2 = await asyncio.wait_for(hub.connections.get(), 30)
    assert conn2.query.get("name") == NAME, conn2.query
    await conn2.send(task(3, ["Say hi."]))
    text = await conn2.collect(3)
    assert text.strip(), "no text after reconnecting"
    assert not conn2.errors, conn2.errors

    # SIGTERM mid-task: the task's end frame, then the close.
    await conn2.send(task(4, ["Write a long story about a harbour."], max_new_tokens=400, temperature=0.7))
    await asyncio.wait_for(conn2.by_id[4].get(), TASK_TIMEOUT)
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(conn2.closed.wait(), 20)
    frames = []
    while not conn2.by_id[4].empty():
        frames.append(conn2.by_id[4].get_nowait())
    ends = [at for at, payload in frames if payload == b""]
    assert ends, f"no end frame for task 4 before the connection closed ({len(frames)} frames)"
    assert ends[0] <= conn2.closed_at, "the end frame came after the close"
    assert all(at <= ends[0] for at, _ in frames), "frames of task 4 after its end frame"
    await asyncio.wait_for(asyncio.to_thread(proc.wait), 20)
    assert proc.returncode == 0, f"the worker exited with {proc.returncode}"


def main():
    binary = os.environ.get("HEARTH_NODE_BIN")
    model = os.environ.get("HEARTH_TEST_MODEL")
    if not binary or not os.path.isfile(binary):
        print(f"HEARTH_NODE_BIN must point at the hearth-node binary (got {binary!r})", file=sys.stderr)
        return 2
    if not model or not os.path.isfile(model):
        print(f"HEARTH_TEST_MODEL must point at the .gguf model (got {model!r})", file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="hearth-worker-hub-")
    log_path = os.path.join(workdir, "worker.log")
    try:
        asyncio.run(asyncio.wait_for(run(binary, model, workdir, log_path), OVERALL_TIMEOUT))
    except (AssertionError, asyncio.TimeoutError, OSError, ConnectionClosed) as e:
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        tail = log_text(log_path).splitlines()[-40:]
        print("--- worker log (last 40 lines) ---", file=sys.stderr)
        print("\n".join(tail), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("worker hub OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
