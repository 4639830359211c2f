#!/usr/bin/env node
// An example client of Hearth's signed-challenge WebSocket on `/` (protocols/auth-ws.md),
// using only Node's built-in modules: Node 20 has no global WebSocket, so a minimal RFC 6455
// client is included below (about 100 lines; the `ws` package works the same way).
//
// It makes (or loads) an Ed25519 key, registers its public key with POST /api/auth/register,
// signs the node's challenge, asks one question and prints the answer as it streams.
//
//   node examples/auth-client.mjs [--server http://127.0.0.1:8420] [--key FILE]
//        [--model NAME] [--max-tokens N] [--name NAME] [PROMPT...]
//
// --key FILE keeps the private key there (PKCS#8 PEM, mode 0600) and reuses it on later runs;
// without it a fresh key is made for this run. HEARTH_API_KEY is sent as a bearer token when
// set (registering from another machine with a node shared on the LAN needs one).
// Exit status 0 once an answer has streamed to its end.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

function fail(message) {
  console.error(`error: ${message}`);
  process.exit(1);
}

function usage() {
  console.log('usage: node examples/auth-client.mjs [--server URL] [--key FILE] [--model NAME] [--max-tokens N] [--name NAME] [PROMPT...]');
}

function parseArgs(argv) {
  const opts = {
    server: process.env.HEARTH_SERVER || 'http://127.0.0.1:8420',
    key: null,
    model: null,
    maxTokens: 64,
    name: 'node-example',
    prompt: [],
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--server') opts.server = value();
    else if (arg === '--key') opts.key = value();
    else if (arg === '--model') opts.model = value();
    else if (arg === '--max-tokens') opts.maxTokens = Number(value());
    else if (arg === '--name') opts.name = value();
    else if (arg === '--help' || arg === '-h') {
      usage();
      process.exit(0);
    } else opts.prompt.push(arg);
  }
  if (!Number.isInteger(opts.maxTokens) || opts.maxTokens < 1) fail('--max-tokens must be a positive integer');
  return opts;
}

