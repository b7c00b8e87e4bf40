# cython: language_level=3, freethreading_compatible=True
"""C twin of ``_topics``: topic validation and matching, and the subscription tree.

Everything here behaves as ``_topics.py`` does, and the tests run both.  It does not
import ``_topics``: what the twins share (the check functions that word every error, the
Shared Subscription form, the TopicTree value check, ``Matches``) is in ``_topic_rules``.

- Validation is a C scan over the code points of the ``str`` (``PyUnicode_READ``, no
  copy) that recognises what is certainly valid.  Anything else goes to
  ``_topic_rules.check_topic_*``, which accepts it or raises: so the twins accept the same
  strings and raise the same errors by construction, and error paths stay cold.
- ``topic_matches`` compares the levels in C, code point by code point.
- ``TopicTree`` has the same structure and algorithms as ``_topics.TopicTree`` with typed
  nodes, so the walk in ``match`` reads C fields instead of Python attributes
  (benchmarks/bench_topics.py measures both).

The scans need an exact ``str``: a ``str`` subclass is first copied to a plain one
(matches ``_topics``, which accepts subclasses through ``isinstance``).
"""

cimport cython

# The C API declarations, shared with the codec (mqttwire/_cdefs.pxd).
from ._cdefs cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ

from ._codec.docstrings import TOPIC_TREE as _TOPIC_TREE_DOC
from ._errors import ProtocolError
from ._topic_rules import (
    SHARE, Matches, check_topic_filter, check_topic_name, qos_of, split_shared
)
from ._codec.datatypes import check_version

__all__ = [
    "validate_topic_name",
    "validate_topic_filter",
    "topic_matches",
    "parse_shared",
    "TopicTree",
    "Matches",
]

cdef enum:
    MAX_TOPIC_BYTES = 65535  # [MQTT-4.7.3-3]
    SLASH = 0x2F  # '/'
    PLUS = 0x2B  # '+'
    HASH = 0x23  # '#'
    DOLLAR = 0x24  # '$'

# The shared rules' cold paths (_topic_rules), called when something may be wrong.
cdef object _check_topic_name = check_topic_name
cdef object _check_topic_filter = check_topic_filter
cdef object _split_shared = split_shared
cdef object _qos_of = qos_of
cdef str _SHARE = SHARE


# ---------------------------------------------------------------------------------------
# Scans


cdef inline int _utf8_width(Py_UCS4 c) noexcept:
    """Bytes of ``c`` in UTF-8, or 0 for what a topic cannot hold: U+0000
    [MQTT-1.5.4-2] and surrogates, which UTF-8 cannot encode [MQTT-1.5.4-1]."""
    if c < 0x80:
        return 1 if c else 0
    if c < 0x800:
        return 2
    if c < 0x10000:
        return 0 if 0xD800 <= c <= 0xDFFF else 3
    return 4


cdef bint _name_is_valid(str name) noexcept:
    """True when ``name`` is certainly a valid topic name."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(name), i, size = 0
    cdef int kind = PyUnicode_KIND(name), width
    cdef const void *data = PyUnicode_DATA(name)
    cdef Py_UCS4 c
    if n == 0 or n > MAX_TOPIC_BYTES:  # each code point takes at least one byte
        return False
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        width = _utf8_width(c)
        if width == 0 or c == PLUS or c == HASH:
            return False
        size += width
    return size <= MAX_TOPIC_BYTES


cdef bint _filter_is_valid(str filter) noexcept:
    """True when ``filter`` is certainly a valid topic filter, the Shared Subscription
    form aside: '+' alone in its level, '#' alone in the last level."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(filter), i, size = 0
    cdef int kind = PyUnicode_KIND(filter), width
    cdef const void *data = PyUnicode_DATA(filter)
    cdef Py_UCS4 c, prev = SLASH  # as if a separator came before the first level
    if n == 0 or n > MAX_TOPIC_BYTES:
        return False
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        width = _utf8_width(c)
        if width == 0:
            return False
        if prev == PLUS and c != SLASH:  # '+' ends its level...
            return False
        if c == PLUS or c == HASH:
            if prev != SLASH:  # ...and starts it, and so does '#'
                return False
            if c == HASH and i != n - 1:  # which ends the filter
                return False
        size += width
        prev = c
    return size <= MAX_TOPIC_BYTES


