"""A real headless Chromium for the tests that look at a page the way a person would (docs/browser.md).

The browser is Debian's `chromium-headless-shell` package (Chromium's own headless shell, the build Playwright runs
for `headless=True`), which `make install` installs with apt-get when it is missing; Playwright (pinned in the dev
extra) drives it through `executable_path`, so nothing is downloaded from a browser CDN. `OPTIMIZE_TEST_CHROMIUM`
names another binary instead. A machine without any of them fails the test that asks for a page, with what to run:
it never skips, since `make install` puts the browser there.

    from tests.browser import browser_page, screenshot

    with browser_page() as page:
        page.goto(f"{server.url}/docs")
        page.get_by_text("/v1/health").first.wait_for()
        path = screenshot(page, "docs")

Screenshots are PNG files in `screenshot_dir()`: `$OPTIMIZE_TEST_SCREENSHOTS` when set, else
`<the system's temp dir>/optimize-screenshots/` (outside the repository, so nothing to keep out of git); a file is
named after what the test passes and is replaced by the next run, so the last run's pictures stay there to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

# Where a browser is looked for, first found wins: Debian's headless shell (its binary, then the script that runs
# it), then Debian's full Chromium (`apt-get install chromium`), which Playwright runs headless as well.
CANDIDATES = (
    "/usr/lib/chromium/chromium-headless-shell",
    "/usr/bin/chromium-headless-shell",
    "/usr/bin/chromium",
)
INSTALL_HINT = (
    "run `make install` (it installs Debian's chromium-headless-shell with apt-get as root), or "
    "`apt-get install --no-install-recommends chromium-headless-shell`, or set OPTIMIZE_TEST_CHROMIUM to a Chromium "
    "binary"
)
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 10_000  # the default wait of every action and expectation on a page; a local page renders in well under


class BrowserMissing(RuntimeError):
    """No Chromium binary where the tests look for one."""


def find_chromium() -> Path:
    """The Chromium binary the tests drive: `$OPTIMIZE_TEST_CHROMIUM`, else the first of CANDIDATES that exists.

    Raises BrowserMissing, saying what to install, when there is none (a named one that is missing included)."""
    named = os.environ.get("OPTIMIZE_TEST_CHROMIUM")
    if named:
        path = Path(named) if os.sep in named else Path(shutil.which(named) or named)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BrowserMissing(f"OPTIMIZE_TEST_CHROMIUM={named} is no executable file; {INSTALL_HINT}")
    for candidate in CANDIDATES:
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise BrowserMissing(f"no headless Chromium found (looked at {', '.join(CANDIDATES)}); {INSTALL_HINT}")


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium started by Playwright from `find_chromium()`; closed (and its process ended) on exit."""
    executable = find_chromium()
    with sync_playwright() as playwright:
        # Playwright starts Chromium without its sandbox unless asked (chromium_sandbox), which root needs.
        browser = playwright.chromium.launch(executable_path=str(executable), headless=True, timeout=30_000)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def fresh_page(browser: Browser, viewport: dict[str, int] | None = None) -> Iterator[Page]:
    """A fresh page of a started Chromium in a context of its own (no cookies or storage shared), VIEWPORT-sized
    unless told, with TIMEOUT_MS as its default wait."""
    context = browser.new_context(viewport=viewport or VIEWPORT, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@contextmanager
def browser_page(viewport: dict[str, int] | None = None) -> Iterator[Page]:
    """A fresh page of a headless Chromium of its own. `page.context.browser.version` tells the browser's
    version."""
    with chromium() as browser, fresh_page(browser, viewport) as page:
        yield page


def console_errors(page: Page) -> list[str]:
    """A list that fills, from now on, with the page's console errors and uncaught exceptions (a test asserts it
    stays empty, say, after it has used the page)."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    return errors


def screenshot_dir() -> Path:
    """The folder the screenshots go to (created): `$OPTIMIZE_TEST_SCREENSHOTS`, else `optimize-screenshots` in the
    system's temp dir."""
    folder = Path(os.environ.get("OPTIMIZE_TEST_SCREENSHOTS") or Path(tempfile.gettempdir()) / "optimize-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(page: Page, name: str, full_page: bool = False) -> Path:
    """Writes a PNG of what the page shows now to `screenshot_dir()/<name>.png` (name made file-safe), replacing an
    earlier one, and returns its path (which a test puts in its assertion messages; the path is printed too, so
    `pytest -s` or a failure's captured output shows where it is)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "page"
    path = screenshot_dir() / f"{safe}.png"
    page.screenshot(path=str(path), full_page=full_page)
    print(f"screenshot: {path}")
    return path
