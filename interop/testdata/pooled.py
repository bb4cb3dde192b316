#!/usr/bin/env python3
"""Python clients for gust's interop tests of issue 36 (pooled_test.go).

usage: pooled.py URL CAFILE CASE...

URL is a ws:// or wss:// URL of a gust Server that answers each message with
"LENGTH SHA256HEX compressed=BOOL" and serves GET /healthz beside it; CAFILE
verifies its certificate over wss://. Prints one JSON line per case:
{"case": NAME, "ok": BOOL, "detail": TEXT, "extensions": HEADER}.

Cases:
  big-websockets   websockets sends 16 MiB of random bytes, compressed
  big-aiohttp      aiohttp sends the same
  pooled-aiohttp   one aiohttp session: GET /healthz, then ws_connect, which
                   takes the connection the GET left in the pool
"""

import asyncio
import hashlib
import json
import os
import ssl
import sys

TIMEOUT = 120
SIZE = 16 << 20  # gust's default MaxMessageSize


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


def tls_context(url, cafile):
    if not url.startswith("wss://"):
        return None
    return ssl.create_default_context(cafile=cafile)


def check_reply(reply, payload):
    want = "%d %s compressed=true" % (len(payload), hashlib.sha256(payload).hexdigest())
    expect(reply == want, "gust answered %r, want %r" % (reply, want))
    return "16 MiB of random bytes passed, compressed (gust: %s...)" % reply[:24]


async def big_websockets(url, cafile):
    from websockets.asyncio.client import connect

    payload = os.urandom(SIZE)
    async with connect(url, ssl=tls_context(url, cafile), max_size=None, compression="deflate",
                       open_timeout=TIMEOUT, close_timeout=TIMEOUT, ping_interval=None) as ws:
        ext = ws.response.headers.get("Sec-WebSocket-Extensions", "")
        expect("permessage-deflate" in ext, "permessage-deflate not negotiated: %r" % ext)
        await asyncio.wait_for(ws.send(payload), TIMEOUT)
        reply = await asyncio.wait_for(ws.recv(), TIMEOUT)
        return check_reply(reply, payload), ext


async def big_aiohttp(url, cafile):
    import aiohttp

    payload = os.urandom(SIZE)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.ws_connect(url, ssl=tls_context(url, cafile) or False, compress=15,
                                      max_msg_size=0, autoping=True) as ws:
            ext = ws._response.headers.get("Sec-WebSocket-Extensions", "")
            expect("permessage-deflate" in ext, "permessage-deflate not negotiated: %r" % ext)
            await ws.send_bytes(payload)
            msg = await ws.receive(timeout=TIMEOUT)
            expect(msg.type == aiohttp.WSMsgType.TEXT, "gust answered %s %r" % (msg.type, msg.data))
            return check_reply(msg.data, payload), ext


async def pooled_aiohttp(url, cafile):
    import aiohttp

    http_url = url.replace("ws", "http", 1).rsplit("/", 1)[0] + "/healthz"
    conns = []

    async def on_conn_reuse(session, ctx, params):
        conns.append("reused")

    async def on_conn_create(session, ctx, params):
        conns.append("new")

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(on_conn_reuse)
    trace.on_connection_create_end.append(on_conn_create)
    ctx = tls_context(url, cafile) or False
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT), trace_configs=[trace]) as session:
        async with session.get(http_url, ssl=ctx) as resp:
            body = await resp.text()
            expect(resp.status == 200 and body == "ok", "GET /healthz: %d %r" % (resp.status, body))
        async with session.ws_connect(url, ssl=ctx) as ws:
            ext = ws._response.headers.get("Sec-WebSocket-Extensions", "")
            expect(conns == ["new", "reused"], "connections used (GET, ws_connect): %s" % conns)
            await ws.send_str("after a GET")
            msg = await ws.receive(timeout=TIMEOUT)
            payload = b"after a GET"
            want = "%d %s compressed=%s" % (len(payload), hashlib.sha256(payload).hexdigest(), str("permessage-deflate" in ext).lower())
            expect(msg.type == aiohttp.WSMsgType.TEXT and msg.data == want, "gust answered %s %r, want %r" % (msg.type, msg.data, want))
            return "GET /healthz then ws_connect on the same connection (%s): echoed" % ", ".join(conns), ext


CASES = {"big-websockets": big_websockets, "big-aiohttp": big_aiohttp, "pooled-aiohttp": pooled_aiohttp}


async def main():
    url, cafile, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    for name in names:
        res = {"case": name, "ok": False, "detail": "", "extensions": ""}
        try:
            res["detail"], res["extensions"] = await asyncio.wait_for(CASES[name](url, cafile), TIMEOUT)
            res["ok"] = True
        except Exception as e:  # every failure is the case's verdict
            res["detail"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
