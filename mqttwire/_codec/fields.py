"""The fields of every packet class, and the equality and repr built from them, shared by
both implementations.

Each packet class of ``_pure`` and of ``_speedups`` names its field list here (the
``fields`` class attribute); ``__eq__`` and ``__repr__`` are written once per
implementation, in its record base class, and call :func:`fields_equal` and
:func:`fields_repr` with that list.  So a field added to a class is compared and shown by
both twins alike, and their reprs are identical by construction.

A field list is a tuple of (name, default): ``REQUIRED`` for a field that is always shown
(a positional argument of the constructor), else the constructor's default, and the field
is shown only when its value differs from it.  Lists give required fields first.
"""

from __future__ import annotations

from typing import Any

from .datatypes import same_kind, short_repr
from .properties import same_properties

__all__ = [
    "ACK", "AUTH", "CONNACK", "CONNECT", "DISCONNECT", "NO_FIELDS", "PUBLISH", "REQUIRED",
    "SUBACK", "SUBSCRIBE", "SUBSCRIPTION", "UNSUBACK", "UNSUBSCRIBE", "WILL", "Fields",
    "fields_equal", "fields_repr",
]


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a field that has none: always shown by repr.
REQUIRED: Any = _Required()

Fields = tuple[tuple[str, Any], ...]

WILL: Fields = (("topic", REQUIRED), ("payload", b""), ("qos", 0), ("retain", False),
                ("properties", None))
CONNECT: Fields = (("client_id", REQUIRED), ("protocol_version", 5), ("clean_start", True),
                   ("keep_alive", 60), ("username", None), ("password", None),
                   ("will", None), ("properties", None))
CONNACK: Fields = (("session_present", False), ("reason_code", 0), ("properties", None))
PUBLISH: Fields = (("topic", REQUIRED), ("payload", b""), ("qos", 0), ("retain", False),
                   ("dup", False), ("packet_id", None), ("properties", None))
#: PUBACK, PUBREC, PUBREL and PUBCOMP.
ACK: Fields = (("packet_id", REQUIRED), ("reason_code", 0), ("properties", None))
SUBSCRIPTION: Fields = (("topic_filter", REQUIRED), ("qos", 0), ("no_local", False),
                        ("retain_as_published", False), ("retain_handling", 0))
SUBSCRIBE: Fields = (("packet_id", REQUIRED), ("subscriptions", REQUIRED),
                     ("properties", None))
SUBACK: Fields = (("packet_id", REQUIRED), ("reason_codes", REQUIRED), ("properties", None))
UNSUBSCRIBE: Fields = (("packet_id", REQUIRED), ("topic_filters", REQUIRED),
                       ("properties", None))
UNSUBACK: Fields = (("packet_id", REQUIRED), ("reason_codes", []), ("properties", None))
DISCONNECT: Fields = (("reason_code", 0), ("properties", None))
AUTH: Fields = (("reason_code", 0), ("properties", None))
#: PINGREQ and PINGRESP.
NO_FIELDS: Fields = ()


def fields_equal(a: object, b: object, fields: Fields) -> Any:
    """``a == b`` for packets of the same kind (of either implementation, see
    ``same_kind``): every field equal, ``properties`` by ``same_properties`` (None equals
    an empty Properties); NotImplemented for anything else."""
    if not same_kind(a, b):
        return NotImplemented
    for name, _ in fields:
        if name == "properties":
            if not same_properties(getattr(a, name), getattr(b, name)):
                return False
        elif not getattr(a, name) == getattr(b, name):
            return False
    return True


def fields_repr(obj: object, name: str, fields: Fields) -> str:
    """``Name(field=value, ...)``: required fields always, the others only when they
    differ from their default (in value or type); large payloads shortened."""
    parts = []
    for field, default in fields:
        value = getattr(obj, field)
        if default is REQUIRED or not (value == default and type(value) is type(default)):
            parts.append(f"{field}={short_repr(value)}")
    return f"{name}({', '.join(parts)})"
