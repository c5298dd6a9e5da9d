"""What the codecs, the SOAP binding and the WSDL read from the spyne type metadata.

The protocol types are spyne models: their fields (``_type_info``), their base
(``__extends__``), their subclasses and, for a field declared with
``Foo.customize(...)``, a copy of ``Foo`` that points back to it (``__orig__``).  The
JSON and XML codecs, the SOAP binding, the WSDL and the fault registry all walk this
graph; they do it with these helpers, in one place, so that they agree on which types
and fields there are.
"""

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, cast

from spyne import ComplexModelBase
from spyne.model import ModelBase
from spyne.model.enum import EnumBase
from spyne.model.primitive import Boolean, Decimal, Integer, Unicode

F = TypeVar("F", bound=Callable[..., Any])


def cached(function: F) -> F:
    """``functools.cache`` for a function of spyne classes, typed as the function itself:
    typeshed's wrapper takes Hashable arguments, and mypy does not count as Hashable a
    class whose base it cannot see (every spyne model class: spyne ships no types)."""
    return cast(F, cache(function))


#: The kinds of field the codecs tell apart.
INT, FLOAT, STR, BOOL, ENUM, OBJ = range(6)


#: Each kind's spyne base class, in the order they are tried.
_KIND_BASES = (
    (ComplexModelBase, OBJ),
    (Boolean, BOOL),
    (Integer, INT),
    (Decimal, FLOAT),
    (EnumBase, ENUM),
    (Unicode, STR),
)


def kind(spyne_type: type[ModelBase]) -> int:
    """The kind of a field's spyne type; TypeError for one the codecs cannot carry."""
    for base, its_kind in _KIND_BASES:
        if issubclass(spyne_type, base):
            return its_kind
    raise TypeError(f"the JSON codec does not know the spyne type {spyne_type!r}")


class Field:
    """What the codecs need to know of one declared field, computed once."""

    __slots__ = ("name", "type", "kind", "many", "required", "attrs")

    def __init__(self, name: str, spyne_type: type[ModelBase]) -> None:
        self.name = name
        self.type = spyne_type
        self.kind = kind(spyne_type)
        attrs = spyne_type.Attributes
        self.many = attrs.max_occurs > 1
        self.required = attrs.min_occurs >= 1
        self.attrs = attrs


@cached
def fields(cls: type[ComplexModelBase]) -> tuple[Field, ...]:
    """The fields of ``cls``, its bases' included, in declaration order."""
    return tuple(Field(name, t) for name, t in cls.get_flat_type_info(cls).items())


def original(cls: type[ModelBase]) -> type[ModelBase]:
    """The class a customized spyne type (``Foo.customize(...)``) stands for: the one
    that has the subclasses and is named by ``$type`` and ``xsi:type``."""
    return getattr(cls, "__orig__", None) or cls


def lineage(cls: type[ComplexModelBase]) -> list[type[ComplexModelBase]]:
    """``cls`` (its original) and the classes it extends, root first: each declares its
    own fields (``_type_info``) in its own namespace."""
    chain: list[type[ComplexModelBase]] = []
    c: type[ComplexModelBase] | None = original(cls)
    while c is not None and hasattr(c, "_type_info"):
        chain.insert(0, c)
        c = getattr(c, "__extends__", None)
    return chain


def _derived(cls: type[ComplexModelBase]) -> list[type[ComplexModelBase]]:
    """The real subclasses of ``cls``: not the copies spyne makes for ``customize(...)``
    (which share the name and fields of what they copy)."""
    return [c for c in cls.__subclasses__() if getattr(c, "__orig__", None) is None]


def subclasses(cls: type[ComplexModelBase]) -> list[type[ComplexModelBase]]:
    """``cls`` and its real subclasses, theirs and so on, breadth first: every type a
    value declared as ``cls`` may be."""
    found, pending = [], [cls]
    while pending:
        c = pending.pop(0)
        found.append(c)
        pending.extend(_derived(c))
    return found


@cached
def subtypes(cls: type[ComplexModelBase]) -> dict[str, type[ComplexModelBase]]:
    """``cls`` and its subclasses by type name: what ``$type`` and ``xsi:type`` may name
    where ``cls`` is declared."""
    found: dict[str, type[ComplexModelBase]] = {}
    for c in subclasses(cls):
        found.setdefault(c.get_type_name(), c)
    return found


@cached
def is_polymorphic(cls: type[ComplexModelBase]) -> bool:
    """Whether ``cls`` has subclasses, so that a value of it must name its type."""
    return bool(_derived(cls))


def complex_types(cls: type[ComplexModelBase]) -> list[type[ComplexModelBase]]:
    """The complex types reachable from ``cls``: itself, its base, its fields' types,
    theirs, and so on (each by its original): every type a message of ``cls`` may hold
    but for subtypes, which are named by ``subclasses``."""
    found, seen, pending = [], set(), [cls]
    while pending:
        c = original(pending.pop())
        if c in seen or not hasattr(c, "_type_info"):
            continue
        seen.add(c)
        found.append(c)
        base = getattr(c, "__extends__", None)
        if base is not None:
            pending.append(base)
        pending.extend(c._type_info.values())
    return found


def is_protocol_type(cls: type[ModelBase]) -> bool:
    """Whether ``cls`` is one of the protocol's own types (``xruntime.protocol``), not a
    service's: those have their namespace pinned and are in every WSDL."""
    return cls.__module__.startswith(__package__ + ".")
