"""Mosquitto's password file and ACL file, read and applied as the session layer's hooks,
so that a Mosquitto deployment's files work unchanged with a broker built on
``mqttwire.session`` (examples/broker.py: ``--password-file``, ``--acl-file``).

Password file (``password_file``, as ``mosquitto_passwd`` writes it): one
``username:hash`` per line, the hash ``$7$ITERATIONS$SALT$HASH`` (PBKDF2-HMAC-SHA512,
Mosquitto 2.0's default, 101 iterations) or ``$6$SALT$HASH`` (SHA-512 of the password
then the salt, Mosquitto 1.6's), salt and hash in base64.  Blank lines and lines starting
with ``#`` are skipped.  Verified with hashlib.

ACL file (``acl_file``)::

    # before the first "user" line: what clients without a user name may do
    topic read public/#
    user alice                        # alice's rules follow, until the next "user"
    topic readwrite alice/#           # read | write | readwrite (the default) | deny
    topic deny alice/secret
    pattern write clients/%c/status   # for everyone, wherever it stands: %c client id,
    pattern read users/%u/#           # %u user name (not for clients without one)

A client's topic rules are checked first, then the patterns, a ``deny`` before the
grants in each (as Mosquitto 2.0 does): a topic is allowed when a rule grants the access
and no ``deny`` rule before it matches.  Nothing granted: refused.  A pattern whose
substituted client id or user name holds ``+`` or ``#`` does not apply.  As Mosquitto's,
the ACL never refuses a subscription: a message a client may not read is just not
delivered to it.

Errors name the file and line (``MosquittoFileError``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from .._constants import ReasonCode
from .auth import Accept, AuthRequest, AuthResult, Principal, Refuse

__all__ = [
    "MosquittoFileError",
    "PasswordFile",
    "AclFile",
    "AclRule",
    "READ",
    "WRITE",
]

READ = 1
WRITE = 2
_ACCESS = {"read": READ, "write": WRITE, "readwrite": READ | WRITE, "deny": 0}


class MosquittoFileError(ValueError):
    """A line of a Mosquitto password or ACL file that cannot be used."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


@dataclass(frozen=True)
class _Hash:
    kind: str  # "6" or "7"
    iterations: int
    salt: bytes
    digest: bytes

    def verify(self, password: bytes) -> bool:
        if self.kind == "7":
            got = hashlib.pbkdf2_hmac("sha512", password, self.salt, self.iterations,
                                      len(self.digest))
        else:
            got = hashlib.sha512(password + self.salt).digest()
        return hmac.compare_digest(got, self.digest)


def _b64(text: str, path: str, number: int, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MosquittoFileError(path, number, f"{what} is not base64") from None


class PasswordFile:
    """A Mosquitto password file.  ``check(username, password)`` verifies one user; the
    instance is also an ``authenticate`` hook (``BrokerConfig(authenticate=...)``):
    a user name with the right password is accepted; a wrong password, an unknown user
    name or a user name without password gets 0x86 Bad User Name or Password (3.x:
    0x04); a CONNECT without user name is accepted only with ``allow_anonymous`` (else
    0x87 Not authorized, 3.x 0x05).  Mosquitto 2.0.11 answers 0x87 (0x05) in every
    refused case; MQTT's own code for a bad password is 0x86, which this uses."""

    def __init__(self, users: dict[str, _Hash], *, path: str = "<memory>",
                 allow_anonymous: bool = False) -> None:
        self._users = users
        self.path = path
        self.allow_anonymous = allow_anonymous

    @classmethod
    def load(cls, path: str | PathLike[str], *, allow_anonymous: bool = False) -> PasswordFile:
        return cls.parse(Path(path).read_text(encoding="utf-8"), path=str(path),
                         allow_anonymous=allow_anonymous)

    @classmethod
    def parse(cls, text: str, *, path: str = "<memory>",
              allow_anonymous: bool = False) -> PasswordFile:
        users: dict[str, _Hash] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, hashed = line.partition(":")
            if not sep or not name:
                raise MosquittoFileError(path, number, "not 'username:hash'")
            parts = hashed.split("$")
            if len(parts) == 5 and parts[0] == "" and parts[1] == "7":
                if not parts[2].isdigit() or int(parts[2]) < 1:
                    raise MosquittoFileError(path, number, f"bad iteration count {parts[2]!r}")
                entry = _Hash("7", int(parts[2]), _b64(parts[3], path, number, "the salt"),
                              _b64(parts[4], path, number, "the hash"))
            elif len(parts) == 4 and parts[0] == "" and parts[1] == "6":
                entry = _Hash("6", 1, _b64(parts[2], path, number, "the salt"),
                              _b64(parts[3], path, number, "the hash"))
            else:
                raise MosquittoFileError(
                    path, number, f"the password of {name!r} is not a $6$ or $7$ hash (make "
                    "the file with mosquitto_passwd; plain-text passwords are not read)")
            users[name] = entry
        return cls(users, path=path, allow_anonymous=allow_anonymous)

    def __repr__(self) -> str:
        return f"PasswordFile({self.path!r}, {len(self._users)} users)"

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, username: object) -> bool:
        return username in self._users

    def check(self, username: str, password: bytes | None) -> bool:
        entry = self._users.get(username)
        return entry is not None and password is not None and entry.verify(password)

    def __call__(self, request: AuthRequest) -> AuthResult:
        if request.method is not None:
            return Refuse(ReasonCode.BAD_AUTHENTICATION_METHOD,
                          f"no enhanced authentication {request.method!r}")
        if request.username is None:
            if self.allow_anonymous:
                return Accept()
            return Refuse(ReasonCode.NOT_AUTHORIZED, "no user name, and anonymous clients "
                          "are not allowed")
        if self.check(request.username, request.password):
            return Accept()
        return Refuse(ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                      f"bad user name or password for {request.username!r}")


