"""Certificates for the TLS tests and the TLS benchmark, made with the openssl command
line: a test CA, a broker certificate for ``localhost`` and ``127.0.0.1`` (subject
alternative names, as a client checks them), a client certificate signed by the same CA
(its key also encrypted with :data:`KEY_PASSWORD`), a broker certificate for another name
(``broker.invalid``), and a second CA with a client certificate of its own (the "wrong
CA", the untrusted client).  EC P-256 keys: quick to make."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The password of the encrypted copy of the client key.
KEY_PASSWORD = "key-secret"


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signed the broker's and the client's certificates
    other_ca: Path  # a CA that signed neither
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path  # the client key, encrypted with KEY_PASSWORD
    stranger_cert: Path  # a client certificate from other_ca (the broker does not trust it)
    stranger_key: Path
    misnamed_cert: Path  # a broker certificate from ca for broker.invalid only
    misnamed_key: Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(name: str, cwd: Path) -> None:
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "3",
         "-subj", f"/CN=mqttwire test {name}",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def _leaf(name: str, ca: str, subject: str, extensions: str, cwd: Path) -> None:
    _run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
         cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-days", "3", "-out", f"{name}.crt",
         "-extfile", f"{name}.ext", cwd=cwd)


def make_certs(directory: Path) -> Certs:
    """Make the certificates in ``directory`` (which must exist)."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the test certificates "
                           "(apt-get install openssl)")
    _ca("ca", directory)
    _ca("other-ca", directory)
    _leaf("server", "ca", "/CN=localhost",
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
          "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
          "extendedKeyUsage=serverAuth\n", directory)
    _leaf("misnamed", "ca", "/CN=broker.invalid",
          "subjectAltName=DNS:broker.invalid\n"
          "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
          "extendedKeyUsage=serverAuth\n", directory)
    client_ext = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                  "extendedKeyUsage=clientAuth\n")
    _leaf("client", "ca", "/CN=spark-client", client_ext, directory)
    _leaf("stranger", "other-ca", "/CN=stranger", client_ext, directory)
    _run("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
         "-out", "client-encrypted.key", cwd=directory)
    d = directory
    return Certs(d / "ca.crt", d / "other-ca.crt", d / "server.crt", d / "server.key",
                 d / "client.crt", d / "client.key", d / "client-encrypted.key",
                 d / "stranger.crt", d / "stranger.key", d / "misnamed.crt",
                 d / "misnamed.key")
