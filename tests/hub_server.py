#!/usr/bin/env python3
"""A Hugging Face-style hub on loopback for download tests, written from the hub's documented
HTTP surface (not from Hearth's code):

- GET /api/models/{owner}/{repo}/tree/main[/{folder}]: the folder's file listing, each file
  with `type`, `path`, `size`, `oid`, and for LFS files `lfs: {oid (SHA-256), size, pointerSize}`;
  With `?recursive=true` at the top: every file of the repository, and its folders as
  `{"type": "directory", "path"}` entries;
- GET/HEAD /{owner}/{repo}/resolve/main/{path}: the file's bytes, with `Range: bytes=A-[B]`
  answered 206 and `Content-Range`, as the hub's CDN does;
- GET /api/models?search=WORDS&filter=gguf&sort=downloads&direction=-1&limit=N[&expand=...]:
  the model search, as the hub's API documents it: the repositories whose id holds WORDS
  (case-insensitive) and that carry the `filter` tag, most downloaded first, each with `_id`,
  `id`, `modelId`, `downloads`, `likes`, `tags`, `private`, `library_name`, `createdAt`, and
  `lastModified` when `expand` asks for it. The served repository counts `--downloads`
  downloads; `--listed OWNER/REPO:DOWNLOADS:FILE:SIZE[:FILE:SIZE...]` (repeatable) adds a
  repository the search finds whose listing holds those files (their bytes are never served).

Faults for tests, set with POST /_control (JSON, every key optional):
- `drops` and `drop_after`: the next `drops` responses send `drop_after` bytes of body and then
  cut the connection; `drops_each`: as `drops`, counted for each file on its own;
- `corrupt_at`: the byte at that file offset is sent flipped (null: none);
- `rate`: bytes per second for file bodies (null: as fast as possible);
- `no_ranges`: ignore Range and send the whole file with 200;
- `missing`: the file is not there (404);
- `announce_size`: the listing gives the file this size (null: its own);
- `no_tree`: there are no listings (404), as on a mirror that serves only `resolve/`; file
  answers carry `X-Linked-Etag` (the SHA-256, quoted) and `X-Linked-Size` as the hub's do.
GET /_log lists the requests seen: files `{"path", "range"}`, searches `{"search", "limit"}`.

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
from urllib.parse import parse_qs, unquote

CHUNK = 64 * 1024


class Hub:
    def __init__(self, repo, files, downloads=1000, listed=()):
        self.repo = repo
        self.downloads = downloads
        # Other repositories the search finds: (id, downloads, [(file, size)...]).
        self.listed = list(listed)
        # Each file's path in the repository: its bytes and their SHA-256.
        self.files = {path: (data, hashlib.sha256(data).hexdigest()) for path, data in files}
        first = next(iter(self.files))
        self.folder = first.rsplit("/", 1)[0] if "/" in first else ""
        self.lock = threading.Lock()
        self.faults = {"drops": 0, "drops_each": 0, "drop_after": None, "corrupt_at": None,
                       "rate": None,
                       "no_ranges": False, "missing": False, "announce_size": None,
                       "no_tree": False}
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
            query = parse_qs(self.path.split("?", 1)[1]) if "?" in self.path else {}
            if path == "/_log":
                with hub.lock:
                    return self.reply_json(200, list(hub.log))
            if path == "/api/models":
                return self.search(query)
            for other, _, entries in hub.listed:
                if path == f"/api/models/{other}/tree/main":
                    return self.reply_json(200, [{"type": "file", "oid": "0" * 40, "size": size, "path": name,
                                                  "lfs": {"oid": "1" * 64, "size": size, "pointerSize": 134}}
                                                 for name, size in entries])
            tree = f"/api/models/{hub.repo}/tree/main"
            with hub.lock:
                no_tree = hub.faults["no_tree"]
            if no_tree and path.startswith(tree):
                return self.reply_json(404, {"error": "Entry not found"})
            if path == tree and query.get("recursive") == ["true"]:
                return self.listing(hub.folder, recursive=True)
            if path == tree or path.startswith(tree + "/"):
                return self.listing(path[len(tree):].strip("/"))
            resolve = f"/{hub.repo}/resolve/main/"
            if path.startswith(resolve):
                return self.file(path[len(resolve):])
            self.reply_json(404, {"error": "Repository not found"})

        def search(self, query):
            words = (query.get("search") or [""])[0].lower()
            tag = (query.get("filter") or [None])[0]
            limit = int((query.get("limit") or ["20"])[0])
            expand = query.get("expand") or []
            sort = (query.get("sort") or [None])[0]
            direction = (query.get("direction") or [None])[0]
            with hub.lock:
                hub.log.append({"search": words, "limit": limit, "filter": tag, "sort": sort,
                                "direction": direction, "expand": expand})
            # Its own order: the listed repositories, then the served one.
            repos = [(r, d) for r, d, _ in hub.listed] + [(hub.repo, hub.downloads)]
            found = [(r, d) for r, d in repos if words in r.lower() and tag in (None, "gguf")]
            # Most downloaded first only when that sort is asked for.
            if sort == "downloads":
                found.sort(key=lambda rd: rd[1], reverse=direction == "-1")
            out = []
            for i, (r, d) in enumerate(found[:limit]):
                item = {"_id": f"{i:024x}", "id": r, "modelId": r, "downloads": d, "likes": d // 100,
                        "tags": ["gguf"], "private": False, "library_name": "gguf",
                        "createdAt": "2024-11-01T00:00:00.000Z"}
                if "lastModified" in expand:
                    item["lastModified"] = "2024-11-02T00:00:00.000Z"
                out.append(item)
            self.reply_json(200, out)

        def listing(self, folder, recursive=False):
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
            if recursive and here:
                entries.insert(0, {"type": "directory", "oid": "0" * 40, "size": 0, "path": here})
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
            self.send_header("X-Linked-Etag", f'"{sha256}"')
            self.send_header("X-Linked-Size", str(size))
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
    ap.add_argument("--downloads", type=int, default=1000)
    ap.add_argument("--listed", action="append", default=[],
                    help="OWNER/REPO:DOWNLOADS:FILE:SIZE[:FILE:SIZE...], another repository the search finds")
    args = ap.parse_args()
    paths = args.path or [f.rsplit("/", 1)[-1] for f in args.file]
    assert len(paths) == len(args.file), "one --path per --file"
    files = []
    for name, path in zip(args.file, paths):
        with open(name, "rb") as f:
            files.append((path, f.read()))
    listed = []
    for spec in args.listed:
        repo, downloads, *rest = spec.split(":")
        entries = [(rest[i], int(rest[i + 1])) for i in range(0, len(rest), 2)]
        listed.append((repo, int(downloads), entries))
    hub = Hub(args.repo, files, args.downloads, listed)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(hub))
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    # Ends with the test: stdin closes when the test drops the child.
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
