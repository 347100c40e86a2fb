"""OpenAI's fine-tuning quickstart, run unchanged with the official client against a server of this module's own
(only `base_url` and the key differ, and the server maps the quickstart's model name to the tiny stand-in with
OPTIMIZE_FINE_TUNING_MODELS): upload a JSONL file of OpenAI's chat rows, create a job, poll it and its events, read
its checkpoints, and chat with its `ft:` model, which the server starts serving on that first request. Then a dpo
job through `method` going on from that `ft:` model, cancelled, and the refusals of what is not taken, each naming
its parameter in OpenAI's error object, with nothing stored."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai import OpenAI

from tests.conftest import from_standin, start_server, write_jsonl
from tests.run_fixtures import CAPITALS

MODEL = "optimize/tiny-llama-3.2"
OPENAI_NAME = "gpt-4o-mini-2024-07-18"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fine-tuning")
    proc = start_server(folder / "data", env={"OPTIMIZE_FINE_TUNING_MODELS": json.dumps({OPENAI_NAME: MODEL})})
    admin = httpx.Client(base_url=proc.url, headers=proc.headers, timeout=300)
    admin.post(f"/v1/training/base-models/{MODEL}/select", json=from_standin(MODEL)).raise_for_status()
    yield {"proc": proc, "admin": admin, "folder": folder,
           "client": OpenAI(base_url=f"{proc.url}/v1", api_key=proc.token, max_retries=0)}
    for endpoint in admin.get("/v1/training/endpoints").json()["endpoints"]:
        admin.delete(f"/v1/training/endpoints/{endpoint['endpointId']}")
    admin.close()
    proc.stop()


def _chat_rows(copies: int) -> list[dict]:
    return [{"messages": [{"role": "system", "content": "Answer with the capital."},
                          {"role": "user", "content": f"What is the capital of {country}?"},
                          {"role": "assistant", "content": f"The capital of {country} is {city}."}]}
            for country, city in CAPITALS] * copies


def _preference_rows() -> list[dict]:
    return [{"input": {"messages": [{"role": "user", "content": f"What is the capital of {country}?"}]},
             "preferred_output": [{"role": "assistant", "content": city}],
             "non_preferred_output": [{"role": "assistant", "content": "I do not know."}]}
            for country, city in CAPITALS]


def _wait(client: OpenAI, job_id: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while (job := client.fine_tuning.jobs.retrieve(job_id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    return job


def test_the_openai_fine_tuning_quickstart_runs_unchanged(server):
    client: OpenAI = server["client"]
    # a refused file stores nothing, the deployment's fine-tuning project included
    with pytest.raises(openai.UnprocessableEntityError):
        client.files.create(file=("bad.jsonl", b'{"messages": []}\n'), purpose="fine-tune")
    assert client.fine_tuning.jobs.list().data == [] and client.files.list().data == []
    assert "fine-tuning" not in {p["name"] for p in server["admin"].get("/v1/training/projects").json()["projects"]}
    path = write_jsonl(server["folder"] / "mydata.jsonl", _chat_rows(2))

    # the quickstart, as OpenAI's guide writes it
    uploaded = client.files.create(file=open(path, "rb"), purpose="fine-tune")  # noqa: SIM115 - as the guide does
    job = client.fine_tuning.jobs.create(training_file=uploaded.id, model=OPENAI_NAME)
    assert job.status == "queued" and job.model == MODEL and job.training_file == uploaded.id
    assert job.hyperparameters.n_epochs == 6 and job.hyperparameters.batch_size == 8  # "auto": 96 rows seen
    listed = client.fine_tuning.jobs.list(limit=10)
    assert [item.id for item in listed.data] == [job.id]
    done = _wait(client, job.id)
    assert done.status == "succeeded", done.error
    assert done.fine_tuned_model.startswith("ft:fine-tuning/") and done.finished_at >= done.created_at
    events = client.fine_tuning.jobs.list_events(fine_tuning_job_id=job.id, limit=50).data
    messages = [event.message for event in events]
    assert messages[0] == "The job has successfully completed" and "Job queued" in messages
    steps = [event for event in events if event.type == "metrics"]
    assert steps and all(isinstance(event.data["loss"], float) for event in steps if "loss" in event.data)
    checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
    assert checkpoints[0].fine_tuned_model_checkpoint == done.fine_tuned_model
    run = server["admin"].get(f"/v1/training/runs/{job.id.removeprefix('ftjob-')}").json()
    packed = run["results"]["dataFit"]["packing"]  # the 16 rows packed into bins, 8 bins a batch, 6 passes
    assert packed["rows"] == 16 and checkpoints[0].step_number == 6 * -(-packed["bins"] // 8) < 12

    completion = client.chat.completions.create(
        model=done.fine_tuned_model, messages=[{"role": "user", "content": "What is the capital of Peru?"}],
        max_tokens=8, temperature=0)
    assert completion.choices[0].message.role == "assistant" and completion.usage.completion_tokens >= 1

    # the file is the dataset version its rows registered as, named after the file
    assert uploaded.filename == "fine-tuning/mydata:v1" and uploaded.bytes > 0
    assert client.files.retrieve(uploaded.id).id == uploaded.id
    assert [item.id for item in client.files.list()] == [uploaded.id]
    version = server["admin"].get("/v1/registry/datasets/fine-tuning/mydata/versions/v1").json()
    assert version["conversion"] is None and "file-" + version["digest"].removeprefix("sha256:") == uploaded.id


def test_a_dpo_job_goes_on_training_a_fine_tuned_model_from_openai_preference_rows_and_is_cancelled(server):
    client: OpenAI = server["client"]
    fine_tuned = next(job.fine_tuned_model for job in client.fine_tuning.jobs.list() if job.status == "succeeded")
    path = write_jsonl(server["folder"] / "prefs.jsonl", _preference_rows())
    uploaded = client.files.create(file=path.open("rb"), purpose="fine-tune")
    version = server["admin"].get("/v1/registry/datasets/fine-tuning/prefs/versions/v1").json()
    assert version["conversion"]["sourceFormat"] == "openai-preference-jsonl" and version["pairs"] == 8
    job = client.fine_tuning.jobs.create(
        training_file=uploaded.id, model=fine_tuned, suffix="Prefs", seed=7,
        method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2, "n_epochs": 2, "batch_size": 4,
                                                           "learning_rate_multiplier": 3}}})
    assert job.method.type == "dpo" and job.seed == 7
    shown = job.method.dpo.hyperparameters
    assert (shown.n_epochs, shown.batch_size, shown.learning_rate_multiplier, shown.beta) == (2, 4, 3.0, 0.2)
    run = server["admin"].get(f"/v1/training/runs/{job.id.removeprefix('ftjob-')}").json()
    assert run["modelName"] == "prefs" and run["method"] == "dpo" and job.model == MODEL
    assert run["branch"]["source"]["model"] == fine_tuned.removeprefix("ft:")  # its adapter trained on
    cancelled = client.fine_tuning.jobs.cancel(job.id)
    assert cancelled.status == "cancelled" and cancelled.fine_tuned_model is None


@pytest.mark.parametrize(("call", "status", "param", "words"), [
    (lambda c, f: c.files.create(file=("a.jsonl", b'{"messages": []}\n'), purpose="fine-tune"), 400, "file",
     "break the registry's rules"),
    (lambda c, f: c.files.create(file=("a.jsonl", b"{}\n"), purpose="assistants"), 400, "purpose", "assistants"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model="gpt-5"), 404, "model", "gpt-5"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file="file-abc", model=MODEL), 404, "training_file", "file-abc"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model=MODEL, hyperparameters={"n_epochs": 0}), 400,
     "hyperparameters.n_epochs", "n_epochs"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model=MODEL, method={"type": "reinforcement"}), 400,
     "method.type", "reinforcement"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model=MODEL, metadata={"team": "a"}), 400, "metadata",
     "metadata"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model=MODEL, suffix="no spaces here"), 400, "suffix",
     "suffix"),
    (lambda c, f: c.fine_tuning.jobs.create(training_file=f, model=MODEL, extra_body={"warmup": 3}), 400, "warmup",
     "warmup"),
    (lambda c, f: c.fine_tuning.jobs.retrieve("ftjob-0"), 404, "fine_tuning_job_id", "ftjob-0"),
])
def test_what_is_not_taken_is_refused_naming_its_parameter(server, call, status, param, words):
    client: OpenAI = server["client"]
    admin = server["admin"]
    training_file = client.files.list().data[-1].id
    before = (admin.get("/v1/registry/datasets").json(), admin.get("/v1/training/runs").json()["runs"])
    with pytest.raises(openai.APIStatusError) as refused:
        call(client, training_file)
    error = refused.value
    assert error.status_code in (status, 422), error.body
    assert error.body["param"] == param and words in error.body["message"], error.body
    assert (admin.get("/v1/registry/datasets").json(), admin.get("/v1/training/runs").json()["runs"]) == before


def test_a_reader_lists_jobs_but_neither_uploads_nor_starts_one(server):
    admin = server["admin"]
    token = admin.post("/v1/auth/tokens", json={"name": "reader-ft", "role": "reader"}).json()["token"]
    reader = OpenAI(base_url=f"{server['proc'].url}/v1", api_key=token, max_retries=0)
    assert reader.fine_tuning.jobs.list().data
    with pytest.raises(openai.PermissionDeniedError) as refused:
        reader.files.create(file=("a.jsonl", b"{}\n"), purpose="fine-tune")
    assert "trainer" in refused.value.body["message"]
