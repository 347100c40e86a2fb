"""The dashboard's files (`optimize.dashboard.routes`): the page at `/` and its assets are served without a token
(they hold no data), Plotly's bundle comes from the installed package (no CDN), a name that is not an asset is 404,
and the API the page reads still needs the token."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(scope="module")
def url(sqlite_server) -> str:
    return sqlite_server.url


def test_the_page_and_its_assets_are_served_without_a_token(url):
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/dashboard/assets/app.js">' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]  # nothing from elsewhere
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css"), ("plotly.min.js", "text/javascript")):
        asset = httpx.get(f"{url}/dashboard/assets/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind), name
    assert b"plotly.js" in httpx.get(f"{url}/dashboard/assets/plotly.min.js").content[:2000]


@pytest.mark.parametrize("name", ["nope.js", "index.html.bak", ".hidden.js", "routes.py"])
def test_a_name_that_is_no_asset_is_not_found(url, name):
    assert httpx.get(f"{url}/dashboard/assets/{name}").status_code == 404


@pytest.mark.parametrize("path", ["/", "/docs", "/redoc"])
def test_no_other_site_may_frame_the_pages(url, path):
    page = httpx.get(f"{url}{path}")
    assert page.status_code == 200
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_the_api_the_page_reads_still_needs_a_token(url, sqlite_server):
    assert httpx.get(f"{url}/v1/training/runs").status_code == 401
    assert httpx.get(f"{url}/v1/training/runs", headers=sqlite_server.headers).status_code == 200
