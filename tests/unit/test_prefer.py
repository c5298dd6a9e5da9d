"""The Prefer header read as RFC 7240 writes it (xruntime/bindings/ogcapi/prefer.py): lists,
parameters, case, quoted values, several headers; what the grammar does not allow is
skipped, never raised."""

import pytest

from xruntime.bindings.ogcapi.prefer import Preference, preferences, prefers


@pytest.mark.parametrize(
    "headers",
    [
        ["respond-async"],
        ["Respond-Async"],
        ["RESPOND-ASYNC "],
        [" respond-async ; wait=10"],
        ["return=minimal, respond-async"],
        ["return=minimal", "respond-async"],
        ['handling=lenient; x="a, b; c", respond-async'],
        [",,respond-async,"],
        ["respond-async=", "wait=5"],
    ],
)
def test_respond_async_is_found_in_every_form(headers):
    assert prefers(headers, "respond-async")


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [""],
        ["respond-sync"],
        ["respond-asynchronously"],
        ["wait=10; respond-async"],  # a parameter, not a preference
        ['x="respond-async"'],
        ['x="a, respond-async'],  # (an unclosed quote swallows the rest)
        ["respond async"],
    ],
)
def test_respond_async_is_not_found_where_it_is_not_a_preference(headers):
    assert not prefers(headers, "respond-async")


def test_values_and_parameters():
    found = preferences(['Return=Minimal; a=1;b="x \\" y"; c, wait = 10 , return=representation'])
    assert found["return"] == Preference("return", "Minimal", {"a": "1", "b": 'x " y', "c": None})
    assert found["wait"] == Preference("wait", "10", {})  # the first of a name counts
    assert list(found) == ["return", "wait"]


@pytest.mark.parametrize("text", ["=", ";", '"', "a=b=c", "a=\x00", "\\", "é", "a;=;b"])
def test_nonsense_never_raises(text):
    preferences([text, text + ", respond-async"])
