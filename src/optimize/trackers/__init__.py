"""What the server forwards to other experiment trackers (docs/trackers.md): `mlflow_forwarder`, every run's metrics
to an MLflow tracking server. TensorBoard export is the CLI's (`optimize.cli.tensorboard`), over the API."""
