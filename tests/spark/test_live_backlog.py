"""The live source's subscriber against a broker with more than 65,535 messages for its
session: Mosquitto (persistence on, ``max_inflight_messages 0``) holding a backlog of
70,000 QoS 1 and 2 messages, published by mosquitto_pub while the subscriber was away,
the traffic captured by tcpdump and read back with mqttwire's own capture reader.

Mosquitto 2.0.11 gives a message its packet identifier when it queues it (a 16-bit
counter that skips 0: the 65,536th message queued for a client has the first one's),
and once a client with a backlog acknowledges a message it moves the whole backlog in
flight, past the client's Receive Maximum (eclipse/mosquitto issue 2301).  With more
than 65,535 in flight, two of them share an identifier: the capture shows the broker
sending a new PUBLISH whose identifier an earlier PUBLISH, not yet acknowledged by the
client, still holds.  A strict session refuses that PUBLISH with the protocol error
[MQTT-2.2.1-4] (3.1.1 [MQTT-2.3.1-4]), and the broker's session stays in that state: the
query would fail again at each restart.  A tolerant session
(``ClientSession(tolerate_overrun=True)``, the source's ``strictBroker=false``) takes
it: every message is delivered once and acknowledged, each after the earlier exchange
with its identifier ended, so that the broker matches each acknowledgement to the right
message (here; not in every state of that broker: docs/live.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from types import ModuleType

import pytest
from inflight_ledger import flights
from live_brokers import Mosquitto
from local_servers import HOST, sample_maker

import mqttwire
from mqttwire.session import ClientSession
from mqttwire.spark.live.subscriber import Reconnect, Subscriber, SubscriberError

# once: the subject is Mosquitto's: its packet identifiers overrun under a backlog of
# more than 65,535 messages, shown from the capture; and how mqttwire.session (one
# implementation) takes it, strict or tolerant.  The codec only decodes the PUBLISHes
# that the session then judges, and the session's handling of the same packets is
# tested on both codecs in tests/session/test_session_overrun.py (70,000 messages in a
# few seconds), the live subscriber on both in tests/spark/test_live.py.  A smaller
# backlog cannot show it (it takes more messages than the 65,535 identifiers); on the
# pure codec, 3.1.1 alone took 87 s of scripts/test.sh's pure pass, 5.0 145 s (on the
# extension 33 s each).
pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.once]

#: More messages than there are packet identifiers (65,535).
BACKLOG = 70_000
#: Bound on each subscriber's draining, in seconds.
DRAIN_TIMEOUT = 120.0


def publish_backlog(port: int, count: int, *, qos: tuple[int, int] = (1, 2),
                    topic: str = "backlog") -> set[bytes]:
    """Two mosquitto_pub clients publish ``count`` messages at once (a line each: ``-l``),
    on TOPIC/1 at QoS ``qos[0]`` and TOPIC/2 at QoS ``qos[1]``; returns the payloads.
    (One mosquitto_pub with more than 65,535 lines is cut off by Mosquitto 2.0.11:
    "disconnected due to out of memory", its exit status 0 all the same.)"""
    program = shutil.which("mosquitto_pub")
    if program is None:
        pytest.skip("mosquitto_pub is not installed (Debian: mosquitto-clients)")
    payloads: set[bytes] = set()
    procs = []
    for n, level in enumerate(qos, 1):
        lines = [f"p{n}q{level}-{i}".encode() for i in range(count // 2)]
        payloads.update(lines)
        proc = subprocess.Popen([program, "-h", HOST, "-p", str(port), "-V", "mqttv311",
                                 "-i", f"{topic}-pub{n}", "-q", str(level),
                                 "-t", f"{topic}/{n}", "-l"], stdin=subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.close()
        procs.append(proc)
    for proc in procs:
        assert proc.wait(DRAIN_TIMEOUT) == 0
    return payloads


def subscriber(port: int, codec: ModuleType, client_id: str, version: int,
               tolerate: bool, topic: str = "backlog/#") -> Subscriber:
    """A subscriber to ``topic`` at QoS 2, resuming the client id's session."""
    session = ClientSession(client_id, version=version, clean_start=False,
                            session_expiry_interval=600 if version == 5 else 0,
                            auto_ack=False, codec=codec, tolerate_overrun=tolerate)
    return Subscriber(HOST, port, [(topic, 2)], session, reconnect=Reconnect(0.1, 0.5, 5))


