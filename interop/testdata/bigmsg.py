#!/usr/bin/env python3
"""One large message between Python `websockets` and gust, for gust's streaming interop test.

usage: bigmsg.py send URL SIZE FRAGMENT COMPRESS
       bigmsg.py receive COMPRESS [MAX_SECONDS]

send: connects to URL and sends one binary message of SIZE bytes in frames of FRAGMENT bytes (an
iterable of fragments goes out as one fragmented message), then prints {"sent": SIZE, "sha256": HEX}
and waits for gust to close.

receive: listens on 127.0.0.1 (a free port), prints {"listening": PORT}, reads one message of any size
with recv_streaming (no whole-message buffer), prints {"received": N, "sha256": HEX}, answers with the
text "N HEX" and waits for gust to close. Exits after MAX_SECONDS (default 170) whatever happens.

COMPRESS is 1 to offer/accept permessage-deflate, 0 not to. The bytes sent are a 64 KiB random block
(seeded) rotated by 7 bytes more at each fragment: cheap to make, and not a repetition deflate folds.
"""

import asyncio
import hashlib
import json
import random
import sys

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve


def emit(obj):
    print(json.dumps(obj), flush=True)


def fragments(size, frag, digest):
    block = random.Random(1).randbytes(65536)
    block = block + block
    sent, i = 0, 0
    while sent < size:
        n = min(frag, size - sent)
        start = (7 * i) % 65536
        piece = block[start:start + n] if n <= 65536 else (block * (n // 65536 + 2))[start:start + n]
        digest.update(piece)
        yield piece
        sent += n
        i += 1


async def send(url, size, frag, compress):
    digest = hashlib.sha256()
    async with connect(url, max_size=None, compression="deflate" if compress else None,
                       open_timeout=30, close_timeout=30) as ws:
        await ws.send(fragments(size, frag, digest))
        emit({"sent": size, "sha256": digest.hexdigest()})
        await ws.wait_closed()


async def receive(compress, max_seconds):
    done = asyncio.get_running_loop().create_future()

    async def handler(ws):
        digest, n = hashlib.sha256(), 0
        async for chunk in ws.recv_streaming():
            digest.update(chunk)
            n += len(chunk)
        emit({"received": n, "sha256": digest.hexdigest()})
        await ws.send(f"{n} {digest.hexdigest()}")
        await ws.wait_closed()
        if not done.done():
            done.set_result(None)

    async with serve(handler, "127.0.0.1", 0, max_size=None,
                     compression="deflate" if compress else None) as server:
        emit({"listening": server.sockets[0].getsockname()[1]})
        await asyncio.wait_for(done, max_seconds)


def main():
    if sys.argv[1] == "send":
        asyncio.run(send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"))
    else:
        max_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 170
        asyncio.run(receive(sys.argv[2] == "1", max_seconds))


if __name__ == "__main__":
    main()
