"""The server's listening socket says it is TCP, so the connections it accepts get TCP_NODELAY from asyncio: with
protocol 0 they did not, and every answer on a kept-alive connection waited ~40 ms for the client's delayed ACK."""

from __future__ import annotations

import asyncio
import socket

from optimize.api.serve import bind


def test_accepted_connections_have_nagle_off():
    listener = bind("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    seen: list[int] = []

    async def main() -> None:
        def accepted(reader, writer) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=listener)
        port = listener.getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(50):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen and seen[0] != 0