def drain(sub: Subscriber, expected: int, hold: int = 0
          ) -> tuple[list[bytes], SubscriberError | None]:
    """Take and acknowledge what ``sub`` receives, a batch every quarter second, as the
    source does, until ``expected`` messages came and every exchange has ended (the
    last PUBCOMP sent), or the subscriber's error.  ``hold``: acknowledge nothing until
    that many messages came (or 10 s passed), as a first batch that big would."""
    got: list[bytes] = []
    session = sub.session
    start = time.monotonic()
    last = 0  # the last message's number taken
    while time.monotonic() < start + DRAIN_TIMEOUT and sub.error is None and (
            len(got) < expected or session.unacknowledged or session.awaiting_pubrel):
        time.sleep(0.25)
        taken = sub.take()
        got += [r.message.payload for r in taken]
        last = taken[-1].seq if taken else last
        if len(got) >= hold or time.monotonic() > start + 10:
            sub.ack_through(last)
    return got, sub.error


@pytest.mark.parametrize("version", [5, 4])
def test_a_backlog_beyond_the_identifier_space(tmp_path: Path, version: int) -> None:
    # The codec ``import mqttwire`` chose: the extension in scripts/test.sh's first pass,
    # the pure twin when its pure pass runs alone (MQTTWIRE_PURE_PYTHON); the session's
    # handling of the same packets is tested on both codecs in
    # tests/session/test_session_overrun.py, 70,000 messages included.
    codec = mqttwire
    broker = Mosquitto(tmp_path, persistence=True, log_all=False)
    broker.start()
    capture = tmp_path / "backlog.pcap"
    try:
        assert broker.port is not None
        # Some 300,000 packets in a few seconds, on a busy machine: 256 MiB for tcpdump,
        # packets handed over in blocks.
        with sample_maker().tcpdump(str(capture), broker.port, buffer_kib=1 << 18,
                                    immediate=False):
            strict = subscriber(broker.port, codec, "strict", version, tolerate=False)
            tolerant = subscriber(broker.port, codec, "tolerant", version, tolerate=True)
            for sub in (strict, tolerant):  # the sessions and their subscriptions
                sub.start()
                sub.close()
            payloads = publish_backlog(broker.port, BACKLOG)
            strict = subscriber(broker.port, codec, "strict", version, tolerate=False)
            strict.start()
            # The first batch holds 65,535 messages unacknowledged: the broker's next new
            # PUBLISH then finds its identifier in use (it reuses it only after 65,535
            # others), whatever the timing of the acknowledgements.
            _, error = drain(strict, BACKLOG, hold=65535)
            strict.close()
            tolerant = subscriber(broker.port, codec, "tolerant", version, tolerate=True)
            tolerant.start()
            got, tolerant_error = drain(tolerant, BACKLOG, hold=65535)
            tolerant.close()
    finally:
        broker.stop()
    # The strict session refused a PUBLISH whose identifier was in use.
    assert error is not None and "in use by a" in str(error), error
    found = re.search(r"packet identifier (\d+), in use", str(error))
    assert found, error
    refused_id = int(found.group(1))
    # From the bytes: the broker sent it while an earlier PUBLISH with that identifier
    # was not yet acknowledged by the client (the client's PUBACK or PUBCOMP for it comes
    # later in the capture, or not at all): the broker broke the rule, not the client.
    # Its first such PUBLISH may come before the refused one: the session cannot tell
    # one whose earlier holder it had acknowledged, the acknowledgement still on its way.
    ledger = flights(capture, broker.port)
    _, strict_flight = ledger["strict"]
    [refused] = [c for c in strict_flight.clashes if c.packet_id == refused_id][:1]
    first = strict_flight.clashes[0]
    for clash in (first, refused):
        assert clash.held.frame < clash.frame and clash.held.state in (
            "not acknowledged", "PUBREC sent", "PUBREL received"), clash
    print(f"\nv{version}: the strict session refused the PUBLISH of frame {refused.frame} "
          f"(identifier {refused_id}, QoS {refused.qos}, DUP {int(refused.dup)}): frame "
          f"{refused.held.frame}'s QoS {refused.held.qos} PUBLISH held it "
          f"({refused.held.state}), {refused.in_flight} unacknowledged then; the broker's "
          f"first such PUBLISH: frame {first.frame} (identifier {first.packet_id}, "
          f"{first.in_flight} unacknowledged, held by frame {first.held.frame}, "
          f"{first.held.state})")
    # The tolerant session met the same state and lost nothing.
    assert tolerant_error is None, tolerant_error
    assert len(got) == BACKLOG and set(got) == payloads
    _, tolerant_flight = ledger["tolerant"]
    assert tolerant_flight.publishes == BACKLOG
    assert tolerant_flight.clashes, "the broker had no identifier in use twice"
    assert tolerant_flight.unacknowledged_at_end == 0  # every exchange ended
    session = tolerant.session
    assert 0 < session.ids_reused <= len(tolerant_flight.clashes)
    print(f"v{version}: the tolerant session took {BACKLOG} messages, "
          f"{len(tolerant_flight.clashes)} of them with an identifier in use "
          f"({session.ids_reused} seen so by the session), "
          f"{tolerant_flight.over_receive_maximum} beyond the Receive Maximum")
