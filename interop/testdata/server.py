#!/usr/bin/env python3
"""Python `websockets` echo server for gust's interop tests (gust's client is the peer).

usage: server.py PORT [MAX_SECONDS]

Listens on 127.0.0.1:PORT (0 picks a free port) with permessage-deflate at websockets' defaults, and prints
JSON lines on stdout: first {"listening": PORT}, then one {"closed": LABEL, "code": C, "reason": R,
"extensions": E} per connection when it ends. Exits after MAX_SECONDS (default 120) whatever happens.

Per connection: "label:NAME" names it and is echoed; "send-fragmented" makes the server send one text
message in three fragments; "info" is answered with {"extensions": E} (the negotiated
Sec-WebSocket-Extensions); "close:CODE" makes the server close with CODE and the reason "server-bye";
everything else is echoed with its type.
"""

import asyncio
import json
import sys

import websockets
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

FRAGMENTS = ["frag", "mented ", "message ✓"]


def emit(obj):
    print(json.dumps(obj), flush=True)


async def handler(ws):
    label = ""
    ext = ws.response.headers.get("Sec-WebSocket-Extensions", "") if ws.response else ""
    try:
        async for msg in ws:
            if isinstance(msg, str):
                if msg.startswith("label:") and not label:
                    label = msg[len("label:"):]
                    await ws.send(msg)
                    continue
                if msg == "send-fragmented":
                    await ws.send(FRAGMENTS)  # an iterable goes out as one message, one frame per item
                    continue
                if msg == "info":
                    await ws.send(json.dumps({"extensions": ext}))
                    continue
                if msg.startswith("close:"):
                    await ws.close(code=int(msg[len("close:"):]), reason="server-bye")
                    break
            await ws.send(msg)
    except ConnectionClosed:
        pass
    await ws.wait_closed()
    rcvd = ws.protocol.close_rcvd
    emit({
        "closed": label,
        "code": rcvd.code if rcvd else None,
        "reason": rcvd.reason if rcvd else None,
        "extensions": ext,
    })


async def main():
    if len(sys.argv) < 2:
        print("usage: server.py PORT [MAX_SECONDS]", file=sys.stderr)
        sys.exit(2)
    port = int(sys.argv[1])
    max_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 120
    async with serve(handler, "127.0.0.1", port, max_size=None, compression="deflate") as server:
        port = server.sockets[0].getsockname()[1]
        emit({"listening": port, "peer": "python websockets", "version": websockets.__version__})
        await asyncio.sleep(max_seconds)


if __name__ == "__main__":
    asyncio.run(main())
