"""The extension's include files are a real split: each uses only what it defines, what
``_speedups.pyx`` imports, or what ``_speedups.pxd`` declares.

``include`` pastes the files of ``mqttwire/_codec/*_c.pxi`` into one module, so Cython
would let any of them use any name of another; that is how the split rotted before (the
encoder used eleven names of the decoder's file).  The shared C declarations (the cdef
classes' C attributes and cdef methods, the cdef functions one include calls in another,
the C tables) live in ``mqttwire/_speedups.pxd``, which Cython includes in the module on
its own; this test reads the sources and fails, naming the file, the line and the name,
when an include uses a name that another include defines and the .pxd does not declare.

The reader below is a small lexer for the Cython the includes are written in, not a
Cython parser (Cython is a build dependency, absent from the test environment): it knows
top-level definitions (cdef/cpdef/def/class, ctypedef, struct, enum, module-level
assignments and for-loop targets), function locals (parameters, cdef declarations,
assignment, for, except-as and with-as targets) and attribute/keyword names, which are
not uses.  Names inside f-string fields are not seen (none refers to a global today).
The synthetic cases at the end prove that it catches what it is meant to catch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODEC = ROOT / "mqttwire" / "_codec"
PYX = ROOT / "mqttwire" / "_speedups.pyx"
PXD = ROOT / "mqttwire" / "_speedups.pxd"

# The source tree, not an installed wheel (which ships no .pyx/.pxi/.pxd): the pure pass
# deselects c_extension tests, and a wheel's test run, outside the tree, does not collect
# this module (tests/conftest.py).
pytestmark = pytest.mark.c_extension

_TOKEN = re.compile(
    r"""
    (?P<comment>\#[^\n]*)
  | (?P<string>[rRbBuUfF]{0,2}(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"
                              |'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>\.?\d[\w.]*)  # with C suffixes: 1ULL, 1u
  | (?P<name>[A-Za-z_]\w*)
  | (?P<newline>\\?\n)
  | (?P<space>[ \t\f]+)
  | (?P<op>==|!=|<=|>=|->|\*\*|//|<<|>>|\+=|-=|\|=|&=|\*=|[-+*/%&|^~<>()\[\]{}=.,:;@!?])
    """,
    re.VERBOSE,
)
_OPEN, _CLOSE = "([{", ")]}"
# Words that open a statement or qualify a type: never a reference to a definition.
_TYPE_WORDS = {"cdef", "cpdef", "inline", "const", "unsigned", "signed", "public",
               "readonly", "api", "extern", "from", "nogil", "noexcept", "except"}


@dataclass
class Tok:
    kind: str  # name, string, number, op
    text: str
    line: int
    col: int


@dataclass
class Stmt:
    """One logical line, its tokens and its indentation."""

    toks: list[Tok]
    indent: int

    @property
    def line(self) -> int:
        return self.toks[0].line

    def words(self) -> list[str]:
        return [t.text for t in self.toks]


def tokenize(text: str) -> list[Stmt]:
    """The logical lines of a Cython source, comments dropped."""
    stmts: list[Stmt] = []
    current: list[Tok] = []
    depth = 0
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SyntaxError(f"line {line}: cannot read {text[pos:pos + 20]!r}")
        kind, value = m.lastgroup, m.group()
        if kind == "newline":
            if depth == 0 and value == "\n" and current:
                stmts.append(Stmt(current, current[0].col))
                current = []
        elif kind not in ("comment", "space"):
            assert kind is not None
            current.append(Tok(kind, value, line, pos - line_start))
            if kind == "op" and value in _OPEN:
                depth += 1
            elif kind == "op" and value in _CLOSE:
                depth -= 1
        newlines = value.count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + value.rindex("\n") + 1
        pos = m.end()
    if current:
        stmts.append(Stmt(current, current[0].col))
    return stmts


def _split_top(toks: list[Tok], sep: str) -> list[list[Tok]]:
    """``toks`` split at ``sep`` tokens outside brackets."""
    parts: list[list[Tok]] = [[]]
    depth = 0
    for t in toks:
        if t.kind == "op" and t.text in _OPEN:
            depth += 1
        elif t.kind == "op" and t.text in _CLOSE:
            depth -= 1
        if depth == 0 and t.kind == "op" and t.text == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _declared_name(decl: list[Tok]) -> Tok | None:
    """The name a C declarator declares: the last name before its dimensions, its value or
    its C name string (``bint _T[3][256]``, ``object _V3 = 3``, ``int f "c_f"``)."""
    last = None
    for t in decl:
        if t.kind == "op" and t.text in ("[", "=", "("):
            break
        if t.kind == "string":
            break
        if t.kind == "name" and t.text not in ("not", "None", "or"):
            last = t
    return last


@dataclass
class Names:
    """What one source file defines at top level and which names it uses."""

    declared: dict[str, int] = field(default_factory=dict)  # cdef/def/class: line
    assigned: dict[str, int] = field(default_factory=dict)  # plain module assignment
    uses: list[tuple[str, int]] = field(default_factory=list)  # (name, line), not local

    @property
    def defined(self) -> set[str]:
        return set(self.declared) | set(self.assigned)


def _assign_targets(toks: list[Tok]) -> list[Tok]:
    """The names a statement binds with ``=`` (or an augmented assignment) at its start:
    ``a = ...``, ``a, (b, c) = ...``; [] when it is not such an assignment."""
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "op" and t.text in _OPEN:
            depth += 1
        elif t.kind == "op" and t.text in _CLOSE:
            depth -= 1
        elif depth == 0 and t.kind == "op" and t.text in ("=", "+=", "-=", "|=", "&=", "*="):
            head = toks[:i]
            if all(x.kind == "name" or (x.kind == "op" and x.text in ",()") for x in head):
                return [x for x in head if x.kind == "name"]
            return []
    return []


def _for_targets(toks: list[Tok]) -> list[Tok]:
    """The names of ``for a, b in`` headers and comprehension clauses in a statement."""
    out = []
    for i, t in enumerate(toks):
        if t.kind == "name" and t.text == "for":
            for x in toks[i + 1:]:
                if x.kind == "name" and x.text == "in":
                    break
                if x.kind == "name":
                    out.append(x)
    return out


def _as_targets(toks: list[Tok]) -> list[Tok]:
    """``except E as e`` / ``with x as y``."""
    return [toks[i + 1] for i, t in enumerate(toks[:-1])
            if t.kind == "name" and t.text == "as" and toks[i + 1].kind == "name"]


def _params(toks: list[Tok]) -> list[Tok]:
    """The parameter names of the first parenthesised list of a def/cdef header."""
    try:
        start = next(i for i, t in enumerate(toks) if t.text == "(")
    except StopIteration:
        return []
    depth, end = 0, start
    for end in range(start, len(toks)):
        if toks[end].text in _OPEN:
            depth += 1
        elif toks[end].text in _CLOSE:
            depth -= 1
            if depth == 0:
                break
    names = []
    for part in _split_top(toks[start + 1:end], ","):
        part = _split_top(part, "=")[0]
        name = _declared_name(part)
        if name is not None:
            names.append(name)
    return names


def _is_function_header(toks: list[Tok]) -> bool:
    """A def, or a cdef/cpdef with a parenthesised parameter list before any ``=``."""
    if toks[0].text == "def" or (toks[0].text == "async" and toks[1].text == "def"):
        return True
    if toks[0].text not in ("cdef", "cpdef") or "class" in [t.text for t in toks[:3]]:
        return False
    for i, t in enumerate(toks):
        if t.text == "=":
            return False
        if t.text == "(":
            return i > 0 and toks[i - 1].kind == "name" and toks[i - 1].text not in (
                "from", "extern")
    return False


def _block(stmts: list[Stmt], i: int) -> int:
    """The index just past the block that statement ``i`` opens (its deeper lines)."""
    j = i + 1
    while j < len(stmts) and stmts[j].indent > stmts[i].indent:
        j += 1
    return j


def read(text: str) -> Names:
    """The top-level definitions of a Cython source and its uses of non-local names."""
    stmts = tokenize(text)
    names = Names()
    _scan(stmts, 0, len(stmts), names, locals_=None, top=True)
    return names


def _uses(toks: list[Tok], skip: set[int], locals_: set[str] | None, names: Names) -> None:
    """Record the names ``toks`` refers to: not an attribute (after ``.``), not a keyword
    argument (``f(x=...)``), not a C number suffix, not a declared name (ids in ``skip``),
    not a local of the enclosing function."""
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "op" and t.text in _OPEN:
            depth += 1
        elif t.kind == "op" and t.text in _CLOSE:
            depth -= 1
        if t.kind != "name" or id(t) in skip or t.text in _TYPE_WORDS:
            continue
        prev = toks[i - 1] if i else None
        if prev is not None and prev.kind == "op" and prev.text == ".":
            continue
        if prev is not None and prev.kind == "number" and prev.line == t.line and (
                prev.col + len(prev.text) == t.col):
            continue
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if depth > 0 and nxt is not None and nxt.text == "=":
            continue
        if locals_ is not None and t.text in locals_:
            continue
        names.uses.append((t.text, t.line))


def _function_locals(stmts: list[Stmt], i: int, end: int) -> set[str]:
    """The names local to the function whose header is statement ``i`` (its block ends at
    ``end``): its parameters and every name its body binds."""
    local = {t.text for t in _params(stmts[i].toks)}
    for s in stmts[i + 1:end]:
        toks = s.toks
        if toks[0].text == "cdef":
            local.update(t.text for t in _cdef_declared(toks))
        else:
            local.update(t.text for t in _assign_targets(toks))
        local.update(t.text for t in _for_targets(toks))
        local.update(t.text for t in _as_targets(toks))
    return local


def _cdef_declared(toks: list[Tok]) -> list[Tok]:
    """The names a ``cdef TYPE a, b[4], c = x`` variable statement declares."""
    body = toks[1:]
    out = []
    for part in _split_top(body, ","):
        name = _declared_name(part)
        if name is not None:
            out.append(name)
    return out


def _scan(stmts: list[Stmt], start: int, end: int, names: Names, locals_: set[str] | None,
          top: bool) -> None:
    i = start
    while i < end:
        s = stmts[i]
        toks = s.toks
        words = s.words()
        block_end = _block(stmts, i) if words[-1] == ":" else i + 1
        block_end = min(block_end, end)
        comp = {t.text for t in _for_targets(toks)} if words[0] != "for" else set()
        here = (locals_ or set()) | comp if (locals_ is not None or comp) else None
        if words[0] == "@":
            _uses(toks, set(), here, names)
        elif words[0] in ("import", "from", "include", "cimport"):
            if top and words[0] != "include":
                # `from x cimport a, b` / `import x`: the names after (c)import
                k = next((k for k, w in enumerate(words) if w in ("import", "cimport")), 0)
                rest = toks[k + 1:]
                if rest and rest[0].text == "(":
                    rest = rest[1:-1]
                for part in _split_top(rest, ","):
                    bound = [t for t in part if t.kind == "name" and t.text != "as"]
                    if bound:
                        names.declared.setdefault(bound[-1].text, s.line)
        elif _is_function_header(toks):
            fname = toks[next(k for k, t in enumerate(toks) if t.text == "(") - 1]
            if words[0] == "def":
                fname = toks[1]
            if top:
                names.declared.setdefault(fname.text, s.line)
            params = _params(toks)
            skip = {id(fname)} | {id(p) for p in params}
            _uses(toks, skip, here, names)  # types and defaults
            local = _function_locals(stmts, i, block_end)
            _scan_body(stmts, i + 1, block_end, names, local)
            i = block_end
            continue
        elif words[:2] in (["cdef", "class"], ["class"] + words[1:2]) or (
                words[0] == "cdef" and "class" in words[:4]):
            k = words.index("class")
            if top:
                names.declared.setdefault(words[k + 1], s.line)
            _uses(toks[k + 2:], set(), here, names)  # the base classes
            _scan_class(stmts, i + 1, block_end, names)
            i = block_end
            continue
        elif words[0] in ("cdef", "ctypedef") and any(
                w in ("struct", "union", "enum") for w in words[1:3]):
            kw = next(k for k, w in enumerate(words) if w in ("struct", "union", "enum"))
            if kw + 1 < len(words) and toks[kw + 1].kind == "name" and top:
                names.declared.setdefault(words[kw + 1], s.line)
            for member in stmts[i + 1:block_end]:
                m_toks = member.toks
                if words[kw] == "enum":  # enum members are module names
                    for part in _split_top(m_toks, ","):
                        if part and part[0].kind == "name" and top:
                            names.declared.setdefault(part[0].text, member.line)
                        _uses(part[2:] if len(part) > 2 else [], set(), None, names)
                else:  # struct fields: types are uses, field names are not
                    declared = _cdef_declared([m_toks[0], *m_toks])
                    _uses(m_toks, {id(t) for t in declared}, None, names)
            i = block_end
            continue
        elif words[0] == "cdef" and words[1:3] == ["extern", "from"]:
            _uses(toks, set(), None, names)
            for member in stmts[i + 1:block_end]:
                m_toks = member.toks
                if m_toks[0].kind == "string":
                    continue  # the verbatim C
                if _is_function_header([Tok("name", "cdef", 0, 0), *m_toks]):
                    k = next(k for k, t in enumerate(m_toks) if t.text == "(")
                    declared = [m_toks[k - 1]]
                    skip = {id(declared[0])} | {id(p) for p in _params(m_toks)}
                else:
                    declared = _cdef_declared([m_toks[0], *m_toks])
                    skip = {id(t) for t in declared}
                for t in declared:
                    if top:
                        names.declared.setdefault(t.text, member.line)
                _uses(m_toks, skip, set(), names)
            i = block_end
            continue
        elif words[0] in ("cdef", "ctypedef"):
            declared = _cdef_declared(toks)
            if words[0] == "ctypedef":
                declared = declared[-1:]
            for t in declared:
                if top:
                    names.declared.setdefault(t.text, s.line)
                elif locals_ is not None:
                    pass
            _uses(toks, {id(t) for t in declared}, here, names)
        else:
            targets = _assign_targets(toks) + (_for_targets(toks) if words[0] == "for" else [])
            for t in targets:
                if top:
                    names.assigned.setdefault(t.text, s.line)
            # An assignment at module level also uses the name (a cdef variable of another
            # file would be what it assigns); in a function, a target is a local.
            _uses(toks, set(), here, names)
            if words[-1] == ":":  # a module-level for/if/try block: its body is module code
                _scan(stmts, i + 1, block_end, names, locals_, top)
                i = block_end
                continue
        i += 1


def _scan_body(stmts: list[Stmt], start: int, end: int, names: Names, local: set[str]) -> None:
    for s in stmts[start:end]:
        toks = s.toks
        skip: set[int] = set()
        if toks[0].text == "cdef":
            skip = {id(t) for t in _cdef_declared(toks)}
        _uses(toks, skip, local, names)


def _scan_class(stmts: list[Stmt], start: int, end: int, names: Names) -> None:
    """A class body: methods are functions; ``cdef`` lines declare C attributes and
    assignments set class attributes (neither is a use of the declared name)."""
    i = start
    while i < end:
        s = stmts[i]
        toks = s.toks
        block_end = min(_block(stmts, i) if s.words()[-1] == ":" else i + 1, end)
        if toks[0].text == "@":
            _uses(toks, set(), None, names)
        elif _is_function_header(toks):
            _scan(stmts, i, block_end, names, None, top=False)
            i = block_end
            continue
        elif toks[0].text == "cdef":
            _uses(toks, {id(t) for t in _cdef_declared(toks)}, None, names)
        elif toks[0].kind == "string":
            pass  # the docstring
        else:
            targets = _assign_targets(toks)
            _uses(toks, {id(t) for t in targets}, None, names)
        i = block_end if block_end > i + 1 else i + 1


def includes(pyx_text: str) -> list[str]:
    """The files ``include``d by a .pyx, in order."""
    return [s.toks[1].text.strip("\"'") for s in tokenize(pyx_text)
            if s.toks[0].text == "include"]


def crossings(files: dict[str, str], header: str = "", pxd: str = "") -> list[str]:
    """Every use, in one of ``files`` (name -> source), of a name that another of them
    defines and ``pxd`` does not declare; and every top-level name that two of them
    define (they share one module namespace).  ``header``: the .pyx whose imports all may
    use.  Each finding is a line of text naming the file, the line and the name."""
    read_files = {name: read(text) for name, text in files.items()}
    allowed = read(header).defined | read(pxd).defined
    owner: dict[str, str] = {}
    problems = []
    for name, found in read_files.items():
        for defined in sorted(found.defined):
            if defined in owner and defined not in allowed:
                problems.append(f"{name}: {defined!r} is also defined in {owner[defined]}")
            owner.setdefault(defined, name)
    for name, found in read_files.items():
        seen = set()
        for used, line in found.uses:
            where = owner.get(used)
            if where is None or where == name or used in allowed or used in found.declared:
                continue
            if (used, where) in seen:
                continue
            seen.add((used, where))
            problems.append(f"{name}:{line}: uses {used!r}, defined in {where} and not "
                            "declared in _speedups.pxd")
    return problems


def _sources() -> dict[str, str]:
    pyx = PYX.read_text()
    return {path: (PYX.parent / path).read_text() for path in includes(pyx)}


def test_every_include_is_read() -> None:
    """The files the module includes are the eight of _codec/, each with definitions (so
    a change that the reader stopped understanding fails here, not silently)."""
    files = _sources()
    assert [Path(p).name for p in files] == [
        "tables_c.pxi", "datatypes_c.pxi", "properties_c.pxi", "packets_c.pxi",
        "encode_c.pxi", "encode_method_c.pxi", "decode_c.pxi", "stream_c.pxi"]
    for path, text in files.items():
        assert read(text).declared, path


def test_includes_use_only_their_own_names_and_the_pxd() -> None:
    problems = crossings(_sources(), PYX.read_text(), PXD.read_text() if PXD.exists() else "")
    assert not problems, "\n" + "\n".join(problems)


# The reader itself: synthetic includes, each with the finding it must (or must not) give.

A = '''
cdef int _TABLE[4]
cdef object _helper(int x):
    """A docstring naming _other, which is not a use."""
    return x
cdef class Box:
    cdef public object value
    cdef int size(self)
'''


@pytest.mark.parametrize(("b", "found"), [
    ("cdef object f():\n    return _helper(1)\n", ["b.pxi:2: uses '_helper'"]),
    ("cdef int g(int i):\n    return _TABLE[i]\n", ["b.pxi:2: uses '_TABLE'"]),
    ("cdef object h(Box b):\n    return b.value\n", ["b.pxi:1: uses 'Box'"]),
    ("cdef object h(object b):\n    return (<Box>b).value\n", ["b.pxi:2: uses 'Box'"]),
    ("for _i in range(4):\n    _TABLE[_i] = 0\n", ["b.pxi:2: uses '_TABLE'"]),
    ("X = Box.__new__(Box)\n", ["b.pxi:1: uses 'Box'"]),
    ("cdef object _helper(int y):\n    return y\n", ["b.pxi: '_helper' is also defined"]),
    # Not uses: an attribute, a keyword argument, a local, a parameter, a comment.
    ("cdef object k(object o):\n    return o._helper\n", []),
    ("cdef object k(object o):\n    return o(value=1, size=2)\n", []),
    ("cdef object k():\n    cdef int _TABLE = 1\n    return _TABLE\n", []),
    ("cdef object k(int _helper):\n    return _helper  # _TABLE\n", []),
    ("cdef object k():\n    for Box in ():\n        pass\n", []),
])
def test_reader_finds_a_crossing(b: str, found: list[str]) -> None:
    problems = crossings({"a.pxi": A, "b.pxi": b})
    assert len(problems) == len(found), problems
    for problem, expected in zip(problems, found):
        assert problem.startswith(expected), problems


def test_reader_accepts_what_the_pxd_declares() -> None:
    pxd = "cdef object _helper(int x)\ncdef class Box:\n    cdef public object value\n"
    b = "cdef object f(Box b):\n    return _helper(1)\n"
    assert crossings({"a.pxi": A, "b.pxi": b}) != []
    assert crossings({"a.pxi": A, "b.pxi": b}, pxd=pxd) == []


def test_reader_accepts_the_pyx_imports() -> None:
    b = "cdef object f():\n    return memcpy\n"
    a = A + "cdef object memcpy = None\n"
    assert crossings({"a.pxi": a, "b.pxi": b}) != []
    assert crossings({"a.pxi": a, "b.pxi": b},
                     header="from libc.string cimport memcpy\n") == []
