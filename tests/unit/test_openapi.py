"""The OpenAPI document's rules that the shipped services do not all exercise
(xruntime.bindings.openapi): operationIds told apart only where two services share an
operation's name, ``$type`` optional on a subtype also declared where it carries none,
a body required only where ``{}`` is refused, descriptions from a docstring's first
sentence. The served document is tested end to end in tests/e2e/test_openapi_*.py."""

from openapi_spec_validator import validate

from xruntime.author import Long, RequestBase, ResponseBase, Service, Unicode, XModel, required
from xruntime.bindings import openapi
from xruntime.operations.runtime_service import served_services
from xruntime.settings.model import Settings


def a_service(name):
    """A service ``name`` with one long operation ``count``; its request declares a type
    with a subtype (``Shape``, ``Circle``) and that subtype alone."""

    class Shape(XModel):
        """A shape.  What follows is for the code's readers."""

        label = Unicode

    class Circle(Shape):
        radius = Long

    class CountRequest(RequestBase):
        shape = Shape
        circle = Circle

    class CountResponse(ResponseBase):
        total = Long

    class NeedsRequest(RequestBase):
        text = required(Unicode)

    def count(request, job):
        return CountResponse(total=0)

    def needs(request, job):
        return CountResponse(total=0)

    service = Service(name)
    service.declare(Shape, Circle)
    service.long_operation(request=CountRequest, response=CountResponse)(count)
    service.long_operation(request=NeedsRequest, response=CountResponse)(needs)
    return service


def test_an_operation_id_is_prefixed_only_where_two_services_share_its_name():
    runtime = served_services()["XRuntime"]
    first, second = a_service("XFirst"), a_service("XSecond")
    ids = openapi.operation_ids([runtime, first, second])
    assert ids["XRuntime", "watchJob"] == "watchJob"
    assert ids["XFirst", "startCount"] == "XFirst_startCount"
    assert ids["XSecond", "startCount"] == "XSecond_startCount"
    assert openapi.operation_ids([runtime, first])["XFirst", "startCount"] == "startCount"


def test_a_subtype_declared_where_it_travels_bare_has_an_optional_type():
    service = a_service("XShapes")
    document = openapi.build([served_services()["XRuntime"], service], Settings())
    validate(document)
    schemas = document["components"]["schemas"]
    request = schemas["CountRequest"]["properties"]
    # Shape has a subtype: a discriminated oneOf
    assert request["shape"]["discriminator"]["propertyName"] == "$type"
    assert {v["$ref"].rsplit("/", 1)[1] for v in request["shape"]["oneOf"]} == {"Shape", "Circle"}
    # Circle has none: where it is declared itself its value has no $type
    assert request["circle"] == {"$ref": "#/components/schemas/Circle"}
    assert "$type" in schemas["Circle"]["properties"]
    assert "$type" not in schemas["Circle"].get("required", [])
    assert "$type" in schemas["Shape"]["required"]  # (it travels only as a Shape)
    assert schemas["Shape"]["description"] == "A shape."


def test_a_body_is_required_where_the_request_has_a_required_field():
    document = openapi.build([a_service("XBodies")], Settings())
    paths = document["paths"]
    assert paths["/services/rs/XBodies/startCount"]["post"]["requestBody"]["required"] is False
    assert paths["/services/rs/XBodies/startNeeds"]["post"]["requestBody"]["required"] is True


def test_the_runtime_bounds_follow_the_settings():
    settings = Settings(max_watched_ids=5)
    document = openapi.build([served_services()["XRuntime"]], settings)
    ids = document["components"]["schemas"]["WatchJobsRequest"]
    assert ids["required"] == ["ids"]
    assert (ids["properties"]["ids"]["minItems"], ids["properties"]["ids"]["maxItems"]) == (1, 5)
    assert openapi.stated(settings) != openapi.stated(Settings())


def test_first_sentence():
    assert openapi.first_sentence("One.  Two.") == "One."
    assert openapi.first_sentence("One ``x``, e.g. y.\n    Two.") == "One `x`, e.g. y."
    assert openapi.first_sentence("One\n    line.  Two") == "One line."
    assert openapi.first_sentence("") == ""
