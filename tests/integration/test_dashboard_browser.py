"""The dashboard in a real headless Chromium (tests/browser.py) against a real server, worker and training on the
cpu: sign in with a token; a project's runs table; a run's page whose loss curve grows while it trains, then paused
and resumed from the page (each after a confirmation); the row viewer highlighting the tokens that train, as many
as the chat core counts; an endpoint's chat box answering. A screenshot of each page is written (the path is
printed; tests/browser.py says where)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.browser import chromium, console_errors, fresh_page, screenshot
from tests.conftest import chat_row, from_standin, start_server, write_jsonl
from tests.run_fixtures import MODEL, capitals_project, plan, wait_for
from tests.session_files import jsonl, oasst_slice

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dashboard")
    proc = start_server(tmp / "data")
    project = capitals_project(proc.url, tmp, "ui", copies=3)
    yield {**project, "proc": proc}
    proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module's pages, rather than one started for each test (about half a second
    each, a context a twentieth of that): each test still opens its pages in a context of its own."""
    with chromium() as started:
        yield started


@pytest.fixture
def page(deployment, browser):
    with fresh_page(browser) as opened:
        errors = console_errors(opened)
        opened.on("dialog", lambda dialog: dialog.accept())  # every action asks for confirmation first
        opened.goto(f"{deployment['proc'].url}/")
        opened.locator("#token").fill(deployment["proc"].token)
        opened.get_by_role("button", name="Sign in").click()
        opened.get_by_role("heading", name="Projects").wait_for()
        yield opened
        assert not errors, errors


def test_sign_in_then_a_projects_runs(deployment, page):
    shot = screenshot(page, "dashboard-projects")
    assert page.get_by_role("link", name=deployment["name"]).is_visible() and shot.stat().st_size > 0
    page.get_by_role("link", name=deployment["name"]).click()
    page.get_by_role("heading", name=f"Runs of {deployment['name']}").wait_for()
    screenshot(page, "dashboard-runs")


def test_a_wrong_token_is_refused_on_the_sign_in_page(deployment, browser):
    with fresh_page(browser) as opened:
        opened.goto(f"{deployment['proc'].url}/")
        opened.locator("#token").fill("not-a-token")
        opened.get_by_role("button", name="Sign in").click()
        opened.get_by_role("alert").filter(has_text="not accepted").wait_for()


def test_a_runs_curve_grows_while_it_trains_and_it_pauses_and_resumes_from_the_page(deployment, page):
    client, name = deployment["client"], deployment["name"]
    document = plan(name, "chat")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 200
    document["execution"] |= {"saveEvery": 20}
    run = client.post("/v1/training/runs", json=document).json()
    wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: (r["progress"].get("observedStep") or 0) >= 2)
    page.goto(f"{deployment['proc'].url}/#/runs/{run['runId']}")
    chart = page.locator("#chart-loss")
    chart.wait_for()
    first = int(chart.get_attribute("data-points"))
    page.wait_for_function("(n) => Number(document.getElementById('chart-loss')?.dataset.points) > n + 3", arg=first)
    screenshot(page, "dashboard-run")

    page.locator("#pause").click()
    page.locator("#run-phase", has_text="PAUSED").wait_for(timeout=60_000)
    paused = client.get(f"/v1/training/runs/{run['runId']}").json()
    assert paused["phase"] == "PAUSED" and paused["progress"]["observedStep"] < 200
    page.locator("#resume").click()
    page.locator("#run-phase").filter(has_text="QUEUED").or_(page.locator("#run-phase").filter(
        has_text="PREPARING")).or_(page.locator("#run-phase").filter(has_text="TRAINING")).first.wait_for()
    resumed = wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: r["attempt"] == 2)
    assert resumed["phase"] != "PAUSED"
    client.post(f"/v1/training/runs/{run['runId']}/cancel")


