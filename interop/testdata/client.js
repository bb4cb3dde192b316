// Node `ws` client for gust's interop tests.
//
// usage: node client.js URL [CASE ...]    (NODE_PATH must reach the ws package, e.g. .node/node_modules)
//
// Runs each case (default: all) on a new connection to URL, a gust echo server, and prints one JSON line
// per case on stdout: {"case", "ok", "detail", "extensions"}. The first message of each connection is
// "label:NAME", which the server echoes; "close:CODE" asks the server to close with CODE and the reason
// "server-bye". Everything else is echoed with its type. The payloads match payloads_test.go.
'use strict';

const WebSocket = require('ws');
const wsVersion = require('ws/package.json').version;

const TIMEOUT = 30000;

const TEXT = 'héllo, gust ✓';
const BINARY = Buffer.alloc(1024);
for (let i = 0; i < BINARY.length; i++) BINARY[i] = i % 256;
const FRAGMENTS = ['frag', 'mented ', 'message ✓'];
const LARGE = Buffer.alloc(1 << 20);
for (let i = 0; i < LARGE.length; i++) LARGE[i] = (i * 7 + 3) % 251;
const COMPRESSIBLE = 'gust compresses this line well. '.repeat(8192);

class Failed extends Error {}

function expect(cond, what) {
  if (!cond) throw new Failed(what);
}

function describe(data, isBinary) {
  if (!isBinary) {
    const s = data.toString();
    return `text(${s.length})` + (s.length <= 64 ? `: ${JSON.stringify(s)}` : '');
  }
  return `binary(${data.length})`;
}

// Conn wraps a ws client with a queue of received messages and a promise of its close.
class Conn {
  constructor(url) {
    this.queue = [];
    this.waiters = [];
    this.extensions = '';
    this.ws = new WebSocket(url, { perMessageDeflate: true, maxPayload: 64 << 20 });
    this.ws.on('upgrade', (res) => {
      this.extensions = res.headers['sec-websocket-extensions'] || '';
    });
    this.ws.on('message', (data, isBinary) => this.push({ data, isBinary }));
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code, reason) => {
        resolve({ code, reason: reason.toString() });
        this.push({ closed: true, code });
      });
    });
    this.errors = [];
    this.ws.on('error', (err) => this.errors.push(err));
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', resolve);
      this.ws.once('error', reject);
      this.ws.once('close', (code) => reject(new Failed(`closed with ${code} before opening`)));
    });
  }

  push(m) {
    const w = this.waiters.shift();
    if (w) w(m);
    else this.queue.push(m);
  }

  next() {
    const m = this.queue.shift();
    if (m) return Promise.resolve(m);
    return withTimeout(new Promise((resolve) => this.waiters.push(resolve)), 'a message');
  }

  send(data, opts) {
    return new Promise((resolve, reject) => {
      this.ws.send(data, opts || {}, (err) => (err ? reject(err) : resolve()));
    });
  }

  async echo(payload) {
    const parts = Array.isArray(payload) ? payload : [payload];
    for (let i = 0; i < parts.length; i++) {
      // ws sends a message in fragments with {fin: false} on all but the last.
      await this.send(parts[i], { fin: i === parts.length - 1 });
    }
    const want = Array.isArray(payload) ? payload.join('') : payload;
    const wantBinary = Buffer.isBuffer(want);
    const m = await this.next();
    expect(!m.closed, `connection closed (${m.code}) while waiting for the echo`);
    const got = describe(m.data, m.isBinary);
    const sent = describe(want, wantBinary);
    expect(m.isBinary === wantBinary, `echo type: sent ${sent}, got ${got}`);
    if (wantBinary) expect(Buffer.compare(m.data, want) === 0, `echo differs: sent ${sent}, got ${got}`);
    else expect(m.data.toString() === want, `echo differs: sent ${sent}, got ${got}`);
    return `echoed ${sent}`;
  }
}

function withTimeout(p, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Failed(`timed out waiting for ${what}`)), TIMEOUT);
    }),
  ]).finally(() => clearTimeout(timer));
}

function clientClose(code) {
  return async (c) => {
    await c.echo(TEXT);
    c.ws.close(code, 'client-bye');
    const { code: got, reason } = await withTimeout(c.closed, 'the close');
    expect(got === code, `server answered close ${code} with ${got}`);
    return `closed with ${code}, server answered ${got} ${JSON.stringify(reason)}`;
  };
}

const CASES = {
  text: (c) => c.echo(TEXT),
  binary: (c) => c.echo(BINARY),
  fragmented: async (c) => `3 fragments, ${await c.echo(FRAGMENTS)}`,
  large: (c) => c.echo(LARGE),
  compression: async (c) => {
    expect(c.extensions.includes('permessage-deflate'),
      `permessage-deflate not negotiated: Sec-WebSocket-Extensions ${JSON.stringify(c.extensions)}`);
    const detail = await c.echo(COMPRESSIBLE);
    await c.echo('stats'); // gust's side reads its TCP byte counts now
    return `negotiated ${JSON.stringify(c.extensions)}, ${detail}`;
  },
  'close-1000': clientClose(1000),
  'close-4001': clientClose(4001),
  'server-close-4002': async (c) => {
    await c.send('close:4002');
    const m = await c.next();
    expect(m.closed, 'a message came instead of the close');
    const { code, reason } = await withTimeout(c.closed, 'the close');
    expect(code === 4002, `server closed with ${code}, want 4002`);
    expect(reason === 'server-bye', `close reason ${JSON.stringify(reason)}, want "server-bye"`);
    return `server closed with ${code} ${JSON.stringify(reason)}`;
  },
};

const CLOSES_ITSELF = new Set(['close-1000', 'close-4001', 'server-close-4002']);

async function runCase(url, name) {
  const result = { case: name, ok: false, detail: '', extensions: '' };
  let c;
  try {
    c = new Conn(url);
    await withTimeout(c.opened, 'the handshake');
    result.extensions = c.extensions;
    await c.echo('label:' + name);
    result.detail = await CASES[name](c);
    if (!CLOSES_ITSELF.has(name)) {
      c.ws.close(1000, 'done');
      const { code } = await withTimeout(c.closed, 'the close');
      expect(code === 1000, `server answered close 1000 with ${code}`);
    }
    expect(c.errors.length === 0, `ws error: ${c.errors.join('; ')}`);
    result.ok = true;
  } catch (e) {
    result.detail = e instanceof Failed ? e.message : `${e.name}: ${e.message}`;
  } finally {
    if (c) c.ws.terminate();
  }
  console.log(JSON.stringify(result));
}

async function main() {
  const [url, ...names] = process.argv.slice(2);
  if (!url) {
    console.error('usage: node client.js URL [CASE ...]');
    process.exit(2);
  }
  console.log(JSON.stringify({ peer: 'node ws', version: wsVersion }));
  for (const name of names.length ? names : Object.keys(CASES)) {
    if (!CASES[name]) {
      console.log(JSON.stringify({ case: name, ok: false, detail: 'unknown case' }));
      continue;
    }
    await runCase(url, name);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
