"""Real models from a hub, through `akka training base-models`: selecting a model whose catalog entry pins no
commit (the hub's current revision, or `--revision`, resolved and recorded), `base-models add`, and the shape check
on fetched files.

The hub is tests/hub_mirror.py on 127.0.0.1, serving repositories made of the qwen2.5 stand-in's files; the server
under test reaches it with the real huggingface_hub client through HF_ENDPOINT, as a deployment reaches a mirror.
One mirror and one server serve the module.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Cli, built_standin, start_server
from tests.hub_mirror import HubMirror, folder_files

pytestmark = pytest.mark.integration

SHAPE = "{class: Qwen2ForCausalLM, hiddenSize: 64, layers: 2, heads: 4, kvHeads: 2, vocab: 1024}"


def _entry(repository: str, commit: str | None, architecture: str = SHAPE, total: int = 139840) -> str:
    pinned = commit or "null"
    return (f"  - {{id: {repository.lower()}, repository: {repository}, commit: {pinned}, commitNote: test, "
            f"family: qwen2.5, architecture: {architecture}, parameters: {{total: {total}, active: {total}}}, "
            f"contextLength: 4096, allowedFor: [training, serving], toolCallParser: hermes}}\n")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The mirror, its repositories, and a server whose catalog names some of them."""
    files = folder_files(built_standin("optimize/tiny-qwen2.5"))
    mirror = HubMirror()
    commits = {
        "v1": mirror.push("acme/Tiny-Qwen", {**files, "README.md": b"first\n"}, tag="v1"),
        "main": mirror.push("acme/Tiny-Qwen", {**files, "README.md": b"second\n"}),
        "pinned": mirror.push("acme/Pinned-Qwen", files),
        "chat": mirror.push("acme/Tiny-Chat", files),
    }
    mirror.push("acme/Big-Qwen", files)
    commits["slow"] = mirror.push("acme/Slow-Qwen", files)
    mirror.slow["acme/Slow-Qwen"] = 2.5  # each file half-sent, then the rest 2.5 s later (files come in parallel)
    mirror.push("acme/Other-Qwen", files)
    commits["rev-v1"] = mirror.push("acme/Rev-Chat", {**files, "README.md": b"one\n"}, tag="v1")
    mirror.push("acme/Rev-Chat", {**files, "README.md": b"two\n"})
    gpt2 = {**json.loads(files["config.json"]), "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}
    mirror.push("acme/Gpt2-Chat", {**files, "config.json": json.dumps(gpt2).encode()})
    folder = tmp_path_factory.mktemp("hub")
    catalog = folder / "catalog.yaml"
    catalog.write_text(
        "models:\n"
        # the catalog's figure is wrong on purpose: once selected, the count shown is the files'
        + _entry("acme/Tiny-Qwen", None, total=134515008)
        + _entry("acme/Pinned-Qwen", commits["pinned"])
        + _entry("acme/Slow-Qwen", None)
        + _entry("acme/Big-Qwen", None, architecture="{class: Qwen2ForCausalLM, hiddenSize: 896, vocab: 151936}"))
    env = {"HF_ENDPOINT": mirror.url, "HF_HUB_OFFLINE": "0", "HF_HOME": str(folder / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    args = ["--catalog", str(catalog)]
    server = start_server(folder / "server", env=env, extra_args=args)
    state = {"mirror": mirror, "commits": commits, "server": server, "env": env, "args": args, "folder": folder}
    yield state
    state["server"].stop()  # the server a test restarted, if one did
    mirror.close()


@pytest.fixture
def cli(capsys, hub):
    return Cli(capsys, hub["server"].url)


def test_unpinned_model_resolves_the_hubs_current_revision_and_records_it(cli, hub):
    before = cli.json("training", "base-models", "get", "acme/tiny-qwen")
    assert before["commit"] is None and before["parameters"] == {"total": 134515008, "active": 134515008,
                                                                  "source": "catalog"}
    text = cli.ok("training", "base-models", "select", "acme/tiny-qwen").out
    main = hub["commits"]["main"]
    assert f"main resolved to {main} and recorded" in text and "139.8K, counted in the selected files" in text
    shown = cli.json("training", "base-models", "get", "acme/Tiny-Qwen")
    assert shown["commit"] == main and shown["catalogCommit"] is None
    assert shown["selection"]["source"] == "hub" and shown["selection"]["revision"] is None
    assert shown["parameters"] == {"total": 139840, "active": 139840, "source": "files"}  # not 134.5M
    row = next(line for line in cli.ok("training", "base-models", "list").out.splitlines()
               if line.startswith("acme/tiny-qwen"))
    assert "139.8K" in row and "134.5M" not in row and main[:12] in row
    # the selection registered the BASE version at the resolved commit
    versions = cli.json("registry", "models", "versions", "acme/tiny-qwen")
    assert any(v["servingModel"]["revision"] == main for v in versions["versions"])


def test_revision_selects_that_commit(cli, hub):
    v1 = hub["commits"]["v1"]
    selected = cli.json("training", "base-models", "select", "acme/tiny-qwen", "--revision", "v1")
    assert selected["commit"] == v1 and selected["selection"]["revision"] == "v1"
    assert cli.json("training", "base-models", "get", "acme/tiny-qwen")["commit"] == v1
    by_commit = cli.json("training", "base-models", "select", "acme/tiny-qwen", "--revision", hub["commits"]["main"])
    assert by_commit["commit"] == hub["commits"]["main"]
    missing = cli("training", "base-models", "select", "acme/tiny-qwen", "--revision", "no-such-branch", "-o", "json")
    assert missing.code == 1 and "has no revision 'no-such-branch'" in missing.json["error"]["message"]


def test_pinned_model_is_fetched_at_its_pin_and_refuses_another_revision(cli, hub):
    pinned = cli.json("training", "base-models", "select", "acme/pinned-qwen")
    assert pinned["commit"] == hub["commits"]["pinned"] and pinned["selection"]["source"] == "hub"
    other = cli("training", "base-models", "select", "acme/pinned-qwen", "--revision", "refs-that-differ")
    assert other.code == 1 and "has no revision" in other.err
    moved = hub["mirror"].push("acme/Pinned-Qwen", {"README.md": b"moved on\n", **folder_files(
        built_standin("optimize/tiny-qwen2.5"))})
    refused = cli("training", "base-models", "select", "acme/pinned-qwen", "--revision", "main")
    assert refused.code == 1 and f"pins acme/Pinned-Qwen to {hub['commits']['pinned']}" in refused.err
    assert moved in refused.err and "leave out --revision" in refused.err


def test_fetched_files_of_another_shape_are_refused_naming_the_field(cli):
    refused = cli("training", "base-models", "select", "acme/big-qwen")
    assert refused.code == 1
    assert "architecture.hiddenSize: acme/big-qwen has 896, the files have 64" in refused.err
    assert "architecture.vocab" in refused.err
    assert cli.json("training", "base-models", "get", "acme/big-qwen")["status"] == "not-selected"


def test_a_hub_model_outside_the_catalog_is_refused_with_the_way_to_add_it(cli):
    refused = cli("training", "base-models", "select", "acme/Tiny-Chat")
    assert refused.code == 1 and "no base model 'acme/Tiny-Chat' in the catalog" in refused.err
    assert "akka training base-models add acme/Tiny-Chat" in refused.err


def test_add_records_the_facts_read_from_the_files_and_survives_a_restart(cli, hub, capsys):
    added = cli.json("training", "base-models", "add", "acme/Tiny-Chat")
    assert added["id"] == "acme/tiny-chat" and added["commit"] == hub["commits"]["chat"]
    assert added["family"] == "qwen2.5" and added["architecture"]["class"] == "Qwen2ForCausalLM"
    assert added["architecture"]["hiddenSize"] == 64 and added["architecture"]["vocab"] == 1024
    assert added["parameters"] == {"total": 139840, "active": 139840, "source": "catalog"}
    assert added["contextLength"] == 4096 and added["toolCallParser"] == "hermes" and added["addedAt"]
    template = folder_files(built_standin("optimize/tiny-qwen2.5"))["chat_template.jinja"]
    import hashlib

    assert added["chatTemplateSha256"] == hashlib.sha256(template).hexdigest()
    again = cli("training", "base-models", "add", "acme/tiny-chat")
    assert again.code == 1 and "is in the catalog already, as acme/tiny-chat" in again.err
    selected = cli.json("training", "base-models", "select", "acme/tiny-chat")
    assert selected["commit"] == hub["commits"]["chat"] and selected["selection"]["source"] == "hub"

    # kept in the store: a restarted server applies it again
    hub["server"].stop()
    hub["server"] = start_server(hub["server"].data_dir, env=hub["env"], extra_args=hub["args"])
    kept = Cli(capsys, hub["server"].url).json("training", "base-models", "get", "acme/tiny-chat")
    assert kept["commit"] == hub["commits"]["chat"] and kept["status"] == "ready"
    assert "Added" in Cli(capsys, hub["server"].url).ok("training", "base-models", "get", "acme/tiny-chat").out


def test_add_at_a_revision_and_refusals(hub, capsys):
    cli_now = Cli(capsys, hub["server"].url)  # the server of this moment: the test above restarts it
    said = cli_now.ok("training", "base-models", "add", "acme/Rev-Chat@v1").out
    assert f"Added acme/rev-chat (qwen2.5, Qwen2ForCausalLM) at {hub['commits']['rev-v1']}" in said
    at_tag = cli_now.json("training", "base-models", "get", "acme/rev-chat")
    assert at_tag["commit"] == hub["commits"]["rev-v1"] and at_tag["commitNote"].startswith("v1 on http://127.0.0.1")
    unsupported = cli_now("training", "base-models", "add", "acme/Gpt2-Chat")
    assert unsupported.code == 1 and "architecture GPT2LMHeadModel is not supported" in unsupported.err
    assert "Qwen2ForCausalLM" in unsupported.err  # the hint lists what is
    missing = cli_now("training", "base-models", "add", "acme/Nothing-Here", "-o", "json")
    assert missing.code == 1 and "no repository acme/Nothing-Here on the hub" in missing.json["error"]["message"]
    bad = cli_now("training", "base-models", "add", "not-a-repository")
    assert bad.code == 1 and "is not a hub repository" in bad.err
    wrong_family = cli_now("training", "base-models", "add", "acme/Other-Qwen", "--family", "gemma4")
    assert wrong_family.code == 1 and "does not fit architecture Qwen2ForCausalLM" in wrong_family.err
    in_catalog = cli_now("training", "base-models", "add", "acme/Tiny-Qwen@v1")
    assert in_catalog.code == 1 and "in the catalog already" in in_catalog.err


def test_a_hub_download_is_shown_while_select_waits(cli, hub):
    """Not a terminal: plain lines on stderr, the first at once, with the bytes received of the files' total
    (the mirror sends this repository's files slowly)."""
    result = cli.ok("training", "base-models", "select", "acme/slow-qwen")
    slow = hub["commits"]["slow"]
    lines = [line for line in result.err.splitlines() if line.startswith("Downloading")]
    assert lines and all(line.startswith(f"Downloading acme/Slow-Qwen at {slow[:12]}: ") for line in lines)
    assert " of " in lines[0] and "%)" in lines[0]
    assert f"main resolved to {slow} and recorded" in result.out
    assert cli.json("training", "base-models", "get", "acme/slow-qwen")["download"] is None  # over
    quiet = cli("training", "base-models", "select", "acme/slow-qwen", "-o", "json")
    assert quiet.code == 0 and quiet.err == "" and quiet.json["commit"] == slow
