"""The JSON form of every protocol type, driven by the spyne type metadata.

One codec serves the JSON and JSON-RPC bindings and the job store (requests, results
and faults are stored in this binding-neutral form, never pickled).  Polymorphic
values carry ``"$type"``; decoding validates types, required fields and declared
ranges and answers ``InvalidValueFault``/``MissingParameterFault`` naming the field
by its path (``timeouts.computationTimeout``, ``orders[3].demand``).
"""

import json
import keyword
import math
import operator
import reprlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import cache
from typing import Any

import orjson
from spyne.model.complex import ComplexModelBase

from .faults import (
    InternalErrorFault,
    InvalidValueFault,
    MissingParameterFault,
    XServerFault,
    fault_class,
)
from .typeinfo import (
    BOOL,
    ENUM,
    FLOAT,
    INT,
    OBJ,
    Field,
    cached,
    fields,
    is_polymorphic,
    original,
    subtypes,
)
from .types import XModel

TYPE_KEY = "$type"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------- encode


def dumps(data: Any) -> str:
    """The codec's data as compact JSON text, as ``json.dumps`` writes it: by orjson
    (10× sooner: a child job's request of 4 500 locations took 6 ms) when its text
    cannot differ, that is when it has no number with an exponent (``1e-07``: orjson
    writes ``1e-7``) and no ``null`` (orjson writes NaN and infinities so); by
    ``json.dumps`` otherwise, and for what orjson refuses (an int past 64 bits, a key
    that is not a string)."""
    try:
        text = orjson.dumps(data)
    except TypeError:  # (orjson.JSONEncodeError is one)
        text = None
    if text is None or _orjson_may_differ(text):
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.decode("utf-8")


#: Every digit as 0 and ``E`` as ``e``: a digit followed by an exponent's letter is then
#: one byte pair, found by one search.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")


def _orjson_may_differ(text: bytes) -> bool:
    """Whether orjson's ``text`` may differ from ``json.dumps``'s: a digit followed by
    ``e`` or ``E`` (an exponent, or the like in a string) or a ``null``.  Looked for by
    byte searches in C over a copy with every digit made 0 (and ``E`` made ``e``: one
    search, not two, each 0.45 ms over a text where 0 is everywhere), not by the
    regular expression ``[0-9][eE]|null``, which Python's engine tries at every byte (4×
    the time: a child job's request of 4 500 locations, 280 kB, spent more on it than
    on its encoding)."""
    return b"0e" in text.translate(_DIGITS_AS_ZERO) or b"null" in text


#: Digits in a row (all made 0) that only an integer of 19 digits or more has: a float
#: as ``dumps`` writes it has 17 significant digits at most (an exponent past 16).
_LONG_INTEGER = b"0" * 19


