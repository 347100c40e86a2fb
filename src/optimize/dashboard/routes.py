"""The dashboard's files: the page at `/` and its assets under `/dashboard/assets/`, served without a token (they
hold no data; every read the page makes carries the token the user signed in with, and sees what that token may).

Charts are Plotly's (`plotly.min.js` from the installed `plotly` package, served as it ships): nothing is fetched
from a CDN, so the page works on a deployment without the internet.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from optimize.core.errors import NotFound

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).parent / "static"
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
# the page's files may be cached; a new version of the server serves new names only where the page changes them.
# No other site may frame the page (a framed page signed in could be clicked through unseen): frame-ancestors in
# its policy, and X-Frame-Options for browsers that read only that.
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}


def _plotly() -> Path:
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise NotFound("the plotly package is not installed on this server", hint="install it: make install")
    return Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js"


def _asset(name: str) -> Path:
    if name == "plotly.min.js":
        return _plotly()
    path = STATIC / name
    if "/" in name or name.startswith(".") or not path.is_file() or path.suffix not in TYPES:
        raise NotFound(f"no dashboard asset {name!r}")
    return path


@router.get("/")
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html",
                        headers={**HEADERS, "Content-Security-Policy": (
                            "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
                            "script-src 'self' 'unsafe-eval'; frame-ancestors 'none'")})


@router.get("/dashboard/assets/{name}")
def asset(name: str) -> FileResponse:
    path = _asset(name)
    return FileResponse(path, media_type=TYPES[path.suffix], headers=HEADERS)
