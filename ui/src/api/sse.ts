/**
 * Server-sent events, as the chat route sends them: one `data: {json}` line per event.
 *
 * `SseDataDecoder` turns a byte stream cut at arbitrary points into complete `data:` payloads.
 * It keeps a streaming UTF-8 decoder (a character split across two chunks is decoded once both
 * halves arrived) and the unfinished tail of the last line. Lines end with `\n`, `\r\n` or
 * `\r`; comment lines (`:`) and other fields (`event:`, `id:`, `retry:`) are ignored. Each
 * `data:` line is delivered on its own, without waiting for the blank line that ends an SSE
 * event: docs/API.md makes every event a single line, and this way a token is shown as soon as
 * its line is complete.
 */

export class SseDataDecoder {
  private readonly utf8 = new TextDecoder('utf-8');
  private pending = '';

  /** Feeds one chunk; returns the payloads of the `data:` lines it completed. */
  push(chunk: Uint8Array): string[] {
    this.pending += this.utf8.decode(chunk, { stream: true });
    return this.drain(false);
  }

  /** Ends the stream: flushes the decoder and a last line without a line break. */
  finish(): string[] {
    this.pending += this.utf8.decode();
    return this.drain(true);
  }

  private drain(final: boolean): string[] {
    const out: string[] = [];
    const buf = this.pending;
    let lineStart = 0;
    for (let i = 0; i < buf.length; i++) {
      const c = buf.charCodeAt(i);
      if (c !== 0x0a && c !== 0x0d) continue;
      // A `\r` at the very end may be the first half of `\r\n`: wait for the next chunk.
      if (c === 0x0d && i === buf.length - 1 && !final) break;
      pushData(out, buf.slice(lineStart, i));
      if (c === 0x0d && buf.charCodeAt(i + 1) === 0x0a) i++;
      lineStart = i + 1;
    }
    this.pending = buf.slice(lineStart);
    if (final) {
      if (this.pending) pushData(out, this.pending);
      this.pending = '';
    }
    return out;
  }
}

function pushData(out: string[], line: string): void {
  if (!line.startsWith('data:')) return;
  out.push(line.charCodeAt(5) === 0x20 ? line.slice(6) : line.slice(5));
}

/** Reads a whole SSE body, calling `onData` for each `data:` payload as soon as it is complete. */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  onData: (data: string) => void,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new SseDataDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      for (const data of decoder.push(value)) onData(data);
    }
    for (const data of decoder.finish()) onData(data);
  } finally {
    reader.releaseLock();
  }
}