cdef inline bint _is_shared(str filter):
    # matches _topic_rules.is_shared: the first level is "$share"
    return filter.startswith("$share/") or filter == _SHARE


cdef bint _matches(str filter, str name) noexcept:
    """The level by level comparison of _topics.topic_matches, for a filter that is not
    in the shared form."""
    cdef Py_ssize_t fn = PyUnicode_GET_LENGTH(filter), nn = PyUnicode_GET_LENGTH(name)
    cdef int fkind = PyUnicode_KIND(filter), nkind = PyUnicode_KIND(name)
    cdef const void *fdata = PyUnicode_DATA(filter)
    cdef const void *ndata = PyUnicode_DATA(name)
    cdef Py_ssize_t i = 0, j = 0, fend, nend, k
    cdef bint name_done = False  # the name's last level is behind us
    cdef Py_UCS4 first
    if fn and nn and PyUnicode_READ(nkind, ndata, 0) == DOLLAR:
        first = PyUnicode_READ(fkind, fdata, 0)
        if first == PLUS or first == HASH:
            return False  # [MQTT-4.7.2-1]
    while True:
        # The current levels start at i in the filter and j in the name.
        fend = i
        while fend < fn and PyUnicode_READ(fkind, fdata, fend) != SLASH:
            fend += 1
        if fend - i == 1 and PyUnicode_READ(fkind, fdata, i) == HASH:
            return True  # '#': this level and everything below, or nothing ("a/#", "a")
        if name_done:
            return False  # the filter has more levels than the name
        nend = j
        while nend < nn and PyUnicode_READ(nkind, ndata, nend) != SLASH:
            nend += 1
        if not (fend - i == 1 and PyUnicode_READ(fkind, fdata, i) == PLUS):
            if fend - i != nend - j:
                return False
            for k in range(fend - i):
                if PyUnicode_READ(fkind, fdata, i + k) != PyUnicode_READ(nkind, ndata, j + k):
                    return False
        if fend == fn:
            return nend == nn
        i = fend + 1
        if nend == nn:
            name_done = True
        else:
            j = nend + 1


cdef inline str _exact_str(object value, str field):
    if type(value) is str:
        return <str>value
    if isinstance(value, str):
        return str.__str__(value)  # a plain copy of a subclass's text
    raise TypeError(f"{field} must be str, not {type(value).__name__}")


cdef inline int _check_version(object version) except -1:
    # The usual values in C; anything else to _codec.datatypes.check_version, the one check and
    # message for a bad level in both twins and both codecs.
    if not (version == 3 or version == 4 or version == 5):
        check_version(version)  # raises
    return 0


# ---------------------------------------------------------------------------------------
# Public functions.  The docstrings are copies of _topics' (tests/topics/test_topics.py,
# test_api_parity, checks that they stay equal).


def validate_topic_name(name, *, version=5):
    """Check that ``name`` is a valid Topic Name, as the PUBLISH decoder would.

    A Topic Name is 1 to 65,535 bytes of well-formed UTF-8 [MQTT-4.7.3-1] [MQTT-4.7.3-3]
    without U+0000 [MQTT-4.7.3-2] and without the wildcards ``+`` and ``#``
    [MQTT-3.3.2-2].  (An MQTT 5.0 PUBLISH may carry an empty Topic Name with a Topic
    Alias; that is the packet's business: resolve the alias, then validate the name.)

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: ``version`` is not 3, 4 or 5.
        MalformedPacket: with packet type "PUBLISH", the rule the given protocol level
            numbers, and ``offset`` the byte offset of the problem within the UTF-8 of
            ``name``.
    """
    cdef str text = _exact_str(name, "topic name")
    _check_version(version)
    if not _name_is_valid(text):
        _check_topic_name(text, "PUBLISH", 0, version)


