"""Docstrings that both twins give a class, written once.

A text here is the ``__doc__`` of the class of that name in ``_pure`` and in
``_speedups``: the pure class assigns it in its body, and the Cython class does the same
(Cython sets a ``cdef class``'s ``__doc__`` from a class-body assignment when the class
has no docstring literal of its own).  tests/test_parity.py still compares the two.
"""

from __future__ import annotations

__all__ = ["STREAM_DECODER"]

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
