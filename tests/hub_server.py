#!/usr/bin/env python3
"""A Hugging Face-style hub on loopback for download tests, written from the hub's documented
HTTP surface (not from Hearth's code):

- GET /api/models/{owner}/{repo}/tree/main[/{folder}]: the folder's file listing, each file
  with `type`, `path`, `size`, `oid`, and for LFS files `lfs: {oid (SHA-256), size, pointerSize}`;
- GET/HEAD /{owner}/{repo}/resolve/main/{path}: the file's bytes, with `Range: bytes=A-[B]`
  answered 206 and `Content-Range`, as the hub's CDN does.

Faults for tests, set with POST /_control (JSON, every key optional):
- `drops` and `drop_after`: the next `drops` responses send `drop_after` bytes of body and then
  cut the connection; `drops_each`: as `drops`, counted for each file on its own;
- `corrupt_at`: the byte at that file offset is sent flipped (null: none);
- `rate`: bytes per second for file bodies (null: as fast as possible);
- `no_ranges`: ignore Range and send the whole file with 200;
- `missing`: the file is not there (404);
- `announce_size`: the listing gives the file this size (null: its own).
GET /_log lists the file requests seen: `{"path", "range"}`.

Run: hub_server.py --repo OWNER/REPO --file PATH [--path IN/REPO/NAME.gguf], with --file (and
--path) once per file the repository holds (all in one folder); prints "port N" once it
listens on 127.0.0.1. Faults apply to every file.
"""

import argparse
import hashlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

CHUNK = 64 * 1024


class Hub:
    def __init__(self, repo, files):
        self.repo = repo
        # Each file's path in the repository: its bytes and their SHA-256.
        self.files = {path: (data, hashlib.sha256(data).hexdigest()) for path, data in files}
        first = next(iter(self.files))
        self.folder = first.rsplit("/", 1)[0] if "/" in first else ""
        self.lock = threading.Lock()
        self.faults = {"drops": 0, "drops_each": 0, "drop_after": None, "corrupt_at": None,
                       "rate": None,
                       "no_ranges": False, "missing": False, "announce_size": None}
        self.log = []
        # Responses cut so far, by file (for `drops_each`).
        self.cut = {}


def make_handler(hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply_json(self, status, value):
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.close_connection = True

        def do_POST(self):
            if self.path != "/_control":
                return self.reply_json(404, {"error": "not found"})
            n = int(self.headers.get("Content-Length", "0"))
            change = json.loads(self.rfile.read(n) or b"{}")
            with hub.lock:
                hub.faults.update(change)
                faults = dict(hub.faults)
            self.reply_json(200, faults)

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            path = unquote(self.path.split("?", 1)[0])
            if path == "/_log":
                with hub.lock:
                    return self.reply_json(200, list(hub.log))
            tree = f"/api/models/{hub.repo}/tree/main"
            if path == tree or path.startswith(tree + "/"):
                return self.listing(path[len(tree):].strip("/"))
            resolve = f"/{hub.repo}/resolve/main/"
            if path.startswith(resolve):
                return self.file(path[len(resolve):])
            self.reply_json(404, {"error": "Repository not found"})

        def listing(self, folder):
            here = hub.folder
            if folder != here:
                return self.reply_json(404, {"error": "Entry not found"})
            readme = b"# test repository\n"
            git_oid = hashlib.sha1(b"blob %d\0" % len(readme) + readme).hexdigest()
            entries = [
                {"type": "file", "oid": git_oid, "size": len(readme),
                 "path": (here + "/" if here else "") + "README.md"},
            ]
            with hub.lock:
                missing = hub.faults["missing"]
                announced = hub.faults["announce_size"]
            for path, (data, sha256) in hub.files.items():
                size = announced or len(data)
                if not missing:
                    entries.append({
                        "type": "file", "oid": "0" * 40, "size": size, "path": path,
                        "lfs": {"oid": sha256, "size": size, "pointerSize": 134},
                    })
            self.reply_json(200, entries)

        def file(self, wanted):
            with hub.lock:
                faults = dict(hub.faults)
                hub.log.append({"path": wanted, "range": self.headers.get("Range")})
                drop = faults["drops"] > 0 and faults["drop_after"] is not None
                if drop:
                    hub.faults["drops"] -= 1
                elif faults["drop_after"] is not None and hub.cut.get(wanted, 0) < faults["drops_each"]:
                    hub.cut[wanted] = hub.cut.get(wanted, 0) + 1
                    drop = True
            if wanted not in hub.files or faults["missing"]:
                return self.reply_json(404, {"error": "Entry not found"})
            data, sha256 = hub.files[wanted]
            size = len(data)
            start, end = 0, size - 1
            status = 200
            rng = self.headers.get("Range")
            if rng and not faults["no_ranges"]:
                spec = rng.strip().removeprefix("bytes=")
                a, _, b = spec.partition("-")
                start = int(a)
                end = int(b) if b else size - 1
                if start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    return
                end = min(end, size - 1)
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("ETag", f'"{sha256}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command == "HEAD":
                return
            sent = 0
            pos = start
            began = time.monotonic()
            while pos <= end:
                n = min(CHUNK, end + 1 - pos)
                if drop and sent + n > faults["drop_after"]:
                    n = faults["drop_after"] - sent
                piece = bytearray(data[pos:pos + n])
                at = faults["corrupt_at"]
                if at is not None and pos <= at < pos + n:
                    piece[at - pos] ^= 0xFF
                try:
                    self.wfile.write(piece)
                except OSError:
                    return
                sent += n
                pos += n
                if drop and sent >= faults["drop_after"]:
                    # Cut mid-body: the client sees fewer bytes than Content-Length said.
                    self.wfile.flush()
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if faults["rate"]:
                    ahead = sent / faults["rate"] - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--file", required=True, action="append")
    ap.add_argument("--path", action="append",
                    help="the file's path in the repository [its name]")
    args = ap.parse_args()
    paths = args.path or [f.rsplit("/", 1)[-1] for f in args.file]
    assert len(paths) == len(args.file), "one --path per --file"
    files = []
    for name, path in zip(args.file, paths):
        with open(name, "rb") as f:
            files.append((path, f.read()))
    hub = Hub(args.repo, files)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(hub))
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    # Ends with the test: stdin closes when the test drops the child.
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