def validate_topic_filter(filter, *, version=5):
    """Check that ``filter`` is a valid Topic Filter, as the SUBSCRIBE decoder would.

    The string rules of topic names apply (1 to 65,535 bytes of UTF-8, no U+0000);
    ``+`` must be a whole level and ``#`` the whole last level (MQTT 3.1.1
    [MQTT-4.7.1-2] [MQTT-4.7.1-3], MQTT 5.0 [MQTT-4.7.1-1] [MQTT-4.7.1-2]).  With
    ``version=5`` a filter whose first level is ``$share`` must also be a well-formed
    Shared Subscription (see :func:`parse_shared`); at levels 3 and 4 it is an ordinary
    filter.

    Raises:
        TypeError: ``filter`` is not a str.
        ValueError: ``version`` is not 3, 4 or 5.
        MalformedPacket: with packet type "SUBSCRIBE" and ``offset`` the byte offset of the
            problem within the UTF-8 of ``filter``.
        ProtocolError: a malformed Shared Subscription (version 5 only), likewise.
    """
    cdef str text = _exact_str(filter, "topic filter")
    _check_version(version)
    if not _filter_is_valid(text) or (version == 5 and _is_shared(text)):
        _check_topic_filter(text, "SUBSCRIBE", 0, version)


def parse_shared(filter):
    """Split a Shared Subscription's filter ``$share/{ShareName}/{filter}``.

    Returns ``(share_name, inner_filter)``, or None when the first level of ``filter`` is
    not ``$share`` (an ordinary filter).  Only the shared form is checked here; the inner
    filter's own rules are :func:`validate_topic_filter`'s.

    Raises:
        TypeError: ``filter`` is not a str.
        ProtocolError: the ShareName is missing or empty [MQTT-4.8.2-1], holds ``+`` or
            ``#``, or is not followed by ``/`` and a non-empty filter [MQTT-4.8.2-2];
            packet type "SUBSCRIBE", ``offset`` in bytes within ``filter``.
    """
    cdef str text = _exact_str(filter, "topic filter")
    if not _is_shared(text):
        return None
    return _split_shared(text, "SUBSCRIBE", 0)


def topic_matches(filter, name):
    """Whether the Topic Filter ``filter`` matches the Topic Name ``name``.

    ``+`` matches exactly one level (an empty one too: ``a/+`` matches ``a/``), ``#``
    matches its parent level and any number of levels below (``a/#`` matches ``a``,
    ``a/b`` and ``a/b/c``).  A filter starting with ``+`` or ``#`` does not match a name
    starting with ``$`` [MQTT-4.7.2-1].  A Shared Subscription ``$share/{ShareName}/{f}``
    matches what its inner filter ``f`` matches; a malformed one (see
    :func:`parse_shared`) matches nothing.

    Neither argument is validated (call :func:`validate_topic_filter` and
    :func:`validate_topic_name` for that); for any strings the result is the level by
    level comparison above, where only whole ``+`` and ``#`` levels are wildcards and a
    ``#`` level matches everything from its position on.

    Raises:
        TypeError: an argument is not a str.
    """
    cdef str text = _exact_str(filter, "topic filter")
    cdef str topic = _exact_str(name, "topic name")
    if _is_shared(text):
        try:
            text = _split_shared(text, "SUBSCRIBE", 0)[1]
        except ProtocolError:
            return False
    return _matches(text, topic)


# ---------------------------------------------------------------------------------------
# The subscription tree (comments on the algorithms: _topics.TopicTree)


@cython.final
@cython.freelist(64)
cdef class _Node:
    cdef dict children  # level text -> _Node ("+" and "#" are ordinary keys)
    cdef dict values  # key -> value of the ordinary subscriptions ending here, or None
    cdef dict qos  # key -> their QoS, or None
    cdef dict shared  # share name -> {key -> value} of those ending here, or None
    cdef str filter  # the (inner) filter ending here, once a subscription does

    def __cinit__(self):
        self.children = {}


