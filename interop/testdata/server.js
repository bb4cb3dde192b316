// Node `ws` echo server for gust's interop tests (gust's client is the peer).
//
// usage: node server.js PORT [MAX_SECONDS]    (NODE_PATH must reach the ws package, e.g. .node/node_modules)
//
// Listens on 127.0.0.1:PORT (0 picks a free port) with permessage-deflate enabled (ws's server default is
// off), and prints JSON lines on stdout: first {"listening": PORT}, then one {"closed": LABEL, "code": C,
// "reason": R, "extensions": E} per connection when it ends. Exits after MAX_SECONDS (default 120).
//
// Per connection: "label:NAME" names it and is echoed; "send-fragmented" makes the server send one text
// message in three fragments ({fin: false} on all but the last); "info" is answered with
// {"extensions": E}; "close:CODE" makes the server close with CODE and the reason "server-bye";
// everything else is echoed with its type.
'use strict';

const { WebSocketServer } = require('ws');
const wsVersion = require('ws/package.json').version;

const FRAGMENTS = ['frag', 'mented ', 'message ✓'];

const port = Number(process.argv[2]);
const maxSeconds = Number(process.argv[3] || 120);
if (Number.isNaN(port)) {
  console.error('usage: node server.js PORT [MAX_SECONDS]');
  process.exit(2);
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

const wss = new WebSocketServer({ host: '127.0.0.1', port, perMessageDeflate: true, maxPayload: 64 << 20 });

wss.on('listening', () => {
  emit({ listening: wss.address().port, peer: 'node ws', version: wsVersion });
});

// 'headers' fires with the handshake response's header lines just before 'connection' for the same request.
wss.on('headers', (headers, req) => {
  const line = headers.find((h) => h.toLowerCase().startsWith('sec-websocket-extensions:'));
  req.gustExtensions = line ? line.slice(line.indexOf(':') + 1).trim() : '';
});

wss.on('connection', (ws, req) => {
  let label = '';
  const ext = req.gustExtensions || '';
  ws.on('message', (data, isBinary) => {
    if (!isBinary) {
      const msg = data.toString();
      if (msg.startsWith('label:') && !label) {
        label = msg.slice('label:'.length);
        ws.send(msg);
        return;
      }
      if (msg === 'send-fragmented') {
        FRAGMENTS.forEach((f, i) => ws.send(f, { fin: i === FRAGMENTS.length - 1 }));
        return;
      }
      if (msg === 'info') {
        ws.send(JSON.stringify({ extensions: ext }));
        return;
      }
      if (msg.startsWith('close:')) {
        ws.close(Number(msg.slice('close:'.length)), 'server-bye');
        return;
      }
    }
    ws.send(data, { binary: isBinary });
  });
  ws.on('close', (code, reason) => {
    emit({ closed: label, code, reason: reason.toString(), extensions: ext });
  });
  ws.on('error', (err) => {
    emit({ error: label, message: String(err) });
  });
});

setTimeout(() => process.exit(0), maxSeconds * 1000);
