// Node clients for gust's interop tests of issue 36 (pooled_test.go).
//
// usage: node pooled.js URL CAFILE CASE...    (NODE_PATH must reach ws and undici, e.g. .node/node_modules)
//
// URL is a ws:// or wss:// URL of a gust Server that answers each message with
// "LENGTH SHA256HEX compressed=BOOL" and serves GET /healthz beside it; CAFILE verifies its certificate
// over wss://. Prints one JSON line per case: {"case", "ok", "detail", "extensions"}.
//
// Cases:
//   big-ws          Node ws sends 16 MiB of random bytes, compressed
//   pooled-undici   undici's fetch of /healthz, then undici's WebSocket on the connection the fetch left
//                   idle, as Node's global fetch and WebSocket (undici's, from Node 22) do when the
//                   WebSocket comes once the fetch's connection is back in the pool
'use strict';

const crypto = require('crypto');
const dc = require('diagnostics_channel');
const fs = require('fs');

const TIMEOUT = 120000;
const SIZE = 16 << 20; // gust's default MaxMessageSize

class Failed extends Error {}

function expect(cond, what) {
  if (!cond) throw new Failed(what);
}

function want(payload, compressed) {
  return `${payload.length} ${crypto.createHash('sha256').update(payload).digest('hex')} compressed=${compressed}`;
}

function withTimeout(p, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Failed(`timed out: ${what}`)), TIMEOUT); }),
  ]).finally(() => clearTimeout(timer));
}

async function bigWs(url, ca) {
  const WebSocket = require('ws');
  const ws = new WebSocket(url, { perMessageDeflate: true, maxPayload: 0, ca });
  try {
    await withTimeout(new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    }), 'open');
    const ext = ws.extensions;
    expect(ext.includes('permessage-deflate'), `permessage-deflate not negotiated: ${JSON.stringify(ext)}`);
    const payload = crypto.randomBytes(SIZE);
    const reply = withTimeout(new Promise((resolve, reject) => {
      ws.once('message', (data) => resolve(data.toString()));
      ws.once('close', (code, reason) => reject(new Failed(`closed ${code} ${reason}`)));
      ws.once('error', reject);
    }), 'reply');
    ws.send(payload, { binary: true, compress: true });
    const got = await reply;
    expect(got === want(payload, true), `gust answered ${JSON.stringify(got)}`);
    return [`16 MiB of random bytes passed, compressed (gust: ${got.slice(0, 24)}...)`, ext];
  } finally {
    ws.terminate();
  }
}

async function pooledUndici(url, ca) {
  const { fetch, WebSocket, Client } = require('undici');
  // One Client is one connection, as a pool with a keep-alive connection
  // idle is: the WebSocket goes on the connection the fetch used.
  const origin = url.replace(/^ws/, 'http').replace(/(\/\/[^/]*).*$/, '$1');
  const client = new Client(origin, ca ? { connect: { ca } } : {});
  let connections = 0;
  const count = () => { connections++; };
  dc.channel('undici:client:connected').subscribe(count);
  const httpURL = url.replace(/^ws/, 'http').replace(/\/[^/]*$/, '/healthz');
  const resp = await withTimeout(fetch(httpURL, { dispatcher: client }), 'fetch');
  const body = await resp.text();
  expect(resp.status === 200 && body === 'ok', `GET /healthz: ${resp.status} ${JSON.stringify(body)}`);
  const ws = new WebSocket(url, { dispatcher: client });
  try {
    await withTimeout(new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = (e) => reject(new Failed(`WebSocket error: ${e.message || e.error || e.type}`));
      ws.onclose = (e) => reject(new Failed(`closed ${e.code} ${e.reason}`));
    }), 'open');
    expect(connections === 1, `connections opened for the fetch and the WebSocket: ${connections}, want 1 (reused)`);
    const payload = Buffer.from('after a fetch');
    const reply = withTimeout(new Promise((resolve, reject) => {
      ws.onmessage = (e) => resolve(String(e.data));
      ws.onclose = (e) => reject(new Failed(`closed ${e.code} ${e.reason}`));
    }), 'reply');
    ws.send('after a fetch');
    const got = await reply;
    const compressed = ws.extensions.includes('permessage-deflate');
    expect(got === want(payload, compressed), `gust answered ${JSON.stringify(got)}`);
    return [`fetch /healthz then WebSocket on the same connection: echoed`, ws.extensions];
  } finally {
    dc.channel('undici:client:connected').unsubscribe(count);
    ws.close();
    client.destroy();
  }
}

const CASES = { 'big-ws': bigWs, 'pooled-undici': pooledUndici };

(async () => {
  const [url, cafile, ...names] = process.argv.slice(2);
  const ca = url.startsWith('wss:') ? fs.readFileSync(cafile) : undefined;
  for (const name of names) {
    const res = { case: name, ok: false, detail: '', extensions: '' };
    try {
      [res.detail, res.extensions] = await CASES[name](url, ca);
      res.ok = true;
    } catch (e) {
      res.detail = `${e.name}: ${e.message}`;
    }
    console.log(JSON.stringify(res));
  }
  process.exit(0);
})();
