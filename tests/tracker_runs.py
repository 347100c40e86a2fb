"""Shared by the tracker export tests (test_mlflow_export.py, test_wandb_export.py, test_wandb_forwarder.py): short
runs on a server, waiting on them, the metrics the API answers, and W&B's offline run files read back with W&B's own
record type."""

from __future__ import annotations

import json
import socket
import struct
import zlib
from pathlib import Path

import httpx

from tests.run_fixtures import plan, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def short_plan(project: str, steps: int) -> dict:
    document = plan(project, "chat")
    document["config"]["hyperparams"]["training"]["maxSteps"] = steps
    document["execution"]["saveEvery"] = 2
    return document


def wait_run(client: httpx.Client, run_id: str, test, timeout: float = 180) -> dict:
    """The run once `test` holds; it fails at once if the run fails or is cancelled first."""
    return wait_for(client, f"/v1/training/runs/{run_id}", test, timeout,
                    fail_if=lambda run: run["phase"] in ("FAILED", "CANCELLED"))


def api_metrics(client: httpx.Client, run_id: str) -> dict:
    return client.get(f"/v1/training/runs/{run_id}/metrics").json()


# W&B's offline run file (`run-ID.wandb`): a 7-byte header (":W&B", 0xBEE1, version 0), then LevelDB's log format:
# blocks of 32 KiB holding chunks (CRC-32 of type and data, length, type: full, first, middle, last), each record a
# `wandb_internal_pb2.Record`. wandb 0.31 has no reader of its own in Python (its `wandb-core` reads them in Go).
_BLOCK, _CHUNK_HEADER = 32 * 1024, 7


def wandb_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and data[4:6] == b"\xe1\xbe", data[:7]
    records, pending, pos = [], b"", 7
    while pos + _CHUNK_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + _CHUNK_HEADER])
        chunk = data[pos + _CHUNK_HEADER:pos + _CHUNK_HEADER + length]
        if len(chunk) < length:  # a file W&B is still writing
            break
        assert zlib.crc32(bytes([kind]) + chunk) == crc, f"{path}: bad chunk at {pos}"
        pos += _CHUNK_HEADER + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a record's full or last chunk
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def read_wandb_run(folder: Path) -> dict:
    """An offline run folder as {run, config, history, summary, exit_code}: `history` the rows logged, in order, each
    a dict of its keys' values; `summary` what was set explicitly (later values win); `exit_code` None without one."""
    (path,) = folder.glob("run-*.wandb")
    found = {"run": None, "config": {}, "history": [], "summary": {}, "exit_code": None}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found["run"] = record.run
            found["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            found["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            found["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                     for item in record.history.item})
        elif kind == "summary":
            found["summary"].update({item.key: json.loads(item.value_json) for item in record.summary.update
                                     if item.key})
        elif kind == "exit":
            found["exit_code"] = record.exit.exit_code
    return found


def wandb_services(server_pid: int) -> list[str]:
    """The command lines of the W&B service processes a process started (`wandb-core … --pid PID`)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(word.endswith(b"wandb-core") for word in words) and str(server_pid).encode() in words:
            found.append(b" ".join(words).decode())
    return found
