"""The local proxy of `akka training endpoints proxy`: a small HTTP server on 127.0.0.1 that forwards
`POST /v1/chat/completions` (streamed answers pass through as they come) to one endpoint through the Optimize
server, and answers every other request 404."""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from optimize.client.api import OPENAI_CHAT_COMPLETIONS as ROUTE


def serve(target: str, port: int, started: Callable[[str], None], token: str | None = None) -> None:
    """Forward to `target` until interrupted, with the CLI's own token (the proxy listens on 127.0.0.1 only);
    `started` is told the address once the port is open."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0), headers=headers)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            if self.path.split("?")[0] != ROUTE:
                return self._not_found()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                with client.stream("POST", target, content=body,
                                   headers={"Content-Type": "application/json"}) as answer:
                    self.send_response(answer.status_code)
                    self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in answer.iter_raw():
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
            except httpx.HTTPError as error:
                self._answer(502, b'{"error": {"message": "the Optimize server did not answer: %s"}}'
                             % str(error).encode())

        def do_GET(self) -> None:  # noqa: N802
            self._not_found()

        def _not_found(self) -> None:
            self._answer(404, b'{"error": {"message": "this proxy forwards only POST /v1/chat/completions"}}')

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:  # quiet: the command's output is the address
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Forward)
    started("127.0.0.1:%d" % server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        client.close()
