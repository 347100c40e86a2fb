"""Images of chat rows through `akka registry datasets images push` against real servers (SQLite, PostgreSQL): each
image sent once under the sha256 of its bytes (a push run again sends nothing; one interrupted and run again sends
only the rest), and what is no image refused by its path — by the CLI before sending, and by the registry for bytes
sent to it directly."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import httpx
import pytest
from PIL import Image

pytestmark = pytest.mark.integration


def png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (8, 6)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, format="PNG")
    return path


def test_images_are_pushed_once_each_and_a_push_run_again_sends_only_what_is_missing(cli, tmp_path):
    # a colour no other test uses: the registry is shared across the session's tests
    seed = int(hashlib.sha256(str(tmp_path).encode()).hexdigest()[:6], 16)
    colours = [((seed >> s) & 255, (seed >> 8) & 255, s) for s in (0, 4, 8)]
    first = png(tmp_path / "images/a.png", colours[0])
    second = png(tmp_path / "images/b.png", colours[1])
    third = png(tmp_path / "images/c.png", colours[2])
    pushed = cli.json("registry", "datasets", "images", "push", str(first))  # an earlier push, interrupted after one
    assert pushed["sent"] == 1 and pushed["pushed"][0]["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()
    again = cli.json("registry", "datasets", "images", "push", str(first), str(second), str(third))
    assert again == {**again, "images": 3, "sent": 2, "alreadyHeld": 1}
    shown = cli.ok("registry", "datasets", "images", "push", str(first), str(second), str(third)).out
    assert "3 image(s): sent 0, already held 3" in shown

    (tmp_path / "notes.png").write_text("not a picture")
    refused = cli("registry", "datasets", "images", "push", str(tmp_path / "notes.png"))
    assert refused.code == 1 and f"image {tmp_path / 'notes.png'} is not an image" in refused.err, refused.err
    missing = cli("registry", "datasets", "images", "push", str(tmp_path / "absent.png"))
    assert missing.code == 1 and "is not a file" in missing.err


def test_the_registry_itself_refuses_bytes_that_are_no_image_or_not_the_digest_named(server):
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    text = b"plain text, not an image"
    refused = client.put(f"/v1/registry/images/{hashlib.sha256(text).hexdigest()}", content=text)
    assert refused.status_code == 422 and "is not an image" in refused.json()["detail"], refused.text
    buffer = io.BytesIO()
    Image.new("RGB", (3, 3), (1, 2, 3)).save(buffer, format="PNG")
    wrong = client.put(f"/v1/registry/images/{'0' * 64}", content=buffer.getvalue())
    assert wrong.status_code in (409, 422) and "hash to sha256" in wrong.json()["detail"], wrong.text
    held = client.post("/v1/registry/images/held", json={"sha256": [hashlib.sha256(text).hexdigest()]}).json()
    assert held["held"] == [] and len(held["missing"]) == 1
