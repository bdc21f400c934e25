#!/usr/bin/env python3
"""A TCP relay that delays every byte by a fixed time in each direction: a stand-in for a network
delay where the kernel has no netem qdisc (tests/netns/three_hosts_e2e_test.sh).

  delay_relay.py --listen HOST:PORT --to HOST:PORT --delay_ms 2 --port_file FILE

Each accepted connection is paired with one to --to. Data read from either side is stamped with
its arrival time and written to the other side no earlier than arrival + delay, in order, so the
delay does not accumulate across reads (a link's one-way latency, not a rate limit). Half-closes
are passed on the same way. The bound port is written to --port_file once listening.
"""

import argparse
import asyncio
import os


async def pump(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def receive():
        while True:
            try:
                data = await reader.read(1 << 16)
            except ConnectionError:
                data = b""
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except ConnectionError:
                return

    await asyncio.gather(receive(), send())


async def serve(args):
    host, port = args.to.rsplit(":", 1)
    delay = args.delay_ms / 1000.0

    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, up_writer, delay),
                             pump(up_reader, client_writer, delay))
        for w in (client_writer, up_writer):
            w.close()

    lhost, lport = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, lhost, int(lport))
    bound = server.sockets[0].getsockname()[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{bound}\n")
    os.rename(tmp, args.port_file)
    async with server:
        await server.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay_ms", type=float, required=True)
    ap.add_argument("--port_file", required=True)
    asyncio.run(serve(ap.parse_args()))


if __name__ == "__main__":
    main()
