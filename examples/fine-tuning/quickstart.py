"""OpenAI's fine-tuning quickstart as its guide writes it: upload a JSONL file, create a job, poll it, read its
events, chat with the fine-tuned model. The client reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment, so
pointing them at an Optimize server (its /v1 and a trainer's token) is the only change."""

import time

from openai import OpenAI

client = OpenAI()

uploaded = client.files.create(file=open("examples/datasets/support-chat.jsonl", "rb"), purpose="fine-tune")
print("file", uploaded.id, uploaded.filename)

job = client.fine_tuning.jobs.create(training_file=uploaded.id, model="gpt-4o-mini-2024-07-18")
print("job", job.id, job.status)

while (job := client.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
    time.sleep(5)
print("job", job.id, job.status, job.fine_tuned_model)

for event in client.fine_tuning.jobs.list_events(fine_tuning_job_id=job.id, limit=6).data:
    print("event", event.message)

completion = client.chat.completions.create(
    model=job.fine_tuned_model,
    messages=[{"role": "system", "content": "You triage support tickets. Answer with JSON: {\"category\": ..., "
                                            "\"urgent\": true|false}."},
              {"role": "user", "content": "My parcel never arrived."}],
    max_tokens=24)
print("answer", completion.choices[0].message.content)
