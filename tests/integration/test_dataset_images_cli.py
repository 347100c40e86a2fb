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


def rows_with(images: list[str], text_rows: int = 1) -> list[dict]:
    rows = [{"messages": [{"role": "user", "content": [{"type": "text", "text": f"What is on page {i}?"},
                                                       {"type": "image", "path": path}]},
                          {"role": "assistant", "content": f"Page {i} shows a form."}]}
            for i, path in enumerate(images)]
    return rows + [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
                   ] * text_rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_rows_with_images_register_sending_each_image_once_across_versions(cli, ns, tmp_path):
    seed = int(hashlib.sha256(ns.encode()).hexdigest()[:6], 16)
    png(tmp_path / "images/a.png", (seed & 255, 1, 2))
    png(tmp_path / "images/b.png", (seed & 255, 3, 4))
    first = cli.json("registry", "datasets", "register", f"{ns}/pages", "-f",
                     str(write_rows(tmp_path / "rows.jsonl", rows_with(["images/a.png", "images/b.png",
                                                                          "images/a.png"]))))
    assert first["images"] == 2 and first["examples"] == 4
    assert first["upload"]["images"] == {"images": 2, "sent": 2, "alreadyHeld": 0}
    shown = cli.ok("registry", "datasets", "get", f"{ns}/pages").out
    assert "Images    2" in shown

    # a second version over the same pages sends only its rows
    second = cli.json("registry", "datasets", "register", f"{ns}/pages", "-f",
                      str(write_rows(tmp_path / "more.jsonl", rows_with(["images/b.png", "images/a.png"], 3))))
    assert second["version"] == 2 and second["upload"]["images"] == {"images": 2, "sent": 0, "alreadyHeld": 2}

    png(tmp_path / "images/c.png", (seed & 255, 5, 6))
    preview = cli.json("registry", "datasets", "register", f"{ns}/pages", "-f",
                       str(write_rows(tmp_path / "new.jsonl", rows_with(["images/a.png", "images/c.png"]))),
                       "--no-upload")
    assert [i["path"] for i in preview["missingImages"]] == ["images/c.png"] and preview["images"] == 2
    assert cli.json("registry", "datasets", "versions", f"{ns}/pages")["versions"][0]["version"] == 2  # none new


@pytest.mark.parametrize("image, words", [
    ("images/missing.png", "line 1: image images/missing.png is not a file"),
    ("images/bad.png", "line 1: image images/bad.png is not an image"),
    ("../outside.png", "line 1: message 0 content part 1: image path '../outside.png' is not a plain path"),
])
def test_a_row_naming_a_bad_image_is_refused_by_line_and_path(cli, ns, tmp_path, image, words):
    (tmp_path / "images").mkdir()
    (tmp_path / "images/bad.png").write_text("no picture")
    refused = cli("registry", "datasets", "register", f"{ns}/bad", "-f",
                  str(write_rows(tmp_path / "rows.jsonl", rows_with([image]))))
    assert refused.code == 1 and words in " ".join(refused.err.split()), refused.err
    assert cli("registry", "datasets", "get", f"{ns}/bad").code == 1


def test_the_registry_refuses_rows_naming_images_it_was_not_sent(server, ns, tmp_path):
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    data = write_rows(tmp_path / "rows.jsonl", rows_with(["images/a.png"])).read_bytes()
    shard = {"index": 0, "path": "examples.jsonl", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
             "lines": 2}
    plain = client.post("/v1/registry/dataset-uploads", json={"dataset": f"{ns}/direct", "format": "chat-jsonl-v1",
                                                             "shards": [shard]}).json()
    sent = client.put(f"/v1/registry/dataset-uploads/{plain['uploadId']}/shards/0", content=data)
    assert sent.status_code == 422 and "image images/a.png is not among the images the upload sends" in \
        sent.json()["errors"][0]["reason"], sent.text
    named = client.post("/v1/registry/dataset-uploads", json={
        "dataset": f"{ns}/direct2", "format": "chat-jsonl-v1", "shards": [shard],
        "images": [{"path": "images/a.png", "sha256": "e" * 64, "bytes": 10}]}).json()
    assert client.put(f"/v1/registry/dataset-uploads/{named['uploadId']}/shards/0", content=data).status_code == 201
    commit = client.post(f"/v1/registry/dataset-uploads/{named['uploadId']}/commit", json={})
    assert commit.status_code == 409 and "names 1 image(s) the registry lacks: images/a.png" in commit.text


def test_jobs_over_rows_with_images_are_refused_naming_the_dataset(sqlite_server, capsys, tmp_path):
    """Rows with images are kept with their images; a run or an analysis on a model that reads no images, and an
    evaluation, refuse them by name rather than using their text alone (and the row viewer's render, too)."""
    import yaml

    from tests.conftest import Cli
    from tests.run_fixtures import MODEL, capitals_project, plan

    project = capitals_project(sqlite_server.url, tmp_path, "im")
    cli, name = Cli(capsys, sqlite_server.url), project["name"]
    png(tmp_path / "images/a.png", (9, 9, 9))
    cli.ok("registry", "datasets", "register", f"{name}/pages", "-f",
           str(write_rows(tmp_path / "rows.jsonl", rows_with(["images/a.png"]))))
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(plan(name, "pages")))
    words = f"{name}/pages:v1 holds rows with images (1 image(s))"
    dry = cli("training", "runs", "start", "-f", str(run_file), "--dry-run")
    assert dry.code == 1 and f"config.dataset {words}, and base model {MODEL} reads no images" in \
        " ".join(dry.err.split()), dry.err
    evaluation = cli("training", "evaluations", "start", "--model", MODEL, "--dataset", f"{name}/pages",
                     "--project", name)
    assert evaluation.code == 1 and words in " ".join(evaluation.err.split()), evaluation.err
    analysis = cli("training", "datasets", "analyze", f"{name}/pages", "--model", MODEL)
    assert analysis.code == 1 and f"and base model {MODEL} reads no images" in analysis.err, analysis.err
    rendered = project["client"].post(f"/v1/training/base-models/{MODEL}/render",
                                      json={"row": rows_with(["images/a.png"])[0]})
    assert rendered.status_code == 400 and f"the row holds images, and {MODEL} reads no images" in \
        rendered.json()["detail"], rendered.text


def test_an_image_is_read_back_by_a_token_that_sees_a_version_naming_it_and_by_no_other(server, cli, ns, tmp_path):
    picture = png(tmp_path / "images/a.png", (7, 7, int(hashlib.sha256(ns.encode()).hexdigest()[:2], 16)))
    cli.ok("registry", "datasets", "register", f"{ns}/pages", "-f",
           str(write_rows(tmp_path / "rows.jsonl", rows_with(["images/a.png"]))))
    sha = hashlib.sha256(picture.read_bytes()).hexdigest()
    client = httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
    page = client.get(f"/v1/registry/datasets/{ns}/pages/versions/v1/rows").json()
    assert page["items"][0]["images"] == {"images/a.png": sha} and page["items"][1]["images"] == {}
    read = client.get(f"/v1/registry/images/{sha}")
    assert read.status_code == 200 and read.content == picture.read_bytes()
    assert read.headers["content-type"] == "image/png"
    assert client.get(f"/v1/registry/images/{'f' * 64}").status_code == 404
    other = client.post("/v1/auth/tokens", json={"name": f"other-{ns}", "role": "reader",
                                                 "namespaces": [f"x{ns}"]})
    assert other.status_code in (200, 201), other.text
    limited = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {other.json()['token']}"})
    assert limited.get(f"/v1/registry/images/{sha}").status_code == 404  # no version it sees names the image