def test_the_row_viewer_marks_the_tokens_that_train(deployment, page, tmp_path):
    client, name = deployment["client"], deployment["name"]
    rows = [chat_row("What is the capital of Peru?", "It is Lima."), chat_row("And of Chile?", "Santiago.")]
    from optimize.cli.main import main

    assert main(["registry", "datasets", "register", f"{name}/viewed", "-f", str(write_jsonl(tmp_path / "v.jsonl",
                 rows)), "--server", deployment["proc"].url]) == 0
    analysis = client.post("/v1/training/datasets/analyses", json={"dataset": f"{name}/viewed", "model": MODEL}).json()
    analysis = wait_for(client, f"/v1/training/datasets/analyses/{analysis['analysisId']}",
                        lambda a: a["phase"] in ("done", "failed"))
    assert analysis["phase"] == "done", analysis["reason"]
    page.goto(f"{deployment['proc'].url}/#/datasets/{name}/viewed")
    page.locator("#row-counts").wait_for()
    page.wait_for_function("(id) => Number(document.getElementById(`lengths-${id}`)?.dataset.rows) === 2",
                           arg=analysis["analysisId"])  # the analysis' histogram counts every row
    expected = client.post(f"/v1/training/base-models/{MODEL}/render", json={"row": rows[0]}).json()
    marked = page.locator("mark.trained").all_inner_texts()
    assert "".join(marked) == "".join(text for text, trains in expected["tokens"] if trains)
    assert len(marked) == expected["trainedTokens"] and "Lima" in "".join(marked)
    assert f"{expected['trainedTokens']} trained" in page.locator("#row-counts").inner_text()
    second = client.post(f"/v1/training/base-models/{MODEL}/render", json={"row": rows[1]}).json()
    # the viewer counts the trained tokens the analysis counts (the same chat core, the same loss policy)
    assert expected["trainedTokens"] + second["trainedTokens"] == analysis["report"]["trainedTokens"]["default"]
    screenshot(page, "dashboard-row-viewer", full_page=True)
    page.get_by_role("button", name="Next").click()
    page.locator("#row-counts", has_text="Line 2 of 2").wait_for()
    assert "Santiago" in "".join(page.locator("mark.trained").all_inner_texts())


def test_the_row_viewer_shows_a_rows_images_beside_it(deployment, page, tmp_path):
    from PIL import Image

    from optimize.cli.main import main

    name = deployment["name"]
    (tmp_path / "images").mkdir()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(tmp_path / "images" / "page.png")
    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What does the page say?"},
                                                     {"type": "image", "path": "images/page.png"}]},
                        {"role": "assistant", "content": "It is a red page."}]}
    assert main(["registry", "datasets", "register", f"{name}/pages", "-f", str(write_jsonl(tmp_path / "p.jsonl",
                 [row])), "--server", deployment["proc"].url]) == 0
    page.goto(f"{deployment['proc'].url}/#/datasets/{name}/pages")
    picture = page.locator("figure.row-image img")
    picture.wait_for()
    page.wait_for_function("() => document.querySelector('figure.row-image img').naturalWidth === 40")
    assert page.locator("figure.row-image figcaption").inner_text() == "images/page.png"
    assert "It is a red page." in page.locator("pre.row-json").inner_text()
    screenshot(page, "dashboard-row-images")
    # under a model that takes images, the row's tokens beside its pictures, the answer's marked as trained
    deployment["client"].post("/v1/training/base-models/optimize/tiny-smolvlm/select",
                              json=from_standin("optimize/tiny-smolvlm")).raise_for_status()
    page.goto(f"{deployment['proc'].url}/#/")
    page.goto(f"{deployment['proc'].url}/#/datasets/{name}/pages")
    page.locator("#row-model").select_option("optimize/tiny-smolvlm")
    page.locator("mark.trained").first.wait_for()
    assert "red page" in "".join(page.locator("mark.trained").all_inner_texts())
    assert page.locator("figure.row-image img").count() == 1
    screenshot(page, "dashboard-row-images-rendered")


