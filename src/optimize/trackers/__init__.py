"""What the server forwards to other experiment trackers (docs/trackers.md): every run's metrics, by `sweeper`'s thread,
to an MLflow tracking server (`mlflow_forwarder`) and to Weights & Biases (`wandb_forwarder`). TensorBoard export is
the CLI's (`optimize.cli.tensorboard`), over the API."""
