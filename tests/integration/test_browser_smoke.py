"""The server's API docs page (`/docs`, Swagger UI served by the server itself) in a real headless Chromium: the page
renders every operation of the server's OpenAPI schema, with nothing fetched from anywhere but the server and no
error in the browser's console. Also the smoke test of the browser tests' set-up (tests/browser.py,
docs/browser.md): it fails, saying what to install, where the browser is missing."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from tests.browser import browser_page, console_errors, screenshot
from tests.conftest import start_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = start_server(tmp_path_factory.mktemp("browser-smoke") / "data")
    yield proc
    proc.stop()


def test_the_docs_page_renders_every_operation_offline(server):
    schema = httpx.get(f"{server.url}/openapi.json", timeout=10).json()
    paths = set(schema["paths"])
    assert "/v1/health" in paths

    with browser_page() as page:
        errors = console_errors(page)
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))

        page.goto(f"{server.url}/docs")
        # Swagger UI fetches /openapi.json and then draws one block per operation; the health route's is among them.
        health = page.locator(".opblock-summary-path[data-path='/v1/health']").first
        health.wait_for(state="visible")
        shot = screenshot(page, "docs")

        assert page.title() == "Optimize API"
        title = page.locator(".info .title").inner_text()  # the schema's title and version, as Swagger UI draws them
        assert title.startswith(schema["info"]["title"]) and schema["info"]["version"] in title
        assert health.inner_text().replace("\u200b", "") == "/v1/health"  # Swagger UI puts breaks in long paths
        rendered = set(page.locator(".opblock-summary-path").evaluate_all("nodes => nodes.map(n => n.dataset.path)"))
        assert rendered == paths, f"operations drawn differ from the schema's (see {shot})"

        origin = urlsplit(server.url).netloc
        assert requested and all(urlsplit(url).netloc == origin for url in requested), requested
        assert errors == []
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert page.context.browser is not None and page.context.browser.version
