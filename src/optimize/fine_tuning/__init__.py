"""OpenAI's fine-tuning routes on this server's own nouns: a file (`/v1/files`, purpose fine-tune) is a dataset
version of the project's namespace, a fine-tuning job (`/v1/fine_tuning/jobs`) is an sft or dpo run of the project,
and the model it produced is asked for by its `ft:` name, an endpoint started for it on a trainer's first request.
Above the kinds of work (it starts runs and endpoints), beside comparisons and pipelines."""
