"""The registry of services (xruntime.author.registry): how a plug-in is loaded and what
is refused, one line each, without starting anything; and the namespaces a service's
types take (xruntime.author.service.pin_namespace)."""

import sys
import types

import pytest

from xruntime.author import Long, RequestBase, ResponseBase, Service, Unicode, XModel, repeated
from xruntime.author.registry import Plugin, PluginError, check_type_names, types_of
from xruntime.protocol.types import NAMESPACE as FRAMEWORK


def a_service(name, namespace="", item_namespace=None):
    """A service ``name`` whose response holds a nested type named ``Item``."""
    attributes = {"word": Unicode, "count": Long}
    if item_namespace is not None:
        attributes["__namespace__"] = item_namespace
    item = type("Item", (XModel,), attributes)
    request = type("CountRequest", (RequestBase,), {"text": Unicode})
    response = type("CountResponse", (ResponseBase,), {"items": repeated(item)})
    service = Service(name, namespace=namespace)
    service.long_operation(request=request, response=response)(lambda request, job: None)
    return service, item, response


def test_a_nested_type_takes_its_services_namespace_in_the_field_too():
    service, item, response = a_service("XNested")
    assert service.namespace == "http://xruntime.org/xserver/xnested"
    assert item.get_namespace() == service.namespace
    # the copy spyne made for repeated(Item) when the class statement ran
    assert response._type_info["items"].get_namespace() == service.namespace
    assert item in types_of(service)


def test_two_services_may_each_define_a_type_of_one_name():
    first, _, _ = a_service("XFirst")
    second, _, _ = a_service("XSecond")
    check_type_names({"XFirst": first, "XSecond": second}, {"XFirst": "a", "XSecond": "b"})


def test_one_name_in_one_namespace_from_two_services_is_refused_naming_both():
    first, _, _ = a_service("XOne", namespace="urn:shared")
    second, _, _ = a_service("XTwo", namespace="urn:shared")
    origins = {"XOne": "entry point of distribution one", "XTwo": "entry point of distribution two"}
    with pytest.raises(PluginError) as refused:
        check_type_names({"XOne": first, "XTwo": second}, origins)
    message = str(refused.value)
    assert message.startswith("type {urn:shared}")  # Item or the request/response type
    assert "service XTwo (entry point of distribution two)" in message
    assert "service XOne (entry point of distribution one)" in message


def test_a_type_in_the_frameworks_namespace_is_refused():
    service, _, _ = a_service("XIntruder", item_namespace=FRAMEWORK)
    with pytest.raises(PluginError, match=r"its type .*Item is in the framework's namespace"):
        check_type_names({"XIntruder": service}, {"XIntruder": "here"})


@pytest.fixture
def module(monkeypatch):
    """A module ``xplug`` (importable for the test's length) with the given attributes."""

    def make(**attributes):
        made = types.ModuleType("xplug")
        made.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, "xplug", made)
        return made

    return make


def test_a_plugin_loads_its_service(module):
    service = Service("XPlug")
    module(service=service)
    assert Plugin("xplug", "service", "here", "XPlug").load() is service


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({}, "here: module xplug has no 'service'"),
        ({"service": 42}, "here: xplug.service is a int, not an xruntime.author.Service"),
        (
            {"service": Service("XOther")},
            "here: names the service 'XPlug' but the module's service is 'XOther'",
        ),
    ],
)
def test_what_a_plugin_refuses_is_one_line(module, attributes, expected):
    module(**attributes)
    with pytest.raises(PluginError) as refused:
        Plugin("xplug", "service", "here", "XPlug").load()
    assert str(refused.value).startswith(expected)
    assert "\n" not in str(refused.value)


def test_a_plugin_that_fails_to_import_names_the_error():
    with pytest.raises(PluginError) as refused:
        Plugin("xruntime_no_such_module", "service", "here").load()
    assert str(refused.value) == (
        "here: cannot import xruntime_no_such_module: ModuleNotFoundError: "
        "No module named 'xruntime_no_such_module'"
    )