@dataclass(frozen=True)
class AclRule:
    """One ``topic`` or ``pattern`` line: ``access`` is READ, WRITE, both, or 0 (deny)."""

    topic: str
    access: int
    pattern: bool
    line: int

    def applies(self, topic: str, principal: Principal,
                matches: Callable[[str, str], bool]) -> bool:
        topic_filter = self.topic
        if self.pattern:
            if "%u" in topic_filter:
                if principal.username is None or _wild(principal.username):
                    return False  # %u patterns apply to clients with a user name only
                topic_filter = topic_filter.replace("%u", principal.username)
            if "%c" in topic_filter:
                if _wild(principal.client_id):
                    return False
                topic_filter = topic_filter.replace("%c", principal.client_id)
        return matches(topic_filter, topic)


def _wild(name: str) -> bool:
    return "+" in name or "#" in name


@dataclass
class AclFile:
    """A Mosquitto ACL file, its rules per user (``None``: clients without a user name)
    and its patterns.  ``allowed(principal, topic, access)`` answers; the instance gives
    the ``authorize_publish`` (WRITE) and ``authorize_delivery`` (READ) hooks."""

    users: dict[str | None, list[AclRule]] = field(default_factory=dict)
    patterns: list[AclRule] = field(default_factory=list)
    path: str = "<memory>"
    #: ``topic_matches(filter, name)`` of a codec (set by ``load``/``parse``).
    matches: Callable[[str, str], bool] | None = None

    @classmethod
    def load(cls, path: str | PathLike[str], *, codec: Any = None) -> AclFile:
        return cls.parse(Path(path).read_text(encoding="utf-8"), path=str(path), codec=codec)

    @classmethod
    def parse(cls, text: str, *, path: str = "<memory>", codec: Any = None) -> AclFile:
        from ._codec_choice import Codec

        checker = Codec(codec)
        acl = cls(path=path, matches=checker.topic_matches)
        acl.users[None] = []
        current: str | None = None
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keyword, _, rest = line.partition(" ")
            rest = rest.strip()
            if keyword == "user":
                if not rest:
                    raise MosquittoFileError(path, number, "'user' without a user name")
                current = rest
                acl.users.setdefault(current, [])
                continue
            if keyword not in ("topic", "pattern"):
                raise MosquittoFileError(path, number, f"unknown keyword {keyword!r} (user, "
                                         "topic or pattern)")
            first, _, after = rest.partition(" ")
            if first in _ACCESS and after.strip():
                access, topic = _ACCESS[first], after.strip()
            else:
                access, topic = READ | WRITE, rest  # no access word: readwrite
            if not topic:
                raise MosquittoFileError(path, number, f"'{keyword}' without a topic")
            try:
                # The topic is a filter ("+" and "#" allowed, MQTT 5.0 §4.7); %c and %u
                # stand for whole names, which a filter check takes as plain text.
                checker.validate_topic_filter(topic, version=5)
            except ValueError as exc:
                raise MosquittoFileError(path, number, f"bad topic {topic!r}: {exc}") from None
            rule = AclRule(topic, access, keyword == "pattern", number)
            if rule.pattern:
                acl.patterns.append(rule)
            else:
                acl.users[current].append(rule)
        return acl

    def __repr__(self) -> str:
        named = sum(1 for u in self.users if u is not None)
        return f"AclFile({self.path!r}, {named} users, {len(self.patterns)} patterns)"

    def allowed(self, principal: Principal, topic: str, access: int) -> bool:
        """Whether ``principal`` has ``access`` (READ or WRITE) to the topic name
        ``topic``: its own rules, then the patterns, denials first in each."""
        matches = self.matches
        assert matches is not None
        for rules in (self.users.get(principal.username, ()), self.patterns):
            for rule in rules:
                if rule.access == 0 and rule.applies(topic, principal, matches):
                    return False
            for rule in rules:
                if rule.access & access and rule.applies(topic, principal, matches):
                    return True
        return False

    def may_publish(self, principal: Principal, topic: str, qos: int, retain: bool) -> bool:
        """``BrokerConfig.authorize_publish``."""
        return self.allowed(principal, topic, WRITE)

    def may_read(self, principal: Principal, message: Any) -> bool:
        """``BrokerConfig.authorize_delivery``."""
        return self.allowed(principal, message.topic, READ)