def test_the_chat_box_answers(deployment, page):
    client = deployment["client"]
    client.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    endpoint = client.post("/v1/training/endpoints", json={"model": MODEL, "project": deployment["name"]}).json()
    assert "endpointId" in endpoint, endpoint
    wait_for(client, f"/v1/training/endpoints/{endpoint['endpointId']}",
             lambda e: e["phase"] == "READY" or e["terminal"])
    page.goto(f"{deployment['proc'].url}/#/endpoints/{endpoint['endpointId']}")
    page.locator("#chat-input").fill("What is the capital of Peru?")
    page.locator("#chat-send").click()
    answer = page.locator("#chat-log li.assistant")
    answer.wait_for(timeout=60_000)
    # the model's name, then its words: the stand-in's random weights sample them (at the default temperature), and
    # may well sample a stop token first, so the words themselves may be none
    assert answer.inner_text().startswith(f"{MODEL}:") and page.locator("#chat-log li.error").count() == 0
    screenshot(page, "dashboard-chat")
    client.delete(f"/v1/training/endpoints/{endpoint['endpointId']}")


@pytest.fixture(scope="module")
def finished(deployment) -> dict:
    """A short run trained to completion: saves at 4 and 8, its model registered."""
    client, name = deployment["client"], deployment["name"]
    document = plan(name, "chat", modelName="viewed")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 8
    document["execution"] |= {"saveEvery": 4}
    run = client.post("/v1/training/runs", json=document).json()
    return wait_for(client, f"/v1/training/runs/{run['runId']}", lambda r: r["terminal"])


