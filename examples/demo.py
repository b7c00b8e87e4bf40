"""A short tour of mqttwire: decode bytes captured from a real broker, encode them back,
build a packet from scratch, and decode a byte stream that arrives in odd-sized chunks.

Run it after installing the package: ``python examples/demo.py`` (``bash scripts/demo.sh``
does both).
"""

from __future__ import annotations

import mqttwire as mw

# A PUBLISH captured from a real MQTT 5.0 broker (seed document 002): QoS 0, topic
# "request", Message Expiry Interval 300, Response Topic "response", payload
# "This is a QoS 0 message".  Remaining Length 0x31 = 49 = 2 + 7 (topic) + 1 (property
# length) + 16 (properties: 0x02 + 4-byte 300, 0x08 + 2 + 8 bytes "response") + 23 (payload).
CAPTURED_PUBLISH = bytes.fromhex(
    "30 31 00 07 72 65 71 75 65 73 74 10 02 00 00 01 2c 08 00 08 "
    "72 65 73 70 6f 6e 73 65 54 68 69 73 20 69 73 20 61 20 51 6f "
    "53 20 30 20 6d 65 73 73 61 67 65"
)

# The acknowledgements captured in the same document (MQTT 5.0).
CAPTURED_ACKS = bytes.fromhex(
    "40 04 64 4a 10 00 "  # PUBACK  id 0x644a, reason 0x10 (no matching subscribers)
    "50 04 11 c2 10 00 "  # PUBREC  id 0x11c2, reason 0x10
    "62 03 11 c2 00 "  # PUBREL  id 0x11c2, reason 0x00, no property length
    "70 04 11 c2 00 00"  # PUBCOMP id 0x11c2, reason 0x00, property length 0
)


def main() -> None:
    print(f"mqttwire {mw.__version__}, implementation: {mw.IMPLEMENTATION}")

    print("\n1. Decode a PUBLISH captured from a broker")
    print("   bytes:  ", CAPTURED_PUBLISH.hex(" "))
    publish = mw.decode(CAPTURED_PUBLISH, version=mw.MQTT5)
    print("   packet: ", publish)
    # decode() returns whichever packet the bytes hold; these bytes hold a PUBLISH with
    # properties.
    assert isinstance(publish, mw.Publish) and publish.properties is not None
    print("   message expiry interval:", publish.properties.message_expiry_interval, "s")
    print("   response topic:         ", publish.properties.response_topic)

    print("\n2. Encode it again")
    again = publish.encode(version=mw.MQTT5)
    print("   bytes:  ", again.hex(" "))
    print("   identical to the capture:", again == CAPTURED_PUBLISH)

    print("\n3. Build a packet from scratch")
    # The same PUBACK as in the capture, in its shortest valid form: with no properties
    # the Property Length byte may be left out (MQTT 5.0 section 3.4.2.2.1), so the
    # encoder writes 40 03 64 4a 10 where the broker wrote 40 04 64 4a 10 00.
    puback = mw.PubAck(0x644A, reason_code=0x10)
    print("   packet: ", puback)
    print("   bytes:  ", puback.encode(version=mw.MQTT5).hex(" "))

    print("\n4. Stream-decode the PUBLISH and the four acknowledgements, fed 7 bytes at a time")
    stream = CAPTURED_PUBLISH + CAPTURED_ACKS
    decoder = mw.StreamDecoder(version=mw.MQTT5)
    for start in range(0, len(stream), 7):
        for packet in decoder.feed(stream[start : start + 7]):
            print(f"   after byte {min(start + 7, len(stream)):3}: {packet!r}")


if __name__ == "__main__":
    main()
