"""The XML form of every protocol type, as the WSDL declares it: the JSON codec's twin.

Reading turns an element into the JSON codec's plain data (``xsi:type`` becomes
``"$type"``, text becomes numbers and booleans by the declared field types), which
``codec.decode`` then validates exactly as for JSON, so both bindings refuse the same
requests with the same faults.  Writing turns the codec's plain data into XML text.

The schemas are ``elementFormDefault="unqualified"``: only the operation's element and
a fault's element (global elements) are in a namespace; the fields' elements are in
none, whichever type declares them (docs/soap-binding.md says why).  Reading also
accepts a field in the namespace of the type that declares it, the form of the WSDLs
before (``elementFormDefault="qualified"``), so messages written for those still work.
"""

import re
from collections.abc import Iterator
from functools import cache
from typing import Any
from xml.sax.saxutils import escape

from lxml import etree

from ..payload.form import integers_text
from ..payload.stream import Packed
from ..protocol.codec import TYPE_KEY, field_path, shown
from ..protocol.faults import InvalidValueFault
from ..protocol.typeinfo import BOOL, FLOAT, INT, OBJ, Field, lineage, original, subtypes

XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSI_TYPE = f"{{{XSI}}}type"
XSI_NIL = f"{{{XSI}}}nil"


@cache
def plan(cls: type) -> tuple[tuple[str, Field, str], ...]:
    """[(name, field, namespace)] of a complex type, base fields first; the namespace
    is the one of the class that declares the field."""
    return tuple(
        (name, Field(name, spyne_type), c.get_namespace())
        for c in lineage(cls)
        for name, spyne_type in c._type_info.items()
    )


# --------------------------------------------------------------------------- read


def read(elem: etree._Element, cls: type) -> tuple[dict[str, Any], dict[str, str]]:
    """An element as ``(data, sent)``: the JSON codec's plain data for type ``cls``, and
    the text of each number whose value the codec would show otherwise ({path: text},
    e.g. ``{"orders[0].location.lat": "95"}`` for 95.0), so that a fault names the
    value as it was sent (``codec.decode(data, cls, sent=sent)``)."""
    sent: dict[str, str] = {}
    return _read(elem, cls, "", sent), sent


def _read(elem: etree._Element, declared: type, path: str, sent: dict[str, str]) -> dict[str, Any]:
    cls: Any = original(declared)  # a spyne class: its methods are untyped
    data: dict[str, Any] = {}
    xsi_type = elem.get(XSI_TYPE)
    if xsi_type:
        prefix, _, name = xsi_type.rpartition(":")
        data[TYPE_KEY] = name
        cls = subtypes(cls).get(name, cls)
    fields = {name: (f, ns) for name, f, ns in plan(cls)}
    for child in elem:
        if not isinstance(child.tag, str):
            continue
        qname = etree.QName(child)
        entry = fields.get(qname.localname)
        if entry is None or qname.namespace not in (None, entry[1]):
            fpath = field_path(path, qname.localname)
            raise InvalidValueFault(
                f"unexpected element {qname.localname} "
                f"({qname.namespace or 'no namespace'}) in {cls.get_type_name()}",
                parameter=fpath,
                value=(child.text or "")[:200],
            )
        f = entry[0]
        fpath = field_path(path, f.name)
        if f.many:
            fpath += f"[{len(data.get(f.name, ()))}]"
        value: object
        if child.get(XSI_NIL) in ("true", "1"):
            value = None
        elif f.kind == OBJ:
            value = _read(child, f.type, fpath, sent)
        else:
            text = child.text or ""
            value = _primitive(text, f, fpath)
            if f.kind in (INT, FLOAT) and shown(value) != text.strip():
                sent[fpath] = text.strip()[:200]
        if f.many:
            data.setdefault(f.name, []).append(value)
        else:
            data[f.name] = value
    return data


def _primitive(text: str, f: Field, path: str) -> int | float | bool | str:
    try:
        if f.kind == INT:
            return int(text.strip())
        if f.kind == FLOAT:
            return float(text.strip())
        if f.kind == BOOL:
            word = text.strip()
            if word in ("true", "1"):
                return True
            if word in ("false", "0"):
                return False
            raise ValueError(word)
    except ValueError as exc:
        what = {INT: "an integer", FLOAT: "a number", BOOL: "true or false"}[f.kind]
        raise InvalidValueFault(
            f"invalid value for {path}: {what} is expected", parameter=path, value=text[:200]
        ) from exc
    return text


# --------------------------------------------------------------------------- write

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
CHUNK = 64 * 1024


def iter_text(tag: str, data: dict[str, Any], cls: type, prefixes: dict[str, str]) -> Iterator[str]:
    """The XML text of ``data`` (the JSON codec's form of a ``cls`` value) as element
    ``tag`` ("prefix:name"), in chunks of about 64 KiB.  The one way XML leaves the
    server (answers and fault details alike), written as text rather than built as a
    tree, so that a response of millions of numbers (a distance matrix) streams in
    bounded memory.  The fields' elements are unqualified; ``prefixes`` (declared on an
    enclosing element) name the namespaces of ``xsi:type`` values."""
    buffer: list[str] = []
    size = 0
    for piece in _pieces(tag, data, cls, prefixes):
        buffer.append(piece)
        size += len(piece)
        if size >= CHUNK:
            yield "".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield "".join(buffer)


def _pieces(
    tag: str, data: dict[str, Any], declared: type, prefixes: dict[str, str]
) -> Iterator[str]:
    cls: Any = original(declared)  # a spyne class: its methods are untyped
    type_name = data.get(TYPE_KEY)
    if type_name:
        cls = subtypes(cls).get(type_name, cls)
        yield f'<{tag} xsi:type="{prefixes[cls.get_namespace()]}:{type_name}">'
    else:
        yield f"<{tag}>"
    for name, f, _ in plan(cls):
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, Packed):  # a stored array, read slice by slice
            yield from _packed(name, value)
            continue
        items = value if f.many else (value,)
        if f.kind == OBJ:
            for item in items:
                yield from _pieces(name, item, f.type, prefixes)
        else:
            yield "".join(f"<{name}>{escaped(item)}</{name}>" for item in items)
    yield f"</{tag}>"


def _packed(name: str, value: Packed) -> Iterator[str]:
    """The elements of a packed array of numbers (one per item), or the one element of
    an encoded array's base64 (which needs no escaping)."""
    if value.code == "B":
        yield f"<{name}>"
        yield from value.slices()
        yield f"</{name}>"
        return
    between = f"</{name}><{name}>"
    for piece in value.slices():
        if piece.typecode in "iq":
            items = integers_text(piece).replace(",", between)
        else:
            items = between.join(map(str, piece.tolist()))
        yield f"<{name}>{items}</{name}>"


def escaped(value: object) -> str:
    """A primitive value as element content: escaped, and with the characters XML
    cannot carry replaced by U+FFFD."""
    if isinstance(value, str):
        return escape(_NOT_XML.sub("\ufffd", value))
    return _text(value)


def _text(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)
