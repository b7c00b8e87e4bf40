"""What each codec does with four invalid PUBLISH packets: prints a Markdown table.

    python benchmarks/validation.py        (from the repository root)

The packets (MQTT 5.0 form for peers that speak 5.0, else 3.1.1; built by hand):

- QoS 3: both QoS bits set, which MQTT-3.3.1-4 forbids;
- '#' in the topic name: wildcards are not allowed in a topic name [MQTT-3.3.2-2];
- invalid UTF-8 in the topic name (the byte 0xFF) [MQTT-1.5.4-1 / MQTT-1.5.3-1];
- a 5-byte Remaining Length (ff ff ff ff 01): at most 4 bytes [MQTT-1.5.5 / 2.2.3].

Where a peer splits the work between a framing loop and a decoder (paho, gmqtt), the packet
goes through both, as on a real connection: paho through ``Client._packet_read`` (socket read
replaced by an in-memory buffer) and its packet handler, gmqtt through
``MQTTProtocol._read_packet`` and then its handler.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import peers


def _publish(first: int, topic: bytes, v5: bool, pid: bool = False) -> bytes:
    body = (
        len(topic).to_bytes(2, "big")
        + topic
        + (b"\x00\x01" if pid else b"")
        + (b"\x00" if v5 else b"")
        + b"x"
    )
    return bytes((first, len(body))) + body


def cases(v5: bool) -> dict[str, bytes]:
    return {
        # 0x36 = PUBLISH (3 << 4) | QoS bits 11 << 1; a packet id follows as for QoS > 0.
        "QoS 3": _publish(0x36, b"a/b", v5, pid=True),
        "'#' in topic name": _publish(0x30, b"a/#", v5),
        "invalid UTF-8 in topic": _publish(0x30, b"a/\xff", v5),
        # 0x30, then five Remaining Length bytes, then a plausible body.
        "5-byte Remaining Length": b"\x30\xff\xff\xff\xff\x01\x00\x03a/bx",
    }


def _outcome(fn: Callable[[], Any]) -> str:
    try:
        result = fn()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a Rust panic (pyo3 PanicException) is a BaseException
        kind = "panics" if type(exc).__name__ == "PanicException" else "rejects"
        return f"{kind}: {type(exc).__name__}: {str(exc)[:100]}"
    return result if isinstance(result, str) else f"accepts: {_short(result)}"


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 70 else text[:67] + "..."


def run_decoder(peer: peers.Peer, data: bytes, level: int) -> str:
    decode = peer.decoder(peers.Op("publish-qos0-small", "publish", level))
    assert decode is not None

    def call() -> Any:
        if peer.name.startswith("mqtt5") or peer.name.startswith("zmqtt"):
            # Both frame and decode in one call; None / IndexError = "needs more bytes".
            try:
                out = decode(data)
            except (IndexError, TypeError) as exc:
                if "enough" in str(exc) or "NoneType" in str(exc):
                    return "waits for more bytes (no error)"
                raise
            return _fields(peer, out)
        return _fields(peer, decode(data))

    return _outcome(call)


def _fields(peer: peers.Peer, native: Any) -> str:
    if native is None:
        return "drops it (no message, no error)"
    topic, _, qos = peer.view("publish", native)[:3]
    return f"accepts: topic={topic!r}, qos={qos}"


def run_paho(data: bytes, level: int) -> str:
    import paho.mqtt.client as mqtt

    proto = mqtt.MQTTv5 if level == 5 else mqtt.MQTTv311
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=proto)
    got: list = []
    # msg._topic: the raw bytes (reading msg.topic raises UnicodeDecodeError on invalid UTF-8).
    client.on_message = lambda c, u, msg: got.append((msg._topic, msg.qos))
    src = io.BytesIO(data)
    client._sock_recv = lambda n: src.read(n)  # type: ignore[method-assign]

    def call() -> str:
        rc = client._packet_read()
        if got:
            return f"accepts: on_message(topic={got[0][0]!r}, qos={got[0][1]})"
        if rc == 0 and src.tell() < len(data):
            return "waits for more bytes (no error)"
        return f"rejects: {mqtt.MQTTErrorCode(rc).name}" if rc else "drops it (rc 0, no message)"

    return _outcome(call)


def run_gmqtt(data: bytes, level: int) -> str:
    from gmqtt.mqtt.protocol import MQTTProtocol

    packages: list = []
    framer = peers._Stub(_connection=peers._Stub(put_package=packages.append))
    decode = peers.Gmqtt().decoder(peers.Op("publish-qos0-small", "publish", level))
    assert decode is not None

    def call() -> Any:
        used = MQTTProtocol._read_packet(framer, data)  # type: ignore[arg-type]
        if used == -1:
            return "rejects: framing returns -1 (connection closed)"
        if not packages:
            return "waits for more bytes (no error)"
        return _fields(peers.Gmqtt(), decode(data))

    return _outcome(call)


def main() -> None:
    names = list(cases(True))
    print("| codec (level used) | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for peer in peers.PEERS:
        if not peer.available() or peer.name.startswith("struct"):
            continue
        level = 5 if 5 in peer.levels else 4
        row = []
        for data in cases(level == 5).values():
            if peer.name.startswith("paho"):
                row.append(run_paho(data, level))
            elif peer.name == "gmqtt":
                row.append(run_gmqtt(data, level))
            else:
                row.append(run_decoder(peer, data, level))
        cells = " | ".join(c.replace("|", "\\|") for c in row)
        print(f"| {peer.name} (v{level}) | {cells} |")


if __name__ == "__main__":
    main()
