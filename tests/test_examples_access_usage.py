"""examples/broker.py's access options at their edges, run as a user runs them: a password
or ACL file that cannot be read or used, a missing file, and TLS options that do not go
together are usage errors (exit status 2) that name the file and line or the option;
never a Python traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BROKER = REPO / "examples" / "broker.py"
TIMEOUT = 30.0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(BROKER), "--port", "0", *args],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT,
                          check=False)


def usage_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    return done.stderr.rstrip().splitlines()[-1]


def test_bad_files_name_file_and_line(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_text("alice:$6$c2FsdA==$aGFzaA==\nbob:plaintext\n")
    assert usage_error(run("--password-file", str(passwords))) == (
        f"broker.py: error: {passwords}:2: the password of 'bob' is not a $6$ or $7$ hash "
        "(make the file with mosquitto_passwd; plain-text passwords are not read)")
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic read a/#/b\n")
    assert usage_error(run("--acl-file", str(acl))).startswith(
        f"broker.py: error: {acl}:2: bad topic 'a/#/b': ")


@pytest.mark.parametrize(("args", "message"), [
    (["--certfile", "c.pem", "--require-certificate"], "--require-certificate needs --cafile"),
    (["--scram-user", "alice"], "--scram-user 'alice': not USER:PASSWORD"),
])
def test_option_combinations(args: list[str], message: str) -> None:
    assert message in usage_error(run(*args))
