"""spyne 2.14 on Python 3.12 and later; imported by ``xruntime/__init__.py`` before
anything imports spyne.

spyne vendors ``six`` as ``spyne/util/six.py``, whose ``_SixMetaPathImporter`` serves
``spyne.util.six.moves.*`` with ``find_module``/``load_module`` only.  Python 3.12
dropped ``find_module`` from the import system, so ``import spyne`` fails there with
``No module named 'spyne.util.six.moves'``.  ``apply()`` loads ``spyne/util/six.py`` by
path under its own name, without importing spyne, and gives the importer the
``find_spec``/``create_module``/``exec_module`` that six 1.16 has; spyne then finds that
module in ``sys.modules`` and imports.  On 3.13 ``spyne.protocol.soap`` also imports
``cgi``, removed from the standard library: the dependency ``legacy-cgi`` (setup.cfg)
provides it.  On 3.11 nothing more is done.

On every version, ``spyne.util`` is imported without ``urllib.request``
(``_UtilWithoutUrllibRequest``): it takes ``urlopen`` and ``Request`` from it for
helpers spyne itself never calls, and that module brings ``http.client``, ``ssl`` and
``hashlib`` (OpenSSL's libcrypto) into every process that imports spyne.
"""

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

SIX = "spyne.util.six"


def apply() -> None:
    """Make spyne's vendored six importable on this Python, and ``spyne.util``
    importable without ``urllib.request`` (idempotent)."""
    if _UtilWithoutUrllibRequest not in sys.meta_path:
        sys.meta_path.insert(0, _UtilWithoutUrllibRequest)
    if sys.version_info < (3, 12):
        return
    six = sys.modules.get(SIX) or _load_six()
    if six is not None:
        _give_find_spec(six._SixMetaPathImporter)


def _load_six() -> ModuleType | None:
    spyne = importlib.util.find_spec("spyne")  # finds the package, imports nothing
    if spyne is None or not spyne.submodule_search_locations:
        return None  # no spyne: the import error comes later
    path = os.path.join(list(spyne.submodule_search_locations)[0], "util", "six.py")
    spec = importlib.util.spec_from_file_location(SIX, path)
    assert spec is not None and spec.loader is not None  # a .py file's spec has a loader
    six = importlib.util.module_from_spec(spec)
    sys.modules[SIX] = six
    try:
        spec.loader.exec_module(six)  # appends its importer to sys.meta_path
    except BaseException:
        del sys.modules[SIX]
        raise
    return six


def _give_find_spec(importer_class: Any) -> None:
    """Give six's ``_SixMetaPathImporter`` (a class of spyne's vendored, untyped six) the
    import system's methods, made of its own ``known_modules`` and ``load_module``."""
    if "find_spec" in importer_class.__dict__:
        return

    def find_spec(
        self: Any,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname in self.known_modules:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self: Any, spec: ModuleSpec) -> ModuleType:
        module = self.load_module(spec.name)
        # A moved module is the real one (e.g. collections.abc); the import system is
        # about to overwrite its __spec__ with this alias's: keep its own.
        self.__dict__.setdefault("own_specs", {})[spec.name] = getattr(module, "__spec__", None)
        return module

    def exec_module(self: Any, module: ModuleType) -> None:
        spec = module.__spec__
        assert spec is not None  # the import system sets it before exec_module
        own = self.__dict__.get("own_specs", {}).pop(spec.name, None)
        if own is not None:
            module.__spec__ = own

    importer_class.find_spec = find_spec
    importer_class.create_module = create_module
    importer_class.exec_module = exec_module


UTIL = "spyne.util"
URLLIB_REQUEST = "urllib.request"


class _UtilWithoutUrllibRequest:
    """Finds ``spyne.util`` as the import system does, with a loader that runs it while
    ``urllib.request`` is a stand-in (``_stand_in``), if it is not imported yet.  The
    names spyne.util takes from it are functions that import the real module when
    called.  Measured in a worker process: 6 MB less with ``secrets`` left out too
    (``hashlib`` then loads no libcrypto); ``urllib.request`` alone is 2.3 MB."""

    @staticmethod
    def find_spec(
        fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != UTIL:
            return None
        sys.meta_path.remove(_UtilWithoutUrllibRequest)  # (once: spyne.util is found now)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _StandingIn(spec.loader)
        return spec


class _StandingIn(importlib.abc.Loader):
    """``loader`` running its module while ``urllib.request`` is a stand-in."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if URLLIB_REQUEST in sys.modules:
            self.loader.exec_module(module)
            return
        stand_in = _stand_in()
        sys.modules[URLLIB_REQUEST] = stand_in
        try:
            self.loader.exec_module(module)
        finally:
            if sys.modules.get(URLLIB_REQUEST) is stand_in:
                del sys.modules[URLLIB_REQUEST]  # the next import loads the real one


def _stand_in() -> ModuleType:
    """A module whose every name is a function calling the real ``urllib.request``'s."""
    stand_in = ModuleType(URLLIB_REQUEST)

    def forwarder(name: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(URLLIB_REQUEST), name)(*args, **kwargs)

        forward.__name__ = name
        return forward

    stand_in.__getattr__ = forwarder  # type: ignore[method-assign]  # (PEP 562)
    return stand_in
