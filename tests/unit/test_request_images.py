"""Images in a chat request (OpenAI's image_url parts with data URLs): read into the row form the renderer reads,
kept under the sha256 of their bytes; a URL to fetch, bad base64, bytes that are no image and an image outside a
user message are refused naming the part."""

from __future__ import annotations

import base64
import hashlib
import io

import pytest
from PIL import Image

from optimize.serving.completions import RequestError, read_request


def data_url(colour=(1, 2, 3)) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    Image.new("RGB", (5, 4), colour).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(), buffer.getvalue()


def asked(part: dict, role: str = "user") -> dict:
    return {"model": "m", "messages": [{"role": role, "content": [part, {"type": "text", "text": "What is it?"}]}]}


def test_a_data_url_becomes_an_image_part_with_its_file():
    url, data = data_url()
    request = read_request(asked({"type": "image_url", "image_url": {"url": url}}))
    image = request.messages[0]["content"][0]
    assert image["type"] == "image" and image["path"] == f"request/{hashlib.sha256(data).hexdigest()}"
    with open(image["file"], "rb") as handle:
        assert handle.read() == data
    assert request.messages[0]["content"][1] == {"type": "text", "text": "What is it?"}


@pytest.mark.parametrize(("part", "role", "words"), [
    ({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, "user", "it fetches no URL"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "user", "is not valid base64"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"text").decode()}},
     "user", "the image is not an image"),
    ({"type": "image_url", "image_url": {}}, "user", "needs image_url.url"),
    ({"type": "image_url", "image_url": {"url": data_url()[0]}}, "system", "only a user message holds images"),
])
def test_image_parts_the_endpoint_cannot_read_are_refused_naming_the_part(part, role, words):
    with pytest.raises(RequestError) as refused:
        read_request(asked(part, role))
    assert words in str(refused.value) and "messages[0]" in str(refused.value)