cdef class TopicTree:
    # The docstring, shared with the pure twin (a class-body assignment: see _codec.docstrings).
    __doc__ = _TOPIC_TREE_DOC

    cdef _Node _root
    cdef Py_ssize_t _count
    cdef dict _filters  # key -> the set of its filters

    def __cinit__(self):
        # In __cinit__, so that no subclass can skip it: the methods trust _root.
        self._root = _Node()
        self._count = 0
        self._filters = {}

    def __init__(self):
        # Takes no arguments, as the pure twin's does (__cinit__ alone would ignore them).
        pass

    def __len__(self):
        """The number of subscriptions (each (filter, key) once)."""
        return self._count

    @cython.critical_section
    def __iter__(self):
        """Every subscription as ``(filter, key, value)``, in no particular order.  The
        iterator runs over a snapshot, so the tree may change meanwhile."""
        cdef list out = []
        cdef _Node node
        cdef list stack = [self._root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.values:
                out.extend([(node.filter, key, value) for key, value in node.values.items()])
            if node.shared:
                for share, members in node.shared.items():
                    full = f"{_SHARE}/{share}/{node.filter}"
                    out.extend([(full, key, value) for key, value in (<dict>members).items()])
        return iter(out)

    @cython.critical_section
    def insert(self, filter, key, value):
        """Subscribe ``key`` to ``filter`` with ``value``, replacing the value of an
        existing subscription of ``key`` to the same filter.

        Returns:
            True when the subscription is new, False when it replaced one (a broker needs
            this for Retain Handling 1, MQTT 5.0 §3.8.3.1).

        Raises:
            TypeError, MalformedPacket, ProtocolError: ``filter`` is not a valid MQTT 5.0
                topic filter (see :func:`validate_topic_filter`).
            TypeError, ValueError: no QoS 0..2 can be read from ``value``.
        """
        validate_topic_filter(filter, version=5)
        cdef str text = _exact_str(filter, "topic filter")
        qos = _qos_of(value)
        hash(key)  # an unhashable key fails here, before any node is made
        cdef tuple shared = _split_shared(text, "SUBSCRIBE", 0) if _is_shared(text) else None
        cdef str inner = text if shared is None else shared[1]
        cdef _Node node = self._root, child
        cdef dict table
        cdef set filters
        for level in inner.split("/"):
            child = node.children.get(level)
            if child is None:
                child = _Node()
                node.children[level] = child
            node = child
        node.filter = inner
        if shared is None:
            if node.values is None:
                node.values, node.qos = {}, {}
            table = node.values
            node.qos[key] = qos
        else:
            if node.shared is None:
                node.shared = {}
            table = node.shared.setdefault(shared[0], {})
        added = key not in table
        table[key] = value
        if added:
            filters = self._filters.get(key)
            if filters is None:
                filters = self._filters[key] = set()
            filters.add(text)
            self._count += 1
        return added

    @cython.critical_section
    def remove(self, filter, key):
        """Unsubscribe ``key`` from ``filter``.  Nodes left empty are removed.

        Returns:
            Whether there was such a subscription.
        """
        return self._remove(filter, key)

    cdef bint _remove(self, object filter, object key) except -1:
        cdef set filters = self._filters.get(key)
        if filters is None or filter not in filters:
            return False
        # Only filters that insert() validated get here.
        cdef str text = _exact_str(filter, "topic filter")
        cdef tuple shared = _split_shared(text, "SUBSCRIBE", 0) if _is_shared(text) else None
        cdef str inner = text if shared is None else shared[1]
        cdef list levels = inner.split("/")
        cdef list path = [self._root]
        cdef _Node node = self._root
        cdef dict members
        cdef Py_ssize_t depth
        for level in levels:
            node = node.children[level]
            path.append(node)
        if shared is None:
            del node.values[key], node.qos[key]
            if not node.values:
                node.values = node.qos = None
        else:
            members = node.shared[shared[0]]
            del members[key]
            if not members:
                del node.shared[shared[0]]
                if not node.shared:
                    node.shared = None
        for depth in range(len(levels), 0, -1):
            node = path[depth]
            if node.children or node.values or node.shared:
                break
            del (<_Node>path[depth - 1]).children[levels[depth - 1]]
        filters.discard(text)
        if not filters:
            del self._filters[key]
        self._count -= 1
        return True

    @cython.critical_section
    def remove_key(self, key):
        """Remove every subscription of ``key`` (a client whose session ended).

        Returns:
            How many were removed.
        """
        cdef list filters = list(self._filters.get(key, ()))
        for filter in filters:
            self._remove(filter, key)
        return len(filters)

    cdef list _collect(self, str name):
        # The nodes whose filters match ``name``; the stack holds (node, depth) pairs
        # flattened, node first.
        cdef list levels = name.split("/")
        cdef Py_ssize_t count = len(levels), depth
        cdef list found = []
        cdef list stack = []
        cdef _Node node
        cdef dict children = self._root.children
        cdef object child
        child = children.get(levels[0])
        if child is not None:
            stack.append(child)
            stack.append(1)
        if not name.startswith("$"):  # [MQTT-4.7.2-1]
            child = children.get("#")
            if child is not None:
                found.append(child)
            child = children.get("+")
            if child is not None:
                stack.append(child)
                stack.append(1)
        while stack:
            depth = stack.pop()
            node = stack.pop()
            children = node.children
            if children:
                child = children.get("#")
                if child is not None:
                    found.append(child)
            if depth == count:
                found.append(node)
                continue
            if children:
                child = children.get(levels[depth])
                if child is not None:
                    stack.append(child)
                    stack.append(depth + 1)
                child = children.get("+")
                if child is not None:
                    stack.append(child)
                    stack.append(depth + 1)
        return found

    @cython.critical_section
    def match(self, name):
        """The subscriptions matching the topic name ``name``.

        Each ordinary subscriber comes once, with the value of its matching subscription
        of highest QoS: a message matching overlapping subscriptions is delivered at their
        maximum QoS (MQTT 3.1.1 [MQTT-3.3.5-1], MQTT 5.0 [MQTT-3.3.4-2]).  Among equal
        QoS, which value is returned is unspecified.  Shared Subscription groups come
        separately, each with all its members (see :class:`Matches`); they are not merged
        with the ordinary subscriptions.  Use :meth:`match_all` to see every matching
        subscription (for instance to send all Subscription Identifiers, [MQTT-3.3.4-3]).

        ``name`` is not validated (see :func:`validate_topic_name`); the result is what
        :func:`topic_matches` says for each stored filter.
        """
        cdef str topic = _exact_str(name, "topic name")
        cdef list found = self._collect(topic)
        cdef dict values, best, groups = {}, node_values
        cdef _Node node, largest = None
        cdef Py_ssize_t size = 0
        cdef object held
        for node in found:
            if node.values and len(node.values) > size:
                largest, size = node, len(node.values)
            if node.shared:
                for share, members in node.shared.items():
                    groups[(share, node.filter)] = (<dict>members).copy()
        if largest is None:
            return Matches({}, groups)
        values, best = largest.values.copy(), largest.qos.copy()
        for node in found:
            if node.values and node is not largest:
                node_values = node.values
                for key, qos in node.qos.items():
                    held = best.get(key)
                    if held is None or qos > held:
                        best[key] = qos
                        values[key] = node_values[key]
        return Matches(values, groups)

    @cython.critical_section
    def match_all(self, name):
        """Every subscription matching ``name``, as ``(filter, key, value)``, without
        merging a subscriber's overlapping subscriptions; shared ones appear with their
        full ``$share/...`` filter.  Each subscription comes once, in no particular order.
        """
        cdef str topic = _exact_str(name, "topic name")
        cdef set seen = set()
        cdef list out = []
        cdef _Node node
        for node in self._collect(topic):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.values:
                out.extend([(node.filter, key, value) for key, value in node.values.items()])
            if node.shared:
                for share, members in node.shared.items():
                    full = f"{_SHARE}/{share}/{node.filter}"
                    out.extend([(full, key, value) for key, value in (<dict>members).items()])
        return out

    @cython.critical_section
    def _node_count(self):
        """How many nodes the tree holds, the root included (for leak tests)."""
        cdef Py_ssize_t count = 0
        cdef list stack = [self._root]
        cdef _Node node
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count
