"""Certificates through the openssl CLI, the CA pin hash, bootstrap tokens and their JWS."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import tempfile
from collections.abc import Iterable
from typing import Any

from .util import Fail, b64, b64url, go_json, now, parse_rfc3339, read_text, rfc3339, run, write_file

# --------------------------------------------------------------------------- PKI (openssl CLI)


def _openssl(args: list[str], inp: bytes | None = None) -> str:
    rc, out = run(["openssl", *args], inp=inp)
    if rc != 0:
        raise Fail(f"openssl {' '.join(args[:2])} failed: {out.strip()}")
    return out


def gen_key(path: str, ec: bool = False) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if ec:  # the kubelet's own client keys are ECDSA P-256
        _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
    else:  # kubeadm 1.23 uses RSA 2048
        _openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", path])
    os.chmod(path, 0o600)


def subj(cn: str, orgs: Iterable[str] = ()) -> str:
    return "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"


def make_ca(cert: str, key: str, cn: str) -> None:
    gen_key(key)
    _openssl(
        ["req", "-x509", "-new", "-key", key, "-subj", subj(cn), "-days", "3650", "-out", cert,
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
         "-addext", f"subjectAltName=DNS:{cn}"]
    )  # fmt: skip


def self_signed(cert: str, key: str, cn: str, dns: str) -> None:
    """A serving certificate signed by its own key (the kubelet's when it is given none)."""
    gen_key(key)
    _openssl(["req", "-x509", "-new", "-key", key, "-subj", subj(cn), "-days", "365", "-out", cert,
              "-addext", f"subjectAltName=DNS:{dns}"])  # fmt: skip


def sign_csr(
    csr_pem: str, ca_cert: str, ca_key: str, *, server: bool = False, client: bool = True,
    sans: Iterable[str] = (), days: int = 365,
) -> str:  # fmt: skip
    """Sign a CSR with the CA; returns the certificate PEM."""
    usages = [u for u, on in (("serverAuth", server), ("clientAuth", client)) if on]
    ext = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    ext += f"extendedKeyUsage={','.join(usages)}\n"
    if sans:
        ext += "subjectAltName=" + ",".join(sans) + "\n"
    with tempfile.TemporaryDirectory() as td:
        csr, extf, out = (os.path.join(td, n) for n in ("c.csr", "ext", "c.crt"))
        write_file(csr, csr_pem)
        write_file(extf, ext)
        serial = str(int.from_bytes(secrets.token_bytes(8), "big"))
        _openssl(
            ["x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial", serial,
             "-days", str(days), "-extfile", extf, "-out", out]
        )  # fmt: skip
        return read_text(out) or ""


def make_csr(key: str, cn: str, orgs: Iterable[str] = ()) -> str:
    return _openssl(["req", "-new", "-key", key, "-subj", subj(cn, orgs)])


def make_cert(
    cert: str, key: str, ca_cert: str, ca_key: str, cn: str, orgs: Iterable[str] = (), **kw: Any
) -> None:
    if not os.path.exists(key):
        gen_key(key)
    write_file(cert, sign_csr(make_csr(key, cn, orgs), ca_cert, ca_key, **kw))


def csr_subject(csr_pem: str) -> tuple[str, list[str]]:
    """(CN, [O...]) of a PEM CSR."""
    out = _openssl(["req", "-noout", "-subject", "-nameopt", "RFC2253"], inp=csr_pem.encode())
    cn, orgs = "", []
    for part in out.split("=", 1)[1].strip().split(","):
        k, _, v = part.partition("=")
        if k == "CN":
            cn = v
        elif k == "O":
            orgs.append(v)
    return cn, orgs


def _der_read(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at pos."""
    tag = buf[pos]
    ln = buf[pos + 1]
    pos += 2
    if ln & 0x80:
        n = ln & 0x7F
        ln = int.from_bytes(buf[pos : pos + n], "big")
        pos += n
    return tag, pos, pos + ln


def pem_to_der(pem: str) -> bytes:
    body = re.search(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", pem, re.S)
    if not body:
        raise ValueError("no CERTIFICATE block found")
    return base64.b64decode("".join(body.group(1).split()))


def spki_der(cert_pem: str) -> bytes:
    """The DER SubjectPublicKeyInfo of the first certificate in cert_pem."""
    der = pem_to_der(cert_pem)
    _, cs, _ = _der_read(der, 0)  # Certificate
    _, pos, _ = _der_read(der, cs)  # tbsCertificate content
    if der[pos] == 0xA0:  # [0] version
        pos = _der_read(der, pos)[2]
    for _ in range(5):  # serial, signature alg, issuer, validity, subject
        pos = _der_read(der, pos)[2]
    _, _, end = _der_read(der, pos)
    return der[pos:end]


def ca_cert_hash(cert_pem: str) -> str:
    """kubeadm's pubkeypin.Hash: sha256 over the DER SubjectPublicKeyInfo."""
    return "sha256:" + hashlib.sha256(spki_der(cert_pem)).hexdigest()


# --------------------------------------------------------------------------- bootstrap tokens / JWS

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_TOKEN_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"


def new_token() -> str:
    pick = lambda n: "".join(secrets.choice(_TOKEN_CHARS) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def jws_detached(content: str, token_id: str, token_secret: str) -> str:
    """bootstrap.ComputeDetachedSignature: HS256 JWS, payload stripped (header..sig)."""
    header = b64url(go_json({"alg": "HS256", "kid": token_id}).encode())
    signing_input = f"{header}.{b64url(content.encode())}"
    sig = hmac.new(token_secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{header}..{b64url(sig)}"


def token_secret_object(token: str, ttl: float, description: str = "", groups: str = "") -> dict:
    tid, tsec = token.split(".")
    data = {
        "token-id": tid,
        "token-secret": tsec,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": groups or "system:bootstrappers:kubeadm:default-node-token",
    }
    if ttl > 0:
        data["expiration"] = rfc3339(now() + ttl)
    if description:
        data["description"] = description
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{tid}", "namespace": "kube-system"},
        "data": {k: b64(v) for k, v in data.items()},
    }


def secret_data(obj: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


def token_expired(sec: dict, at: float | None = None) -> bool:
    exp = secret_data(sec).get("expiration")
    return bool(exp) and parse_rfc3339(exp) <= (now() if at is None else at)


def join_command(endpoint: str, token: str, ca_pem: str, one_line: bool) -> str:
    """cmd/kubeadm/app/cmd/util/join.go template (trailing space included, like the real one)."""
    cmd = f"kubeadm join {endpoint} --token {token} \\\n\t--discovery-token-ca-cert-hash {ca_cert_hash(ca_pem)} "
    if one_line:  # `token create --print-join-command` strips the line continuation
        cmd = cmd.replace("\\\n", "").replace("\t", "")
    return cmd
