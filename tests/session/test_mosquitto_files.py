"""mqttwire.session.mosquitto_files: Mosquitto's password file and ACL file.  Hashes are
checked against files made by the real ``mosquitto_passwd`` (skipped without it, a
failure under CI) and against digests computed here from the published formats; errors
name the file and line.  ACL decisions run on both codec implementations (their
``topic_matches``).  tests/interop/test_broker_acl.py compares the whole with Mosquitto."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from mqttwire.session import AuthRequest, ConnectionInfo, Principal
from mqttwire.session.mosquitto_files import (
    READ,
    WRITE,
    AclFile,
    MosquittoFileError,
    PasswordFile,
)

INFO = ConnectionInfo()


def request(username: str | None, password: bytes | None, method: str | None = None
            ) -> AuthRequest:
    return AuthRequest("c", username, password, 5, INFO, method)


def test_hashes_made_here_from_the_formats() -> None:
    salt = b"0123456789ab"
    seven = hashlib.pbkdf2_hmac("sha512", b"pw7", salt, 101)
    six = hashlib.sha512(b"pw6" + salt).digest()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    text = (f"# a comment\n\nseven:$7$101${b64(salt)}${b64(seven)}\n"
            f"six:$6${b64(salt)}${b64(six)}\n")
    passwords = PasswordFile.parse(text, path="pw")
    assert len(passwords) == 2 and "seven" in passwords
    assert passwords.check("seven", b"pw7") and not passwords.check("seven", b"pw6")
    assert passwords.check("six", b"pw6") and not passwords.check("six", b"pw7")
    assert not passwords.check("nobody", b"pw7") and not passwords.check("six", None)
    assert repr(passwords) == "PasswordFile('pw', 2 users)"


@pytest.mark.interop
def test_files_made_by_mosquitto_passwd(tmp_path: Path) -> None:
    program = shutil.which("mosquitto_passwd")
    if program is None:
        pytest.skip("mosquitto not installed: no mosquitto_passwd on PATH")
    path = tmp_path / "pw"
    subprocess.run([program, "-c", "-b", str(path), "alice", "s3cret:with colon"], check=True,
                   timeout=10)
    subprocess.run([program, "-H", "sha512", "-b", str(path), "bob", "hunter2"], check=True,
                   timeout=10)
    passwords = PasswordFile.load(path)
    assert passwords.check("alice", b"s3cret:with colon")
    assert passwords.check("bob", b"hunter2")
    assert not passwords.check("alice", b"hunter2")


@pytest.mark.parametrize(("line", "problem"), [
    ("alice", "not 'username:hash'"),
    (":$6$c2FsdA==$aGFzaA==", "not 'username:hash'"),
    ("alice:plain", "not a $6$ or $7$ hash"),
    ("alice:$7$many$c2FsdA==$aGFzaA==", "bad iteration count"),
    ("alice:$6$!!$aGFzaA==", "the salt is not base64"),
])
def test_password_file_errors_name_file_and_line(line: str, problem: str) -> None:
    with pytest.raises(MosquittoFileError) as info:
        PasswordFile.parse(f"# users\n{line}\n", path="/etc/mosquitto/pw")
    assert str(info.value).startswith("/etc/mosquitto/pw:2: ")
    assert problem in str(info.value) and info.value.line == 2


def test_password_file_as_authenticate_hook() -> None:
    salt = b"salt"
    six = base64.b64encode(hashlib.sha512(b"pw" + salt).digest()).decode()
    text = f"alice:$6${base64.b64encode(salt).decode()}${six}\n"
    closed = PasswordFile.parse(text)
    open_ = PasswordFile.parse(text, allow_anonymous=True)
    assert type(closed(request("alice", b"pw"))).__name__ == "Accept"
    for hook in (closed, open_):
        for name, password in (("alice", b"no"), ("bob", b"pw"), ("alice", None)):
            refusal = hook(request(name, password))
            assert getattr(refusal, "reason_code", None) == 0x86
        assert getattr(hook(request("alice", b"pw", "SCRAM-SHA-256")), "reason_code",
                       None) == 0x8C
    assert getattr(closed(request(None, None)), "reason_code", None) == 0x87
    assert type(open_(request(None, None))).__name__ == "Accept"


ACL = """\
topic read public/#
topic  anon/rw
user alice
topic readwrite alice/#
topic deny alice/secret
topic write inbox/#
user bob smith
topic read shared topic/#
pattern write clients/%c/#
pattern read users/%u/#
"""


def who(username: str | None, client_id: str = "dev") -> Principal:
    return Principal(client_id, username, INFO, True)


def test_acl_decisions(codec: ModuleType) -> None:
    acl = AclFile.parse(ACL, path="acl", codec=codec)
    assert repr(acl) == "AclFile('acl', 2 users, 2 patterns)"
    cases = [
        (None, "public/a", READ, True), (None, "public/a", WRITE, False),
        (None, "anon/rw", WRITE, True),  # no access word: readwrite
        ("alice", "public/a", READ, False),  # the anonymous section is not hers
        ("alice", "alice/x", WRITE, True), ("alice", "alice/secret", READ, False),
        ("alice", "alice/secret", WRITE, False), ("alice", "inbox/1", READ, False),
        ("bob smith", "shared topic/x", READ, True),  # names and topics with spaces
        ("bob smith", "clients/dev/1", WRITE, True), ("bob smith", "clients/dev/1", READ,
                                                      False),
        ("alice", "users/alice/q", READ, True), ("alice", "users/bob/q", READ, False),
        (None, "users//q", READ, False),  # %u applies to clients with a user name only
        ("carol", "clients/dev/z", WRITE, True),  # not in the file: patterns only
        ("carol", "anything", READ, False),
    ]
    for username, topic, access, expected in cases:
        assert acl.allowed(who(username), topic, access) is expected, (username, topic, access)
    # A client id holding a wildcard never fills a pattern.
    assert not acl.allowed(who(None, "#"), "clients/x/y", WRITE)
    assert not acl.allowed(who(None, "+"), "clients/x/y", WRITE)
    assert acl.allowed(who(None, "a/b"), "clients/a/b/y", WRITE)  # as Mosquitto 2.0.11


def test_user_rules_come_before_pattern_denials(codec: ModuleType) -> None:
    acl = AclFile.parse("user a\ntopic write x/#\npattern deny x/%u\n", codec=codec)
    assert acl.allowed(who("a"), "x/a", WRITE)  # the user's own grant decides first
    assert not acl.allowed(who("b"), "x/b", WRITE)


@pytest.mark.parametrize(("text", "problem"), [
    ("user\n", "'user' without a user name"),
    ("topics read a\n", "unknown keyword 'topics'"),
    ("topic read a/#/b\n", "bad topic 'a/#/b'"),
    ("pattern\n", "'pattern' without a topic"),
])
def test_acl_errors_name_file_and_line(codec: ModuleType, text: str, problem: str) -> None:
    with pytest.raises(MosquittoFileError) as info:
        AclFile.parse("# header\n" + text, path="/etc/mosquitto/acl", codec=codec)
    assert str(info.value).startswith("/etc/mosquitto/acl:2: ") and problem in str(info.value)
