#!/usr/bin/env python3
"""Python `websockets` client for gust's interop tests.

usage: client.py URL [CASE ...]

Runs each case (default: all) on a new connection to URL, a gust echo server, and prints one JSON line per
case on stdout: {"case": NAME, "ok": BOOL, "detail": TEXT, "extensions": HEADER}. The first message of
each connection is "label:NAME", which the server echoes; "close:CODE" asks the server to close with
CODE and the reason "server-bye". Everything else is echoed with its type.

The payloads match payloads_test.go.
"""

import asyncio
import json
import sys

import websockets
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

TIMEOUT = 30

TEXT = "héllo, gust ✓"
BINARY = bytes(range(256)) * 4
FRAGMENTS = ["frag", "mented ", "message ✓"]
LARGE_SIZE = 1 << 20
LARGE = bytes((i * 7 + 3) % 251 for i in range(LARGE_SIZE))
COMPRESSIBLE = "gust compresses this line well. " * 8192


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


def describe(x):
    if isinstance(x, str):
        return "text(%d)%s" % (len(x), (": " + repr(x)) if len(x) <= 64 else "")
    return "binary(%d)" % len(x)


async def recv(ws):
    return await asyncio.wait_for(ws.recv(), TIMEOUT)


async def echo(ws, payload):
    await asyncio.wait_for(ws.send(payload), TIMEOUT)
    got = await recv(ws)
    want = payload if not isinstance(payload, list) else "".join(payload)
    expect(type(got) is type(want), "echo type: sent %s, got %s" % (describe(want), describe(got)))
    expect(got == want, "echo differs: sent %s, got %s" % (describe(want), describe(got)))
    return "echoed %s" % describe(want)


async def wait_closed(ws):
    """Reads until the connection closes; returns (code, reason) of the close frame received."""
    try:
        while True:
            m = await recv(ws)
            raise Failed("unexpected message before close: %s" % describe(m))
    except ConnectionClosed as e:
        rcvd = e.rcvd
        return (rcvd.code, rcvd.reason) if rcvd is not None else (None, None)


async def case_text(ws):
    return await echo(ws, TEXT)


async def case_binary(ws):
    return await echo(ws, BINARY)


async def case_fragmented(ws):
    # websockets sends an iterable as one message, one frame per item.
    return "3 fragments, " + await echo(ws, FRAGMENTS)


async def case_large(ws):
    return await echo(ws, LARGE)


async def case_compression(ws):
    ext = ws.response.headers.get("Sec-WebSocket-Extensions", "")
    expect("permessage-deflate" in ext, "permessage-deflate not negotiated: Sec-WebSocket-Extensions %r" % ext)
    detail = await echo(ws, COMPRESSIBLE)
    await echo(ws, "stats")  # gust's side reads its TCP byte counts now
    return "negotiated %r, %s" % (ext, detail)


def client_close(code):
    async def run(ws):
        await echo(ws, TEXT)
        await asyncio.wait_for(ws.close(code=code, reason="client-bye"), TIMEOUT)
        rcvd = ws.protocol.close_rcvd
        expect(rcvd is not None, "no close frame came back")
        expect(rcvd.code == code, "server answered close %d with %s" % (code, rcvd.code))
        return "closed with %d, server answered %d %r" % (code, rcvd.code, rcvd.reason)

    return run


async def case_server_close(ws):
    await asyncio.wait_for(ws.send("close:4002"), TIMEOUT)
    code, reason = await wait_closed(ws)
    expect(code == 4002, "server closed with %s, want 4002" % code)
    expect(reason == "server-bye", "close reason %r, want 'server-bye'" % reason)
    return "server closed with %d %r" % (code, reason)


CASES = {
    "text": case_text,
    "binary": case_binary,
    "fragmented": case_fragmented,
    "large": case_large,
    "compression": case_compression,
    "close-1000": client_close(1000),
    "close-4001": client_close(4001),
    "server-close-4002": case_server_close,
}

CLOSES_ITSELF = {"close-1000", "close-4001", "server-close-4002"}


async def run_case(url, name):
    result = {"case": name, "ok": False, "detail": "", "extensions": ""}

    async def run():
        # max_size: gust's 1 MiB case is exactly websockets' default limit; lift it.
        ws = await connect(url, max_size=None, open_timeout=TIMEOUT, close_timeout=TIMEOUT)
        try:
            result["extensions"] = ws.response.headers.get("Sec-WebSocket-Extensions", "")
            await echo(ws, "label:" + name)
            result["detail"] = await CASES[name](ws)
            if name not in CLOSES_ITSELF:
                await ws.close(code=1000, reason="done")
            result["ok"] = True
        finally:
            await ws.close()

    try:
        await asyncio.wait_for(run(), 2 * TIMEOUT)
    except Failed as e:
        result["detail"] = str(e)
    except Exception as e:  # anything else is a failure of the case, with its type
        result["detail"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(result), flush=True)


async def main():
    if len(sys.argv) < 2:
        print("usage: client.py URL [CASE ...]", file=sys.stderr)
        sys.exit(2)
    url = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    print(json.dumps({"peer": "python websockets", "version": websockets.__version__}), flush=True)
    for name in names:
        if name not in CASES:
            print(json.dumps({"case": name, "ok": False, "detail": "unknown case"}), flush=True)
            continue
        await run_case(url, name)


if __name__ == "__main__":
    asyncio.run(main())
