"""The codec's parts, behind its two entry modules (names fixed by the public API):
``mqttwire._pure`` (Python) and ``mqttwire._speedups`` (Cython, which includes the
``_c.pxi`` files here).

A name says which twin a file belongs to: ``X.py`` is Python and ``X_c.pxi`` its compiled
twin; a file without a ``_c`` twin is shared by both.  What one ``_c.pxi`` file uses of
another is declared in ``mqttwire/_speedups.pxd`` (tests/codec/test_includes.py keeps it so).

- ``packets.py`` / ``packets_c.pxi``: the 17 packet classes;
- ``encode.py`` / ``encode_c.pxi``: ``encode()`` and ``PreparedPublish`` (the packets'
  ``encode()`` methods in C: ``encode_method_c.pxi``);
- ``decode.py`` / ``decode_c.pxi``: ``decode()``, ``decode_from()``, the body decoders;
- ``stream.py`` / ``stream_c.pxi``: ``StreamDecoder``;
- ``properties.py`` / ``properties_c.pxi``: ``Properties`` and property blocks (§2.2.2);
- ``datatypes.py`` / ``datatypes_c.pxi``: the spec's data types (§1.5), the argument
  checks and the error builders;
- ``tables_c.pxi``: the C tables, filled at import from the shared Python tables;
- shared: ``reference.py`` (the reference decoders and encoders of CONNECT, CONNACK,
  SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, DISCONNECT and AUTH), ``publish.py`` (the
  reference encoders of PUBLISH and its acknowledgements), ``forwarding.py`` (one PUBLISH
  encoded once for many subscribers), ``framing.py`` (the fixed header, §2.1),
  ``fields.py`` (each packet's fields, ``==`` and repr), ``docstrings.py``.
"""