function loadOrMakeKey(file) {
  if (file && fs.existsSync(file)) return crypto.createPrivateKey(fs.readFileSync(file, 'utf8'));
  const { privateKey } = crypto.generateKeyPairSync('ed25519');
  if (file) fs.writeFileSync(file, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return privateKey;
}

function postJson(url, body) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const headers = { 'content-type': 'application/json', 'content-length': data.length };
    if (process.env.HEARTH_API_KEY) headers.authorization = `Bearer ${process.env.HEARTH_API_KEY}`;
    const req = http.request(url, { method: 'POST', headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        let json = null;
        try {
          json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          // not JSON: reported by the caller
        }
        resolve({ status: res.statusCode, body: json });
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

/** A minimal WebSocket client (RFC 6455): text messages, ping/pong, close. No extensions. */
class MiniWebSocket {
  static connect(url) {
    return new Promise((resolve, reject) => {
      const u = new URL(url);
      const key = crypto.randomBytes(16).toString('base64');
      const req = http.request({
        host: u.hostname,
        port: u.port || 80,
        path: u.pathname + u.search,
        headers: {
          Connection: 'Upgrade',
          Upgrade: 'websocket',
          'Sec-WebSocket-Key': key,
          'Sec-WebSocket-Version': '13',
        },
      });
      req.on('upgrade', (res, socket, head) => {
        const expected = crypto.createHash('sha1').update(key + WS_GUID).digest('base64');
        if (res.headers['sec-websocket-accept'] !== expected) {
          socket.destroy();
          reject(new Error('the server answered the upgrade with a wrong Sec-WebSocket-Accept'));
          return;
        }
        resolve(new MiniWebSocket(socket, head));
      });
      req.on('response', (res) => {
        res.resume();
        reject(new Error(`the server did not upgrade to a WebSocket (HTTP ${res.statusCode})`));
      });
      req.on('error', reject);
      req.end();
    });
  }

  constructor(socket, head) {
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.fragments = [];
    this.fragmentOpcode = 0;
    this.closing = false;
    this.closed = false;
    this.handlers = { message: [], close: [] };
    // Messages that arrive before anyone listens (the challenge often comes with the upgrade).
    this.pending = [];
    socket.setNoDelay(true);
    socket.on('data', (d) => this.onData(d));
    socket.on('close', () => this.finish(1006, 'connection lost'));
    socket.on('error', () => this.finish(1006, 'connection error'));
    if (head && head.length) this.onData(head);
  }

  on(event, fn) {
    this.handlers[event].push(fn);
    if (event === 'message') {
      const pending = this.pending;
      this.pending = [];
      for (const text of pending) fn(text);
    }
  }

  emitMessage(text) {
    if (this.handlers.message.length === 0) this.pending.push(text);
    else for (const fn of this.handlers.message) fn(text);
  }

  finish(code, reason) {
    if (this.closed) return;
    this.closed = true;
    for (const fn of this.handlers.close) fn(code, reason);
  }

  onData(data) {
    this.buffer = Buffer.concat([this.buffer, data]);
    for (;;) {
      if (this.buffer.length < 2) return;
      const b0 = this.buffer[0];
      const b1 = this.buffer[1];
      let length = b1 & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (this.buffer.length < 4) return;
        length = this.buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (this.buffer.length < 10) return;
        const big = this.buffer.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE_BYTES)) {
          this.socket.destroy();
          return;
        }
        length = Number(big);
        offset = 10;
      }
      let mask = null;
      if (b1 & 0x80) {
        if (this.buffer.length < offset + 4) return;
        mask = this.buffer.subarray(offset, offset + 4);
        offset += 4;
      }
      if (this.buffer.length < offset + length) return;
      const payload = Buffer.from(this.buffer.subarray(offset, offset + length));
      if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      this.buffer = this.buffer.subarray(offset + length);
      this.onFrame((b0 & 0x80) !== 0, b0 & 0x0f, payload);
    }
  }

  onFrame(fin, opcode, payload) {
    if (opcode === 0x8) {
      const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
      const reason = payload.subarray(2).toString('utf8');
      if (!this.closing) {
        this.closing = true;
        this.sendFrame(0x8, payload.subarray(0, 2));
      }
      this.socket.end();
      this.finish(code, reason);
      return;
    }
    if (opcode === 0x9) {
      this.sendFrame(0xa, payload);
      return;
    }
    if (opcode === 0xa) return;
    if (opcode === 0x1 || opcode === 0x2) this.fragmentOpcode = opcode;
    this.fragments.push(payload);
    if (!fin) return;
    const whole = Buffer.concat(this.fragments);
    this.fragments = [];
    if (this.fragmentOpcode === 0x1) this.emitMessage(whole.toString('utf8'));
  }

  sendFrame(opcode, payload) {
    if (this.socket.destroyed) return;
    let header;
    if (payload.length < 126) {
      header = Buffer.alloc(2);
      header[1] = 0x80 | payload.length;
    } else if (payload.length < 65536) {
      header = Buffer.alloc(4);
      header[1] = 0x80 | 126;
      header.writeUInt16BE(payload.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    header[0] = 0x80 | opcode;
    const mask = crypto.randomBytes(4);
    const body = Buffer.alloc(payload.length);
    for (let i = 0; i < payload.length; i++) body[i] = payload[i] ^ mask[i & 3];
    this.socket.write(Buffer.concat([header, mask, body]));
  }

  send(text) {
    this.sendFrame(0x1, Buffer.from(text, 'utf8'));
  }

  close() {
    if (!this.closing) {
      this.closing = true;
      const code = Buffer.alloc(2);
      code.writeUInt16BE(1000);
      this.sendFrame(0x8, code);
    }
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const base = opts.server.replace(/\/+$/, '').replace(/^ws:/, 'http:');
  if (!base.startsWith('http://')) fail('--server must be http://HOST:PORT');
  const wsUrl = `${base.replace(/^http:/, 'ws:')}/`;
  const prompt = opts.prompt.length ? opts.prompt.join(' ') : 'Write one sentence about a warm hearth.';

  const privateKey = loadOrMakeKey(opts.key);
  const publicKey = crypto.createPublicKey(privateKey);
  const publicPem = publicKey.export({ type: 'spki', format: 'pem' });
  // The node derives the clientId the same way: SHA-256 of the key's SPKI DER, 20 hex digits.
  const ownId = crypto
    .createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 20);

  const reg = await postJson(`${base}/api/auth/register`, {
    name: opts.name,
    publicKey: publicPem,
    signatureAlgorithm: 'Ed25519',
  });
  if (reg.status !== 200 || !reg.body?.success) {
    fail(`registration failed (HTTP ${reg.status}): ${reg.body?.error ?? 'no details'}`);
  }
  const clientId = reg.body.clientId;
  if (clientId !== ownId) fail(`the node answered clientId ${clientId}, expected ${ownId}`);
  console.error(`registered as ${clientId}`);

  const ws = await MiniWebSocket.connect(wsUrl);
  const requestId = `example-${Date.now()}`;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no complete answer within 120 s')), 120_000);
    const done = (err) => {
      clearTimeout(timer);
      if (err) reject(err);
      else resolve();
    };
    ws.on('close', (code, reason) => done(new Error(`the connection closed before the answer ended (${code} ${reason})`)));
    ws.on('message', (text) => {
      let m;
      try {
        m = JSON.parse(text);
      } catch {
        done(new Error(`the node sent a message that is not JSON: ${text.slice(0, 80)}`));
        return;
      }
      switch (m.type) {
        case 'challenge': {
          // Sign the challenge string's UTF-8 bytes; Ed25519 takes no separate hash (null).
          const signature = crypto.sign(null, Buffer.from(m.challenge, 'utf8'), privateKey).toString('base64');
          ws.send(JSON.stringify({ type: 'authenticate', clientId, signature }));
          break;
        }
        case 'auth_result':
          if (!m.success) {
            done(new Error(`authentication failed: ${m.error}`));
            break;
          }
          ws.send(
            JSON.stringify({
              type: 'generate',
              id: requestId,
              ...(opts.model ? { model: opts.model } : {}),
              prompt,
              options: { temperature: 0.7, max_tokens: opts.maxTokens },
            }),
          );
          break;
        case 'stream_token':
          if (m.id === requestId) process.stdout.write(m.token);
          break;
        case 'stream_end':
          if (m.id === requestId) {
            process.stdout.write('\n');
            console.error(`[${m.totalTokens} tokens in ${m.elapsedTime} ms, ${m.finishReason}]`);
            done();
          }
          break;
        case 'error':
          done(new Error(`${m.error} (${m.code})`));
          break;
        default:
          break;
      }
    });
  });
  ws.close();
}

main().catch((e) => fail(e.message));
