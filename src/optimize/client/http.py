"""An HTTP client for the Optimize API: problem+json errors become `ApiError`, connection failures a clear one."""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpx

from optimize import __version__


class ApiError(Exception):
    """A refusal or failure reported by the server (or the absence of one)."""

    def __init__(self, message: str, *, status: int = 0, code: str = "error", hint: str | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.hint = hint
        self.body = body or {}


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context every client of this process shares (httpx's default: certifi's authorities, or
    SSL_CERT_FILE / SSL_CERT_DIR): building one reads the whole bundle of authorities, tens of milliseconds a
    client would otherwise pay again."""
    return httpx.create_ssl_context()


class OptimizeClient:
    def __init__(self, base_url: str, timeout: float = 60.0, *, token: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        """`token` authenticates every request (Authorization: Bearer); `transport` stands in for the network (a
        test's recording transport); by default, HTTP."""
        self.base_url = base_url.rstrip("/")
        headers = {"User-Agent": f"akka/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=5.0),
            headers=headers,
            transport=transport,
            verify=tls_context(),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OptimizeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, *, retries: int | None = None, **kwargs: Any) -> Any:
        """Send a request; GETs are retried on connection failures, writes are not."""
        return self.request_with_status(method, path, retries=retries, **kwargs)[0]

    def request_with_status(self, method: str, path: str, *, retries: int | None = None, **kwargs: Any
                            ) -> tuple[Any, int]:
        """The answer and its HTTP status, where the status says more than the body (200 vs 202)."""
        attempts = retries if retries is not None else (3 if method == "GET" else 1)
        for attempt in range(attempts):
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except httpx.TransportError as error:
                if attempt + 1 < attempts:
                    time.sleep(0.2 * 2**attempt)
                    continue
                raise ApiError(
                    f"no Optimize server answers at {self.base_url} ({type(error).__name__})",
                    code="unreachable",
                    hint="start one with: akka server start, or point --server / OPTIMIZE_URL at one",
                ) from None
        return _decode(response), response.status_code

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json, **kwargs)

    def patch(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("PATCH", path, json=json, **kwargs)

    def put(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("PUT", path, json=json, **kwargs)

    def put_stream(self, path: str, chunks: Iterator[bytes], size: int) -> Any:
        """PUT a body of known size from an iterator, without holding it in memory."""
        headers = {"Content-Length": str(size), "Content-Type": "application/x-ndjson"}
        return self.request("PUT", path, content=chunks, headers=headers)


def _decode(response: httpx.Response) -> Any:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.is_success:
        return body
    if isinstance(body, dict) and "detail" in body:
        raise ApiError(str(body["detail"]), status=response.status_code, code=str(body.get("code", "error")),
                       hint=body.get("hint"), body=body)
    raise ApiError(f"the server answered {response.status_code} {response.reason_phrase}", status=response.status_code)


def segment(text: str) -> str:
    """One URL path segment, escaped so a user's text can never change the route."""
    from urllib.parse import quote

    return quote(text, safe="")
