"""TLS for the live source (mqttwire.spark.live.transport under
mqttwire.spark.live.subscriber) against Mosquitto's TLS listeners, started here on
127.0.0.1 with a CA and certificates made here
(tls_certs.py, the openssl command): mutual TLS (the broker requires a client
certificate), a listener whose certificate is for another name, and a plain listener for
the paho-mqtt publisher.  Each failure (wrong CA, wrong host name or IP address, no
client certificate, an untrusted one, TLS to a plain port) is an error that says which;
the options are checked before any connection (LiveOptions.parse); one query runs
through Spark over TLS."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from live_brokers import Mosquitto, live_spark, mosquitto
from live_clients import TIMEOUT, publish, take
from local_servers import HOST, free_port
from tls_certs import KEY_PASSWORD, Certs, make_certs

from mqttwire.session import ClientSession
from mqttwire.spark.live.subscriber import Subscriber, SubscriberError
from mqttwire.spark.live.transport import Endpoint, InsecureTLSWarning, TlsOptions

pytestmark = pytest.mark.interop


@dataclass
class TlsBroker:
    """One Mosquitto with three listeners: ``mutual`` (TLS, the CA's certificate for
    localhost and 127.0.0.1, a client certificate from the CA required), ``misnamed``
    (TLS, a certificate from the same CA for broker.invalid only), ``plain`` (TCP)."""

    broker: Mosquitto
    misnamed: int
    plain: int
    certs: Certs

    @property
    def mutual(self) -> int:
        return self.broker.port

    def client_tls(self, **changes: Any) -> TlsOptions:
        """The options that work on ``mutual``, changed by ``changes``."""
        c = self.certs
        return replace(TlsOptions(str(c.ca), str(c.client_cert), str(c.client_key)),
                       **changes)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))  # no openssl: RuntimeError


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsBroker]:
    tmp = tmp_path_factory.mktemp("tls")
    misnamed, plain = free_port(), free_port()
    extra = (f"cafile {certs.ca}\ncertfile {certs.server_cert}\nkeyfile {certs.server_key}\n"
             "require_certificate true\n"
             f"listener {misnamed} {HOST}\ncafile {certs.ca}\n"
             f"certfile {certs.misnamed_cert}\nkeyfile {certs.misnamed_key}\n"
             f"listener {plain} {HOST}\n")
    with mosquitto(tmp, extra) as broker:
        yield TlsBroker(broker, misnamed, plain, certs)


def subscriber(port: int, tls: TlsOptions, *, host: str = "localhost",
               client_id: str = "tls-sub", codec: Any = None) -> Subscriber:
    session = ClientSession(client_id, version=5, clean_start=True, auto_ack=False,
                            codec=codec, connect_timeout=5)
    return Subscriber(host, port, [("tls/#", 1)], session, connect_timeout=5,
                      endpoint=Endpoint(host, port, tls))


def wait_in_log(broker: Mosquitto, text: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    while text not in (log := broker.log_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return log


#: Sizes around TLS's record size (16 KiB) and the link's read size (64 KiB), and a
#: payload of many records: messages split across records and reads, and reads that
#: end inside a record.
SIZES = [0, 1, 100, 16_383, 16_384, 16_385, 65_535, 65_536, 65_537, 300_000] + [50] * 20


def test_mutual_tls_delivers_every_message_byte_for_byte(codec: Any,
                                                         tls_broker: TlsBroker) -> None:
    """The broker's certificate checked against caFile, its host name (localhost)
    checked, the client's certificate presented: messages of every size arrive whole and
    in order, their acknowledgements reach the broker, and close() ends the session with
    DISCONNECT (Mosquitto: "disconnected", not "closed its connection")."""
    client_id = f"tls-sub-{codec.__name__.rsplit('.', 1)[-1]}"
    sub = subscriber(tls_broker.mutual, tls_broker.client_tls(), client_id=client_id,
                     codec=codec)
    sub.start()
    try:
        assert repr(sub).startswith(f"<Subscriber {client_id!r} to "
                                    f"mqtts://localhost:{tls_broker.mutual} subscribed")
        payloads = [bytes([n % 256]) * size for n, size in enumerate(SIZES)]
        publish(tls_broker.plain, "tls", payloads)
        got = take(sub, len(payloads))
        assert [r.message.topic for r in got] == [f"tls/{n}" for n in range(len(payloads))]
        assert [r.message.payload for r in got] == payloads
        assert sub.ack_through(got[-1].seq) == len(payloads)
        last_mid = got[-1].message.packet_id
        assert f"Received PUBACK from {client_id} (Mid: {last_mid}, RC:0)" in wait_in_log(
            tls_broker.broker, f"Received PUBACK from {client_id} (Mid: {last_mid}, RC:0)")
    finally:
        sub.close()
    log = wait_in_log(tls_broker.broker, f"Client {client_id} disconnected.")
    assert f"Client {client_id} disconnected." in log
    assert f"Client {client_id} closed its connection" not in log


def test_an_encrypted_client_key_with_its_password(tls_broker: TlsBroker) -> None:
    tls = tls_broker.client_tls(key_file=str(tls_broker.certs.client_key_encrypted),
                                key_password=KEY_PASSWORD)
    sub = subscriber(tls_broker.mutual, tls, host=HOST)  # 127.0.0.1: the IP SAN checked
    try:
        sub.start()
    finally:
        sub.close()


@pytest.mark.parametrize(("case", "says"), [
    ("wrong CA", r"^certificate verify failed: self-signed certificate in certificate chain "
                 r"\(the broker at mqtts://localhost:\d+, checked against caFile '.*other-ca"
                 r"\.crt'\)$"),
    ("system CA store", r"^certificate verify failed: .* checked against the system's CA "
                        r"store; set caFile to the CA that signed it\)$"),
    ("wrong host name", r"^host name 'localhost' does not match the broker's certificate "),
    ("wrong IP address", r"^IP address '127\.0\.0\.1' does not match the broker's "
                         r"certificate "),
    ("no client certificate", r"the broker at mqtts://localhost:\d+ requires a client "
                              r"certificate \(certFile/keyFile\)"),
    ("untrusted client certificate", r"the broker at mqtts://localhost:\d+ refused the "
                                     r"client certificate \(certFile '.*stranger\.crt'\)"),
    ("TLS to a plain port", r"^TLS handshake with mqtts://localhost:\d+ failed: .* \(is port "
                            r"\d+ a TLS listener\?\)$"),
])
def test_a_failed_tls_connection_says_why(tls_broker: TlsBroker, case: str,
                                          says: str) -> None:
    c = tls_broker.certs
    port, host, tls = tls_broker.mutual, "localhost", tls_broker.client_tls()
    if case == "wrong CA":
        tls = replace(tls, ca_file=str(c.other_ca))
    elif case == "system CA store":
        tls = replace(tls, ca_file=None)
    elif case == "wrong host name":
        port = tls_broker.misnamed
    elif case == "wrong IP address":
        port, host = tls_broker.misnamed, HOST
    elif case == "no client certificate":
        tls = replace(tls, cert_file=None, key_file=None)
    elif case == "untrusted client certificate":
        tls = replace(tls, cert_file=str(c.stranger_cert), key_file=str(c.stranger_key))
    else:
        port = tls_broker.plain
    sub = subscriber(port, tls, host=host)
    try:
        with pytest.raises(SubscriberError) as exc:
            sub.start()
    finally:
        sub.close()
    assert re.search(says, str(exc.value)), str(exc.value)
    assert sub.error is exc.value


def test_tls_insecure_connects_to_any_certificate_and_warns(tls_broker: TlsBroker) -> None:
    """tlsInsecure=true: no CA, and the misnamed broker certificate accepted, with an
    InsecureTLSWarning (Python's warnings)."""
    sub = subscriber(tls_broker.misnamed, TlsOptions(insecure=True), host=HOST,
                     client_id="tls-insecure")
    with pytest.warns(InsecureTLSWarning, match="tlsInsecure=true: the broker's "
                                                "certificate and host name are not checked"):
        sub.start()  # the context is made in the subscriber's thread: warned there
    try:
        publish(tls_broker.plain, "tls", [b"hello"])
        assert [r.message.payload for r in take(sub, 1)] == [b"hello"]
    finally:
        sub.close()


# ---------------------------------------------------------------------------------------
# The options (LiveOptions.parse needs pyspark: the live module is a Spark data source)

try:
    from mqttwire.spark.live import LiveOptions
except ImportError:  # no spark extra: the tests below fail, marked spark
    LiveOptions = None  # type: ignore[assignment,misc]


def parse(**options: str) -> Any:
    assert LiveOptions is not None, "pyspark is not installed"
    return LiveOptions.parse({"topics": "t", "clientId": "x", **options})


@pytest.mark.spark
@pytest.mark.parametrize(("url", "tls", "port"), [
    ("mqtts://h", True, 8883), ("ssl://h", True, 8883), ("MQTTS://h:9883", True, 9883),
    ("mqtt://h", False, 1883), ("tcp://h:1884", False, 1884),
])
def test_tls_schemes_and_their_ports(url: str, tls: bool, port: int) -> None:
    o = parse(url=url)
    assert (o.host, o.port, o.endpoint.port) == ("h", port, port)
    assert (o.endpoint.tls is not None) is tls and o.endpoint.ws_path is None
    if tls:  # the system's CA store, the host name checked
        assert o.endpoint.tls == TlsOptions()


@pytest.mark.spark
def test_tls_options_are_read(tmp_path: Path, certs: Certs) -> None:
    o = parse(url="mqtts://broker.example", caFile=str(certs.ca),
              certFile=str(certs.client_cert), keyfile=str(certs.client_key_encrypted),
              KEYPASSWORD=KEY_PASSWORD, tlsInsecure="false")
    assert o.endpoint == Endpoint("broker.example", 8883, TlsOptions(
        str(certs.ca), str(certs.client_cert), str(certs.client_key_encrypted),
        KEY_PASSWORD, False))
    assert KEY_PASSWORD not in repr(o.endpoint)
    # The key may be in certFile (one PEM file holding both).
    both = tmp_path / "both.pem"
    both.write_bytes(certs.client_cert.read_bytes() + certs.client_key.read_bytes())
    assert parse(url="ssl://h", certFile=str(both)).endpoint.tls.cert_file == str(both)


@pytest.mark.spark
@pytest.mark.parametrize(("options", "says"), [
    ({"url": "mqtt://h", "caFile": "ca.crt"},
     "option caFile is for TLS: use mqtts://, ssl:// or wss://, not mqtt://"),
    ({"url": "ws://h", "tlsInsecure": "true"}, "option tlsInsecure is for TLS"),
    ({"url": "mqtts://h", "tlsInsecure": "yes"},
     "option tlsInsecure must be true or false, not 'yes'"),
    ({"url": "mqtts://h", "caFile": "{tmp}/missing.crt"},
     "option caFile: no such file '{tmp}/missing.crt'"),
    ({"url": "mqtts://h", "keyFile": "{client_key}"},
     "option keyFile needs certFile (the client certificate that the key belongs to)"),
    ({"url": "mqtts://h", "keyPassword": "x"}, "option keyPassword needs certFile"),
    ({"url": "mqtts://h", "certFile": "{tmp}/none.crt"}, "option certFile: no such file"),
    ({"url": "mqtts://h", "caFile": "{client_key}"},
     "option caFile '{client_key}' holds no usable CA certificate (PEM)"),
    ({"url": "mqtts://h", "certFile": "{client_cert}", "keyFile": "{stranger_key}"},
     "cannot load the client certificate (certFile '{client_cert}', keyFile "
     "'{stranger_key}'): the key is not the certificate's"),
    ({"url": "mqtts://h", "certFile": "{client_cert}", "keyFile": "{encrypted}"},
     "the client key (certFile '{client_cert}', keyFile '{encrypted}') is encrypted: set "
     "option keyPassword"),
    ({"url": "mqtts://h", "certFile": "{client_cert}", "keyFile": "{encrypted}",
      "keyPassword": "wrong"}, "option keyPassword does not open the encrypted key"),
    ({"url": "mqtts://h", "certFile": "{ca}"},
     "cannot load the client certificate (certFile '{ca}'): not a PEM certificate and "
     "private key"),
    ({"url": "mqtts://h:99999"}, "bad port in url"),
    ({"url": "mqtts://h/path"}, "a path in the url is for ws:// and wss:// only"),
    ({"url": "http://h"}, "url must be mqtt://, mqtts://, ssl://, ws:// or wss://"),
])
def test_bad_tls_options(tmp_path: Path, certs: Certs, options: dict[str, str],
                         says: str) -> None:
    """Each a ValueError naming the option, before any connection (an encrypted key
    without its password would otherwise make OpenSSL ask on the terminal)."""
    paths = {"tmp": tmp_path, "ca": certs.ca, "client_cert": certs.client_cert,
             "client_key": certs.client_key, "stranger_key": certs.stranger_key,
             "encrypted": certs.client_key_encrypted}
    options = {k: v.format(**paths) for k, v in options.items()}
    with pytest.raises(ValueError, match=re.escape(says.format(**paths))):
        parse(**options)


# ---------------------------------------------------------------------------------------
# A query through Spark over TLS


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with live_spark() as session:
        yield session


#: The Spark query (about 20 s, and the session's start) runs in .ci/run's first pass
#: only: the subscriber under it is tested over TLS on both codecs above.
@pytest.mark.spark
@pytest.mark.once
def test_a_query_over_mutual_tls(spark: Any, tls_broker: TlsBroker) -> None:
    """The source's options as a user gives them: rows arrive in the query's table;
    then a query with the wrong CA fails, saying so."""
    from pyspark.errors import StreamingQueryException

    c = tls_broker.certs
    options = {"url": f"mqtts://localhost:{tls_broker.mutual}", "topics": "tls/#",
               "clientId": "tls-query", "caFile": str(c.ca), "certFile": str(c.client_cert),
               "keyFile": str(c.client_key_encrypted), "keyPassword": KEY_PASSWORD}
    query = (spark.readStream.format("mqtt").options(**options).load()
             .writeStream.format("memory").queryName("tls_rows")
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_in_log(tls_broker.broker, "Sending SUBACK to tls-query")
        payloads = [b"%d|" % n + bytes(range(256)) for n in range(20)]
        publish(tls_broker.plain, "tls", payloads)
        deadline = time.monotonic() + TIMEOUT
        # The rows the query has taken, from its progress reports (a count(*) of the
        # table would be a Spark job each time).
        while (n := sum(p["numInputRows"] for p in query.recentProgress)) < len(payloads):
            assert time.monotonic() < deadline and query.isActive, (n, query.exception())
            time.sleep(0.1)
        query.processAllAvailable()
        got = spark.sql("select topic, payload from tls_rows").collect()
        assert sorted(bytes(r.payload) for r in got) == sorted(payloads)
    finally:
        query.stop()
    query = (spark.readStream.format("mqtt").options(**{**options, "caFile": str(c.other_ca)})
             .load().writeStream.format("memory").queryName("tls_failed").start())
    try:
        with pytest.raises(StreamingQueryException) as exc:
            query.awaitTermination(60)
            pytest.fail("the query is still running after 60 s")
    finally:
        query.stop()
    assert "certificate verify failed: self-signed certificate in certificate chain" in str(
        exc.value)
    assert f"caFile '{c.other_ca}'" in str(exc.value)
