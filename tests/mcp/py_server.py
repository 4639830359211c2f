"""A small MCP server on the Python `mcp` SDK (2.x, MCPServer) for hearth-tools' tests.

Each tool provokes one behaviour of a real server that the client must handle: a plain answer,
a crash in the middle of a call, a call that never ends, garbage on stdout, a result far over
the client's cap, an image, and a grandchild process (to see the whole process group stopped).

    py_server.py            serve over stdio
    py_server.py --http P   serve over streamable HTTP on 127.0.0.1:P (path /mcp)
"""

import os
import struct
import subprocess
import sys
import zlib

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image

mcp = MCPServer("hearth-test")

# The SDK (2.x) points fd 1 at stderr while it serves stdio, so that a stray print cannot break
# the protocol; a copy of the real stdout taken first lets `garbage` break it anyway, as a
# server on an SDK without that guard (or a native library writing to its stdout) does.
WIRE = os.dup(1)


def log(line: str) -> None:
    # stderr: the client keeps these lines in the server's log.
    print(line, file=sys.stderr, flush=True)


@mcp.tool()
def echo(message: str) -> str:
    """Echoes back the message."""
    return f"Echo: {message}"


@mcp.tool()
def crash() -> str:
    """Exits the whole process in the middle of the call."""
    log("crashing now")
    os._exit(3)


@mcp.tool()
async def hang(seconds: float = 3600) -> str:
    """Sleeps for the given seconds; says on stderr when it is cancelled."""
    log("hang started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        log("hang cancelled")
        raise
    return "woke up"


@mcp.tool()
def garbage() -> str:
    """Writes a line that is not JSON-RPC to the real stdout (what a stray print does), then answers."""
    os.write(WIRE, b"this line is not JSON-RPC\n")
    return "wrote garbage"


@mcp.tool()
def big(megabytes: int = 10) -> str:
    """Returns a text of the given size in MB (digits repeated)."""
    return "0123456789" * (megabytes * 100_000)


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x80\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


@mcp.tool()
def image() -> Image:
    """Returns a 1x1 PNG."""
    return Image(data=tiny_png(), format="png")


@mcp.tool()
def spawn_grandchild() -> str:
    """Starts a long `sleep` in this server's process group and returns its pid."""
    child = subprocess.Popen(
        ["sleep", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log(f"grandchild {child.pid}")
    return str(child.pid)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
