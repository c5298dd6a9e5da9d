"""The XML form of every protocol type, as the WSDL declares it: the JSON codec's twin.

Reading turns an element into the JSON codec's plain data (``xsi:type`` becomes
``"$type"``, text becomes numbers and booleans by the declared field types), which
``codec.decode`` then validates exactly as for JSON, so both bindings refuse the same
requests with the same faults.  Writing turns the codec's plain data into elements.

A field's element is in the namespace of the class that declares it (the schemas are
``elementFormDefault="qualified"``); fault types are declared in the service's own
namespace (spyne puts the faults an operation throws there), so faults are written with
``ns_override``.
"""
from functools import lru_cache

from lxml import etree

from ..protocol.faults import InvalidRequestFault, InvalidValueFault
from .codec import _BOOL, _FLOAT, _INT, _OBJ, TYPE_KEY, _Field, _base, subtypes

XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSI_TYPE = f"{{{XSI}}}type"
XSI_NIL = f"{{{XSI}}}nil"


@lru_cache(maxsize=None)
def plan(cls):
    """[(name, field, namespace)] of a complex type, base fields first."""
    chain, c = [], _base(cls)
    while c is not None and hasattr(c, "_type_info"):
        chain.insert(0, c)
        c = getattr(c, "__extends__", None)
    fields = []
    for c in chain:
        for name, spyne_type in c._type_info.items():
            fields.append((name, _Field(name, spyne_type), c.get_namespace()))
    return tuple(fields)


# --------------------------------------------------------------------------- read

def read(elem, cls, path: str = "", ns_override=None) -> dict:
    """An element as the JSON codec's plain data for type ``cls``."""
    cls = _base(cls)
    data = {}
    xsi_type = elem.get(XSI_TYPE)
    if xsi_type:
        prefix, _, name = xsi_type.rpartition(":")
        data[TYPE_KEY] = name
        cls = subtypes(cls).get(name, cls)
    fields = {name: (f, ns_override or ns) for name, f, ns in plan(cls)}
    for child in elem:
        if not isinstance(child.tag, str):
            continue
        qname = etree.QName(child)
        fpath = f"{path}.{qname.localname}" if path else qname.localname
        entry = fields.get(qname.localname)
        if entry is None or (qname.namespace or "") != entry[1]:
            raise InvalidValueFault(f"unexpected element {qname.localname} "
                                    f"({qname.namespace or 'no namespace'}) in {cls.get_type_name()}",
                                    parameter=fpath, value=(child.text or "")[:200])
        f = entry[0]
        if child.get(XSI_NIL) in ("true", "1"):
            value = None
        elif f.kind == _OBJ:
            value = read(child, f.type, fpath)
        else:
            value = _primitive(child.text or "", f, fpath)
        if f.many:
            data.setdefault(f.name, []).append(value)
        else:
            data[f.name] = value
    return data


def _primitive(text, f, path):
    try:
        if f.kind == _INT:
            return int(text.strip())
        if f.kind == _FLOAT:
            return float(text.strip())
        if f.kind == _BOOL:
            word = text.strip()
            if word in ("true", "1"):
                return True
            if word in ("false", "0"):
                return False
            raise ValueError(word)
    except ValueError:
        what = {_INT: "an integer", _FLOAT: "a number", _BOOL: "true or false"}[f.kind]
        raise InvalidValueFault(f"invalid value for {path}: {what} is expected",
                                parameter=path, value=text[:200])
    return text


# --------------------------------------------------------------------------- write

def write(parent, tag: str, data: dict, cls, prefixes: dict, ns_override=None):
    """Append ``data`` (the JSON codec's form of a ``cls`` value) as element ``tag``."""
    cls = _base(cls)
    elem = etree.SubElement(parent, tag)
    type_name = data.get(TYPE_KEY)
    if type_name:
        cls = subtypes(cls).get(type_name, cls)
        elem.set(XSI_TYPE, _qualified(elem, cls.get_namespace(), type_name, prefixes))
    for name, f, ns in plan(cls):
        value = data.get(name)
        if value is None:
            continue
        child_tag = f"{{{ns_override or ns}}}{name}"
        for item in (value if f.many else (value,)):
            if f.kind == _OBJ:
                write(elem, child_tag, item, f.type, prefixes)
            else:
                etree.SubElement(elem, child_tag).text = _text(item)
    return elem


def _text(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _qualified(elem, namespace, name, prefixes):
    prefix = prefixes.get(namespace)
    if prefix is None:
        raise InvalidRequestFault(f"no prefix for namespace {namespace}")
    return f"{prefix}:{name}"
