"""The API's own pages, `/docs` (Swagger UI) and `/redoc`, served with their scripts and styles from this server,
so they work on a machine that reaches no CDN (FastAPI's defaults load them from jsdelivr)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
# no other site may frame the pages (as the dashboard's): their requests carry what the reader pastes in
NOT_FRAMED = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}


def _asset_folder() -> Path:
    # fastapi-offline ships the Swagger UI and ReDoc bundles as package data; only its files are used
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install(app: FastAPI) -> None:
    """Mount the assets and the two pages; the app is created with `docs_url=None, redoc_url=None`."""
    app.mount(ASSETS, StaticFiles(directory=_asset_folder()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon.png")
        page.headers.update(NOT_FRAMED)
        return page

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        page = get_redoc_html(openapi_url=app.openapi_url, title=f"{app.title} API",
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS}/favicon.png",
                              with_google_fonts=False)
        page.headers.update(NOT_FRAMED)
        return page