def loads(text: str | bytes) -> Any:
    """JSON text as ``json.loads`` reads it: by orjson (a child job's request of 4 500
    locations: 3.6 → 1 ms, read by every child and twice by its parent) when its answer
    cannot differ, that is when the text has no run of 19 digits or more (orjson reads
    an integer past 64 bits as a float; any float it reads as Python does, correctly
    rounded); by ``json.loads`` otherwise, and for what orjson refuses (NaN, an
    infinity, a lone surrogate), which ``json.loads`` reads or refuses as it always did."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _LONG_INTEGER not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def encode(
    value: XModel, declared: type[XModel] | None = None, lists: dict | None = None
) -> dict[str, Any]:
    """A spyne model instance as plain JSON data (dicts, lists, str, int, ...).
    ``lists``: the lists encoded so far, by the list and its field's type, for several
    values encoded together that share lists (the children of a parent: each of XDima's
    holds the same 3 000 destinations): a list met again is encoded once.  Its owner
    keeps the values alive meanwhile (an ``id`` is a list's only while it exists)."""
    cls = type(value)
    out: dict[str, Any] = {}
    if declared is None or cls is not original(declared) or is_polymorphic(cls):
        out[TYPE_KEY] = cls.get_type_name()
    for f in fields(cls):
        v = getattr(value, f.name, None)
        if v is None or isinstance(v, type):
            continue
        if f.many:
            key = (id(v), f.type, f.kind)  # (what its encoding depends on)
            if lists is not None and key in lists:
                out[f.name] = lists[key]
                continue
            plan = _numbers_plan(f.type) if f.kind == OBJ else None
            if plan is not None and not is_polymorphic(plan[0]):
                out[f.name] = _encode_numbers_objects(v, f, plan)
            else:
                out[f.name] = [_encode_value(item, f) for item in v]
            if lists is not None:
                lists[key] = out[f.name]
        else:
            out[f.name] = _encode_value(v, f)
    return out


def _encode_numbers_objects(items: list, f: Field, plan: "NumbersPlan") -> list:
    """A list of objects of number fields (``_numbers_plan``: a class no other derives
    from) encoded as ``encode`` encodes each, in one loop (``_numbers_loops``): an item
    of that very class is written there, any other (a subclass, a spyne instance of a
    customised class) through ``encode``."""
    return _numbers_loops(plan)[1](items, lambda item: _encode_value(item, f))


def _encode_value(v: Any, f: Field) -> Any:
    if f.kind == OBJ:
        return encode(v, f.type)
    if f.kind == FLOAT:
        return float(v)
    return v


def encode_fault(fault: XServerFault) -> dict:
    """``{"message": ..., "faultInfo": {"$type": ..., "hint": ..., ...}}``."""
    info = {TYPE_KEY: fault.get_type_name()}
    for name, v in fault.fields().items():
        info[name] = v
    return {"message": fault.faultstring, "faultInfo": info}


def decode_fault(data: dict, namespace: str | None = None) -> XServerFault:
    """A stored fault as its class: the one of that name in ``namespace`` (the service
    whose job it ended) first (``faults.fault_class``)."""
    info = dict(data.get("faultInfo") or {})
    cls = fault_class(info.pop(TYPE_KEY, "InternalErrorFault"), namespace) or InternalErrorFault
    known = set(cls.field_names())
    return cls(data.get("message", ""), **{k: v for k, v in info.items() if k in known})


# --------------------------------------------------------------------------- decode


def decode(
    data: Any,
    cls: type[XModel],
    path: str = "",
    sent: Mapping[str, str] | None = None,
) -> XModel:
    """Plain JSON data as an instance of the spyne model ``cls`` (or the subtype
    named by ``$type``), validated against the declared fields.  ``sent`` ({path:
    text}) gives the text a value was sent as where it differs from how the value
    shows (the SOAP binding's numbers), so that a fault names the value as sent."""
    if not isinstance(data, dict):
        raise _invalid(path or cls.get_type_name(), data, "an object is expected")
    cls = original(cls)
    type_name = data.get(TYPE_KEY)
    if type_name is not None:
        known = subtypes(cls)
        if not isinstance(type_name, str) or type_name not in known:
            raise _invalid(
                field_path(path, TYPE_KEY),
                type_name,
                f"expected {cls.get_type_name()} or one of its subtypes",
            )
        cls = known[type_name]
    declared = fields(cls)
    names = _field_names(cls)
    for key in data:
        if key != TYPE_KEY and key not in names:
            raise _invalid(
                field_path(path, key), data[key], f"{cls.get_type_name()} has no field {key!r}"
            )
    obj = _blank(cls)
    for f in declared:
        fpath = field_path(path, f.name)
        raw = data.get(f.name)
        if raw is None:
            if f.required:
                raise MissingParameterFault(f"the parameter {fpath} is missing", parameter=fpath)
            setattr(obj, f.name, None)
            continue
        if f.many:
            if not isinstance(raw, list):
                raise _invalid(fpath, raw, "a list is expected")
            plan = _numbers_plan(f.type) if f.kind == OBJ else None
            if plan is not None:
                value = _decode_numbers_objects(raw, f.type, plan, fpath, sent)
            else:
                value = [
                    _decode_value(item, f, f"{fpath}[{i}]", sent) for i, item in enumerate(raw)
                ]
        else:
            value = _decode_value(raw, f, fpath, sent)
        setattr(obj, f.name, value)
    return obj


#: How ``_decode_numbers_objects`` reads a class of number fields: the class, its
#: fields' names, and per field its name, whether it is required and its bounds.
NumbersPlan = tuple[type, frozenset[str], tuple[tuple[str, bool, tuple], ...]]


@cached
def _numbers_plan(cls: type[XModel]) -> NumbersPlan | None:
    """The plan of a class whose fields are all single numbers of kind FLOAT (a
    location: longitude, latitude), made as ``_blank`` makes it; None for any other."""
    cls = original(cls)
    declared = fields(cls)
    if not declared or not _plainly_made(cls):
        return None
    if any(f.kind != FLOAT or f.many for f in declared):
        return None
    plan = tuple((f.name, bool(f.required), _bounds(f.attrs)) for f in declared)
    return cls, _field_names(cls), plan


def _decode_numbers_objects(
    raw: list, declared: type[XModel], plan: NumbersPlan, path: str, sent: Mapping[str, str] | None
) -> list:
    """A list of objects of number fields (``_numbers_plan``), decoded as ``decode``
    decodes each, in one loop (``_numbers_loops``): an item that is a plain object of
    finite floats within their bounds is made there; any other (an int, a missing field,
    ``$type``, a value out of range...) goes through ``decode``, which answers it or its
    fault.  A request of 3 000 locations: 3 µs an item through ``decode``, several times
    that on a busy machine; a parent of child jobs and its children decode theirs three
    times over."""
    return _numbers_loops(plan)[0](
        raw, lambda item, i: decode(item, declared, f"{path}[{i}]", sent)
    )


#: The comparisons of ``_COMPARISONS`` as Python writes them.
_SYMBOLS = {operator.ge: ">=", operator.gt: ">", operator.le: "<=", operator.lt: "<"}


@cache
def _numbers_loops(plan: NumbersPlan) -> tuple[Callable[..., list], Callable[..., list]]:
    """The decoding and the encoding loop of a list of objects of ``plan``'s class,
    written for that class (its fields' names and bounds in the code, as ``dataclasses``
    writes a class's ``__init__``): the generic loop, which walks the plan's fields and
    bounds for every item, spent most of a request's decoding on that walk (a child
    job's request of 4 500 locations, 11 ms).  Each loop hands an item it does not
    take (``fallback``) to the general codec, so the answers and faults are the same."""
    cls, _, numbers = plan
    space: dict[str, Any] = {"new": object.__new__, "cls": cls}
    space.update(isfinite=math.isfinite, float=float, dict=dict, type=type, len=len)
    tests: list[str] = []
    taken: list[str] = []  # (a required field's read: KeyError when it is missing)
    offered: list[str] = []
    sets: list[str] = []
    gets: list[str] = []
    fast: list[str] = []
    slow: list[str] = []
    for k, (name, required, bounds) in enumerate(numbers):
        space[f"n{k}"] = name  # (names as values; as code only where they are identifiers)
        test = [f"type(v{k}) is float", f"isfinite(v{k})"]
        for j, (bound, holds, _) in enumerate(bounds):
            space[f"b{k}_{j}"] = bound
            test.append(f"v{k} {_SYMBOLS[holds]} b{k}_{j}")
        joined = " and ".join(test)
        tests.append(joined if required else f"(v{k} is None or ({joined}))")
        (taken if required else offered).append(
            f"v{k} = item[n{k}]" if required else f"v{k} = item.get(n{k})"
        )
        plain = name.isidentifier() and not keyword.iskeyword(name)
        sets.append(f"obj.{name} = v{k}" if plain else f"setattr(obj, n{k}, v{k})")
        gets.append(f"v{k} = item.{name}" if plain else f"v{k} = getattr(item, n{k}, None)")
        fast.append(f"{name!r}: v{k}" if plain else f"n{k}: v{k}")
        slow.append(f"if v{k} is not None and not isinstance(v{k}, type): d[n{k}] = float(v{k})")
    # no key but the fields': as many keys as required fields, and optional ones not None
    present = " + ".join(
        [str(len(taken))]
        + [f"(v{k} is not None)" for k, (_, required, _) in enumerate(numbers) if not required]
    )
    decoding = f"""
def decode_loop(raw, fallback):
    out = []
    append = out.append
    for i, item in enumerate(raw):
        if type(item) is dict:
            try:
                {"; ".join(taken) or "pass"}
            except KeyError:
                pass
            else:
                {"; ".join(offered) or "pass"}
                if len(item) == {present} and {" and ".join(tests)}:
                    obj = new(cls)
                    {_lines(sets, 20)}
                    append(obj)
                    continue
        append(fallback(item, i))
    return out
"""
    encoding = f"""
def encode_loop(items, fallback):
    out = []
    append = out.append
    for item in items:
        if type(item) is not cls:
            append(fallback(item))
            continue
        {"; ".join(gets)}
        if {" and ".join(f"type(v{k}) is float" for k in range(len(numbers)))}:
            append({{{", ".join(fast)}}})
            continue
        d = {{}}
        {_lines(slow, 8)}
        append(d)
    return out
"""
    exec(decoding + encoding, space)  # noqa: S102 (code of the plan's own shape alone)
    return space["decode_loop"], space["encode_loop"]


def _lines(statements: list[str], indent: int) -> str:
    """``statements`` as lines of generated code, each after the first indented by
    ``indent`` spaces (the first takes the indent of the place it is written in)."""
    return ("\n" + " " * indent).join(statements)


@cached
def _field_names(cls: type[XModel]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


@cached
def _plainly_made(cls: type[XModel]) -> bool:
    return cls.__init__ is ComplexModelBase.__init__


def _blank(cls: type[XModel]) -> XModel:
    """A new ``cls`` whose fields ``decode`` sets, each of them: without spyne's
    ``__init__``, which first gives every field its default one by one (half the time
    of decoding a request of 2 000 locations), unless the class has its own."""
    return object.__new__(cls) if _plainly_made(cls) else cls()


def _decode_value(raw: Any, f: Field, path: str, sent: Mapping[str, str] | None) -> Any:
    kind = f.kind
    if kind == OBJ:
        return decode(raw, f.type, path, sent)
    if kind == INT:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise _invalid(path, raw, "an integer is expected")
        if isinstance(raw, float):
            if not math.isfinite(raw) or not raw.is_integer():
                raise _invalid(path, raw, "an integer is expected")
            raw = int(raw)
        if not INT64_MIN <= raw <= INT64_MAX:
            raise _invalid(path, raw, "the integer is out of the 64-bit range", sent)
        _check_range(raw, f.attrs, path, sent)
        return raw
    if kind == FLOAT:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
            raise _invalid(path, raw, "a number is expected")
        _check_range(raw, f.attrs, path, sent)
        return float(raw)
    if kind == BOOL:
        if not isinstance(raw, bool):
            raise _invalid(path, raw, "true or false is expected")
        return raw
    if kind == ENUM:
        values = f.type.__values__
        if raw not in values:
            raise _invalid(path, raw, "one of " + ", ".join(values) + " is expected")
        return raw
    if not isinstance(raw, str):
        raise _invalid(path, raw, "a string is expected")
    if f.attrs.max_len is not None and len(raw) > f.attrs.max_len:
        raise _invalid(path, raw, f"at most {f.attrs.max_len} characters are allowed")
    return raw


_COMPARISONS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("ge", operator.ge, "at least"),
    ("gt", operator.gt, "more than"),
    ("le", operator.le, "at most"),
    ("lt", operator.lt, "less than"),
)


@cached
def _bounds(attrs: Any) -> tuple[tuple[Any, Callable[[Any, Any], bool], str], ...]:
    """The finite bounds a number of a field with spyne ``attrs`` must keep: (bound,
    the comparison it must pass, the words a fault says), found once per field type.
    spyne's unbounded ones are infinite Decimals, slow to compare a float with."""
    return tuple(
        (b, holds, words)
        for name, holds, words in _COMPARISONS
        if (b := getattr(attrs, name, None)) is not None
        and not (isinstance(b, (int, float, Decimal)) and math.isinf(b))
    )


def _check_range(v: int | float, attrs: Any, path: str, sent: Mapping[str, str] | None) -> None:
    for b, holds, words in _bounds(attrs):
        if not holds(v, b):
            raise _invalid(path, v, f"it must be {words} {b}", sent)


def shown(value: Any) -> str:
    """How a fault's ``value`` shows a value of the request: a string as it is, any
    other value as JSON (and Python) write it, containers cut short (a fault shows 200
    characters: a 10 MB list must not be written whole first)."""
    return value if isinstance(value, str) else _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 8, 100, 100, 100
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 400


def _invalid(
    path: str, value: Any, why: str, sent: Mapping[str, str] | None = None
) -> InvalidValueFault:
    text = sent.get(path) if sent else None
    text = shown(value) if text is None else text
    if len(text) > 200:
        text = text[:200] + "…"
    return InvalidValueFault(f"invalid value for {path}: {why}", parameter=path, value=text)


def field_path(path: str, name: str) -> str:
    """The path of field ``name`` of the value at ``path`` ("" for the request itself),
    as faults name it: ``timeouts.computationTimeout``."""
    return f"{path}.{name}" if path else name
