"""Docstrings that both twins give a class, written once.

A text here is the ``__doc__`` of the class of that name in both twins (``_pure`` and
``_speedups``; for ``TOPIC_TREE``, ``_topics`` and ``_topics_c``).  The pure class assigns
it in its body, and the Cython class does the same: Cython makes a class-body assignment
to ``__doc__`` the ``cdef class``'s docstring when the class has no docstring literal of
its own.  tests/codec/test_parity.py still compares the two.
"""

from __future__ import annotations

__all__ = ["PREPARED_PUBLISH", "STREAM_DECODER", "TOPIC_TREE"]

STREAM_DECODER = """Decodes a byte stream (one direction of a connection) into packets, whatever the
    chunking.

    ``version`` is the protocol level; None makes a server-side decoder that learns it from
    the CONNECT that must come first [MQTT-3.1.0-1] (and refuses a second one
    [MQTT-3.1.0-2]).  ``version`` stays readable and writable: a client-side decoder can be
    told the level after the fact.  ``max_packet_size`` (whole packet, fixed header
    included) is enforced from the fixed header alone, before the body is buffered.

    Memory: at most one incomplete packet is kept between calls.  After an error the
    decoder is broken for good: every later ``feed()`` raises the same error, since a
    stream that lost its framing cannot be trusted again.  The error's ``offset`` is its
    position in the whole stream, and its ``packets`` the packets that the failing call
    completed before the bad bytes.

    Not thread-safe: use one decoder per connection and thread.
    """

PREPARED_PUBLISH = """A PUBLISH prepared for forwarding to many subscribers.

    A broker sends one incoming message to every matching subscriber, each with its own
    QoS (the lower of the message's and the subscription's), packet identifier, RETAIN flag
    (0 to established subscriptions [MQTT-3.3.1-9], 1 for retained messages sent because a
    subscription was just made [MQTT-3.3.1-8], as published under v5 Retain As Published),
    DUP flag (decided afresh [MQTT-3.3.1-3]) and, in MQTT 5.0, subscription identifiers.
    ``PreparedPublish(publish)`` validates and encodes the topic, the properties and the
    payload once; ``encode()`` then writes each subscriber's packet, copying those bytes
    once and re-validating nothing.

    Forwarded properties are the message's own minus the Topic Alias (an alias belongs to
    one connection, MQTT 5.0 §3.3.2.3.4) and minus any subscription identifiers (the
    subscriber's own are added by ``encode()``).  A level 3/4 subscriber gets no
    properties; a v5 subscriber of a level 3/4 message gets an empty property block.  The
    topic must be the real topic: resolve an incoming alias first.
    """

TOPIC_TREE = """A subscription store for brokers: topic filters in a tree of levels, with ``+``
    and ``#`` children, so that matching a topic name visits only the branches that can
    match it, however many subscriptions there are.

    Each subscription is a ``(filter, key, value)``: ``key`` names the subscriber
    (typically its client identifier; any hashable), ``value`` is what the broker wants
    back (a ``Subscription``, the granted QoS, ...).  The tree reads the subscription's
    QoS from the value: the value itself when it is an int, else its ``qos`` attribute
    (so ``mqttwire.Subscription`` objects work as they are).  A subscriber has at most one
    subscription per filter: inserting again replaces it [MQTT-3.8.4-3].

    Filters whose first level is ``$share`` are Shared Subscriptions (MQTT 5.0 §4.8.2),
    whatever protocol level the subscriber speaks, as most brokers do; they are matched
    on their inner filter and reported per group by :meth:`match`.

    Not thread-safe: guard a tree shared between threads with a lock.  (The C twin
    serialises the calls on one tree on free-threaded builds, so that misuse there cannot
    crash the process, but that does not make a sequence of calls atomic.)
    """