def test_a_branch_from_a_snapshot_after_its_dry_run_and_an_evaluation_from_the_page(deployment, finished, browser,
                                                                                    tmp_path):
    client, name, url = deployment["client"], deployment["name"], deployment["proc"].url
    assert finished["phase"] == "COMPLETED", finished["failureReason"]
    from optimize.cli.main import main

    asked = [chat_row("What is the capital of Peru?", "Lima"), chat_row("And of Chile?", "Santiago")]
    assert main(["registry", "datasets", "register", f"{name}/asked", "-f", str(write_jsonl(tmp_path / "a.jsonl",
                 asked)), "--server", url]) == 0
    with fresh_page(browser) as page:
        errors = console_errors(page)
        said: list[str] = []

        def answer(dialog):
            said.append(dialog.message)
            dialog.accept(f"{name}/asked" if dialog.type == "prompt" else None)

        page.on("dialog", answer)
        page.goto(f"{url}/")
        page.locator("#token").fill(deployment["proc"].token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Projects").wait_for()
        page.goto(f"{url}/#/runs/{finished['runId']}")
        page.locator("#snapshots tr[data-step='4']").get_by_role("button", name="Branch…").click()
        page.get_by_role("heading", name="Run").filter(has_not_text=finished["runId"][:12]).wait_for()
        assert any("restores" in text and "from step 4" in text for text in said), said  # the dry run, confirmed
        branches = [r for r in client.get("/v1/training/runs", params={"project": name}).json()["runs"]
                    if r.get("parentRunId") == finished["runId"]]
        assert len(branches) == 1 and branches[0]["branch"]["step"] == 4
        screenshot(page, "dashboard-branch")
        page.wait_for_function("() => Number(document.getElementById('chart-tree')?.dataset.runs) === 2")
        assert "from step 4 (" in page.locator("#branch-tree").inner_text()  # the family, the parent's curve overlaid
        page.locator("#settings summary").click()
        assert "config.hyperparams.training.maxSteps" in page.locator("#settings").inner_text()
        assert page.locator("#timeline .phase-bar").count() >= 1

        page.goto(f"{url}/#/runs/{finished['runId']}")
        page.locator("#snapshots tr[data-step='8']").get_by_role("button", name="Evaluate…").click()
        page.locator("#predictions").wait_for()
        evaluation = page.url.rsplit("/", 1)[1]
        wait_for(client, f"/v1/training/evaluations/{evaluation}", lambda e: e["terminal"])
        page.reload()
        page.locator("#predictions tbody tr").nth(1).wait_for()
        assert "Lima" in page.locator("#predictions").inner_text()
        screenshot(page, "dashboard-evaluation")
        page.goto(f"{url}/#/runs/{finished['runId']}")  # the snapshot shows its model's score now
        assert f"on {name}/asked:v1" in page.locator("#snapshots tr[data-step='8'] td.score").inner_text()
        page.goto(f"{url}/#/projects/{name}/evaluations")
        page.wait_for_function("() => Number(document.getElementById('chart-scores')?.dataset.bars) >= 1")
        screenshot(page, "dashboard-scores")
        assert not errors, errors


def test_a_comparison_page_shows_the_models_their_answers_side_by_side_and_promotes_one(deployment, finished,
                                                                                        browser, tmp_path):
    client, name, url = deployment["client"], deployment["name"], deployment["proc"].url
    from optimize.cli.main import main

    asked = [chat_row("What is the capital of Kenya?", "Nairobi"), chat_row("And of Egypt?", "Cairo")]
    assert main(["registry", "datasets", "register", f"{name}/compared", "-f",
                 str(write_jsonl(tmp_path / "c.jsonl", asked)), "--server", url]) == 0
    saves = {s["step"]: s["snapshotId"] for s in
             client.get(f"/v1/training/runs/{finished['runId']}/snapshots").json()["snapshots"]}
    created = client.post("/v1/training/comparisons", json={
        "source": saves[4], "candidates": [f"{name}/viewed:v1"], "dataset": f"{name}/compared",
        "grader": "contains", "maxNewTokens": 4})
    assert created.status_code == 202, created.text
    done = wait_for(client, f"/v1/training/comparisons/{created.json()['comparisonId']}", lambda c: c["terminal"])
    assert done["result"] == "Complete", done
    top = done["scores"][0]["model"]
    with fresh_page(browser) as page:
        errors = console_errors(page)
        said: list[str] = []

        def answer(dialog):
            said.append(dialog.message)
            dialog.accept("champion" if dialog.type == "prompt" else None)

        page.on("dialog", answer)
        page.goto(f"{url}/")
        page.locator("#token").fill(deployment["proc"].token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Projects").wait_for()
        page.goto(f"{url}/#/projects/{name}/comparisons")
        page.locator("#comparisons").get_by_role("link", name=done["comparisonId"][:12]).click()
        page.locator("#comparison-scores").wait_for()
        assert page.locator("#comparison-scores tbody tr").count() == 2
        assert "Complete" in page.locator("#comparison-facts").inner_text()
        page.locator("#row-answers .answer").nth(1).wait_for()  # both models' answers to line 1, side by side
        assert "Kenya" in page.locator("#row-box").inner_text()
        page.locator("#row-line").fill("2")
        page.locator("#row-line").dispatch_event("change")
        page.wait_for_function("() => document.getElementById('row-box').innerText.includes('Egypt')")
        page.wait_for_function("() => Number(document.getElementById('chart-comparison')?.dataset.bars) === 2")
        page.locator(f"#comparison-scores tr[data-model='{top}']").get_by_role("button", name="Promote…").click()
        page.wait_for_function(f"() => document.querySelector(\"#comparison-scores tr[data-model='{top}'] td.aliases\")"
                               "?.innerText.includes('champion')")
        assert any(f"Move {top.split(':')[0]}:champion to {top.split(':')[1]}?" in text for text in said), said
        screenshot(page, "dashboard-comparison")
        assert not errors, errors
    moved = client.get(f"/v1/registry/models/{name}/viewed/aliases/champion").json()
    assert moved["version"] == int(top.split(":v")[1]) and moved["history"][-1]["by"]


def test_a_pipeline_shows_as_its_stage_graph_with_each_stage_linked_to_its_job(deployment, browser):
    client, name, url = deployment["client"], deployment["name"], deployment["proc"].url
    document = plan(name, "chat", modelName="staged")
    document["config"]["hyperparams"]["training"]["maxSteps"] = 2
    stages = [{"name": "train", "type": "train", "baseModel": document["baseModel"], "modelName": "staged",
               "config": document["config"], "execution": document["execution"]},
              {"name": "check", "type": "evaluate", "model": "@train", "dataset": f"{name}/chat",
               "grader": "contains", "maxNewTokens": 2, "minMeanScore": 1.0},
              {"name": "more", "type": "train", "baseModel": document["baseModel"], "config": document["config"],
               "source": {"model": "@train"}}]
    started = client.post("/v1/training/pipelines", json={"kind": "pipeline", "project": name, "stages": stages})
    assert started.status_code == 202, started.text
    ended = wait_for(client, f"/v1/training/pipelines/{started.json()['pipelineId']}", lambda p: p["terminal"])
    assert ended["phase"] == "FAILED" and [s["state"] for s in ended["stages"]] == ["completed", "completed",
                                                                                     "skipped"], ended
    with fresh_page(browser) as page:
        errors = console_errors(page)
        page.goto(f"{url}/")
        page.locator("#token").fill(deployment["proc"].token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Projects").wait_for()
        page.goto(f"{url}/#/projects/{name}/pipelines")
        page.locator("#pipelines").get_by_role("link", name=ended["pipelineId"][:12]).click()
        page.locator("#stage-graph .stage").nth(2).wait_for()
        graph = page.locator("#stage-graph")
        assert [page.locator(f"#stage-graph [data-stage='{s}'] .stage-state").inner_text()
                for s in ("train", "check", "more")] == ["completed", "completed", "skipped"]
        assert "below its minMeanScore 1" in graph.inner_text() and f"{name}/staged:v1" in graph.inner_text()
        screenshot(page, "dashboard-pipeline")
        graph.get_by_role("link", name=f"run {ended['stages'][0]['jobId'][:12]}").click()
        page.get_by_role("heading", name="Run").wait_for()
        assert not errors, errors


def test_a_curation_page_shows_its_progress_and_its_rejected_candidates_by_reason(deployment, page):
    """The stand-in judges at random: whatever it decides, the page shows the counts and each rejected candidate
    with its reason and the judge's reply, as the API has them."""
    client, name, url = deployment["client"], deployment["name"], deployment["proc"].url
    created = client.post("/v1/training/sessions", params={"source": "oasst1", "project": name},
                          content=jsonl(oasst_slice()), headers={"Content-Type": "application/x-ndjson"})
    assert created.status_code == 201, created.text
    started = client.post("/v1/training/curations", json={
        "project": name, "sessionHashes": [created.json()["sessionHash"]], "judge": MODEL,
        "instructions": "Keep polite answers.", "threshold": 0.5, "dataset": f"{name}/curated"})
    assert started.status_code in (200, 201, 202), started.text
    ident = started.json()["curationId"]
    ended = wait_for(client, f"/v1/training/curations/{ident}", lambda c: c["terminal"])
    rejected = client.get(f"/v1/training/curations/{ident}/rejections").json()
    page.goto(f"{url}/#/curations/{ident}")
    page.get_by_role("heading", name=f"Curation {ident[:12]}").wait_for()
    text = page.inner_text("main")
    assert ended["phase"] in text and f"judged {ended['count']['done']}/5" in text
    for reason, count in rejected["rejectedByReason"].items():
        assert f"{reason} {count}" in text
    rows = page.locator("#rejections tbody tr")
    assert rows.count() == len(rejected["rejections"])
    screenshot(page, "dashboard-curation")


def test_the_pages_fit_a_narrow_window(deployment, finished, browser):
    with fresh_page(browser, viewport={"width": 390, "height": 844}) as page:
        page.goto(f"{deployment['proc'].url}/")
        page.locator("#token").fill(deployment["proc"].token)
        page.get_by_role("button", name="Sign in").click()
        pages = ((f"#/projects/{deployment['name']}", "table"), (f"#/runs/{finished['runId']}", "#chart-loss"))
        for route, ready in pages:
            page.goto(f"{deployment['proc'].url}/{route}")
            page.locator(ready).first.wait_for()
            # wide tables scroll inside their panel; the page itself never scrolls sideways
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1"), route
        screenshot(page, "dashboard-narrow", full_page=True)
