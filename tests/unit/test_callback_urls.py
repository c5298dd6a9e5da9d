"""Callback URLs checked once, at the start (issue 32; docs/protocol.md §14): a URL
http.client cannot send as written, a path with dot segments or encoded slashes, and
IPv6 addresses that carry an IPv4 one are refused by ``targets.target_of`` (so at the
start, ``check_callback``, and again at each attempt); and any failure of an attempt
counts as an attempt."""

import dataclasses
import ipaddress
import logging

import pytest

from xruntime.callbacks import targets
from xruntime.callbacks.delivery import CallbackDelivery
from xruntime.protocol.faults import InvalidValueFault
from xruntime.settings.config import CallbackSettings, Settings
from xruntime.settings.values import callback_target
from xruntime.store import CallbackEvent

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="


def allowed(*entries):
    return tuple(callback_target(entry) for entry in entries)


def resolving(table):
    """A resolver answering ``table[host]`` (a list of addresses); an address itself."""
    return lambda host, port: table.get(host, [host])


PREFIX = allowed("http://127.0.0.1:9/xr/", "https://hooks.example.org/xr/")
PUBLIC = {"hooks.example.org": ["93.184.216.34"]}


# --------------------------------------------------------------------------- spelling


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://127.0.0.1:9/xr/été", "'é' (U+00E9)"),
        ("https://hooks.example.org/xr/été", "'é' (U+00E9)"),
        ("http://127.0.0.1:9/xr/a b", "' ' (U+0020)"),
        ("http://127.0.0.1:9/xr/ab ", "' ' (U+0020)"),
        (" http://127.0.0.1:9/xr/ab", "' ' (U+0020) at character 1"),
        ("http://127.0.0.1:9/xr/a\r\nX-Evil: 1", r"'\r' (U+000D)"),
        ("http://127.0.0.1:9/xr/a\nb", r"'\n' (U+000A)"),
        ("http://127.0.0.1:9/xr/a\tb", r"'\t' (U+0009)"),
        ("http://127.0.0.1:9/xr/a\x00b", r"'\x00' (U+0000)"),
        ("http://127.0.0.1:9/xr/a\x7fb", r"'\x7f' (U+007F)"),
        ("http://127.0.0.1:9/xr/a\\b", "(U+005C)"),
        ('http://127.0.0.1:9/xr/"a"', "U+0022"),
        ("http://127.0.0.1:9/xr/<a>", "U+003C"),
        ("http://127.0.0.1:9/xr/a|b", "U+007C"),
        ("http://127.0.0.1:9/xr/a{b}", "U+007B"),
        ("http://127.0.0.1:9/xr/a^b", "U+005E"),
        ("http://127.0.0.1:9/xr/a`b", "U+0060"),
        ("http://hооks.example.org/xr/", "U+043E"),  # Cyrillic o's
        ("http://127.0.0.1:9/xr/100%", "starts no escape"),
        ("http://127.0.0.1:9/xr/%zz", "starts no escape"),
    ],
)
def test_what_http_client_cannot_send_as_written_is_refused(url, why):
    with pytest.raises(
        targets.TargetRefused, match="which a URL may not hold|starts no escape"
    ) as e:
        targets.target_of(url, PREFIX, resolving(PUBLIC))
    assert why in str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/xr/../admin/secret",
        "http://127.0.0.1:9/xr/..",
        "http://127.0.0.1:9/xr/./a",
        "http://127.0.0.1:9/xr/%2e%2e/admin",
        "http://127.0.0.1:9/xr/%2E%2E/admin",
        "http://127.0.0.1:9/xr/.%2e/admin",
        "http://127.0.0.1:9/xr/%2e./admin",
        "http://127.0.0.1:9/xr/%2E/admin",
        "http://127.0.0.1:9/xr/..;/admin",
        "http://127.0.0.1:9/xr/..;x=1/admin",
        "http://127.0.0.1:9/xr/..%2fadmin",
        "http://127.0.0.1:9/xr/..%2Fadmin",
        "http://127.0.0.1:9/xr/..%5cadmin",
        "http://127.0.0.1:9/xr/a%2fb",
        "http://127.0.0.1:9/xr/..%00/admin",
        "http://127.0.0.1:9/xr/a%0d%0aX-Evil:%201",
        "https://hooks.example.org/xr/../admin?x=1",
    ],
)
def test_dot_segments_and_encoded_slashes_are_refused_before_the_prefix_rule(url):
    with pytest.raises(targets.TargetRefused, match="dot segments|encoded slash"):
        targets.target_of(url, PREFIX, resolving(PUBLIC))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/xr/done",
        "http://127.0.0.1:9/xr/a.b/..c/c../...",  # dots inside a segment are names
        "http://127.0.0.1:9/xr/%C3%A9t%C3%A9",  # été, encoded
        "http://127.0.0.1:9/xr/a%20b",
        "http://127.0.0.1:9/xr/hook?next=%2F..%2Fadmin&x=../y",  # a query is no path
        "http://127.0.0.1:9/xr/hook#../frag",  # a fragment is not sent
        "http://127.0.0.1:9/xr/~user/-_.!$&'()*+,;=:@",
        "https://hooks.example.org/xr/job?id=1",
    ],
)
def test_a_url_in_rfc_3986_s_characters_without_dot_segments_is_called(url):
    target = targets.target_of(url, PREFIX, resolving(PUBLIC))
    assert target.addresses


def test_a_poison_url_is_refused_at_the_start_as_invalid_value_of_callback_url():
    settings = Settings(callbacks=CallbackSettings(allowed=PREFIX, secret=SECRET))
    for url in ("http://127.0.0.1:9/xr/été", "http://127.0.0.1:9/xr/../admin"):
        with pytest.raises(InvalidValueFault) as caught:
            targets.check_callback(url, None, settings, "")
        assert caught.value.parameter == "callback.url"
        assert caught.value.message.startswith("invalid value for callback.url: ")


# --------------------------------------------------------------------------- IPv4 in IPv6

CARRIERS_OF_LOOPBACK = [
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:7f00:1",
    "::127.0.0.1",  # IPv4-compatible
    "::7f00:1",
    "::ffff:0:7f00:1",  # IPv4-translated
    "64:ff9b::7f00:1",  # NAT64
    "64:ff9b::127.0.0.1",
    "2002:7f00:1::",  # 6to4
    "2002:7f00:1:1234::5",
]


@pytest.mark.parametrize("address", CARRIERS_OF_LOOPBACK)
def test_a_name_resolving_to_an_ipv6_carrier_of_loopback_is_refused(address):
    with pytest.raises(targets.TargetRefused, match=r"which carries 127\.0\.0\.1"):
        targets.target_of(
            "http://hooks.example.org/",
            allowed("hooks.example.org"),
            resolving({"hooks.example.org": [address]}),
        )


@pytest.mark.parametrize(
    "address, carried",
    [
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b::a00:5", "10.0.0.5"),
        ("2002:c0a8:101::1", "192.168.1.1"),
        ("::ffff:0:a00:5", "10.0.0.5"),
    ],
)
def test_other_inside_addresses_carried_are_refused_too(address, carried):
    with pytest.raises(targets.TargetRefused, match=carried.replace(".", r"\.")):
        targets.target_of(
            "http://hooks.example.org/",
            allowed(".example.org"),
            resolving({"hooks.example.org": [address]}),
        )


def test_nat64_s_local_use_prefix_is_judged_private():
    with pytest.raises(targets.TargetRefused, match="loopback, private or reserved"):
        targets.target_of(
            "http://hooks.example.org/",
            allowed("hooks.example.org"),
            resolving({"hooks.example.org": ["64:ff9b:1::5db8:d822"]}),
        )


@pytest.mark.parametrize(
    "address", ["64:ff9b::5db8:d822", "2002:5db8:d822::1", "::ffff:0:5db8:d822"]
)
def test_a_carrier_of_a_public_address_is_called(address):
    target = targets.target_of(
        "http://hooks.example.org/",
        allowed("hooks.example.org"),
        resolving({"hooks.example.org": [address]}),
    )
    assert target.addresses == (address,)  # connected to as resolved


@pytest.mark.parametrize("address", CARRIERS_OF_LOOPBACK)
def test_an_ipv6_literal_carrying_loopback_is_judged_as_loopback(address):
    """Its IPv6 network listed does not hold it (it is 127.0.0.1).  An address or
    network holding 127.0.0.1 holds an IPv4-mapped one, which the kernel sends to
    127.0.0.1; any other is sent to the IPv6 address itself, through a gateway (NAT64,
    6to4: what benchmarks/abuse.py's row t3 found going out by the default route), so
    the IPv6 address must be listed as well."""
    url = f"http://[{address}]:9/hook"
    rules = allowed("::/0", "2002::/16", "64:ff9b::/96", "::ffff:0:0/96", "::ffff:0:0:0/96")
    with pytest.raises(targets.TargetRefused, match=r"which carries 127\.0\.0\.1\) is not among"):
        targets.target_of(url, rules, resolving({}))
    if ipaddress.ip_address(address).ipv4_mapped is not None:
        target = targets.target_of(url, allowed("127.0.0.0/8"), resolving({}))
    else:
        with pytest.raises(targets.TargetRefused, match=r"through a NAT64 or 6to4 gateway"):
            targets.target_of(url, allowed("127.0.0.0/8"), resolving({}))
        target = targets.target_of(url, allowed("127.0.0.0/8", "::/0"), resolving({}))
    assert target.addresses == (address,)


def test_a_name_resolving_to_a_gateway_s_carrier_of_a_listed_address_is_refused():
    """127.0.0.1 listed, and a name listed that resolves to NAT64's 127.0.0.1: the
    connection would go to the gateway, not to 127.0.0.1."""
    with pytest.raises(targets.TargetRefused, match=r"through a NAT64 or 6to4 gateway"):
        targets.target_of(
            "http://hooks.example.org/",
            allowed("hooks.example.org", "127.0.0.1"),
            resolving({"hooks.example.org": ["64:ff9b::7f00:1"]}),
        )


# --------------------------------------------------------------------------- attempts


def event(url):
    """A CallbackEvent to ``url`` (fields the outbox may add later: None)."""
    known = {
        "seq": 1,
        "job_id": "job-1",
        "job_seq": 1,
        "owner": "",
        "url": url,
        "type": "job.finished",
        "status": "SUCCEEDED",
        "elapsed": 5,
        "progress": None,
        "created_at": 0,
        "attempts": 0,
    }
    return CallbackEvent(**{f.name: known.get(f.name) for f in dataclasses.fields(CallbackEvent)})


def test_any_failure_of_an_attempt_counts_as_one_and_is_retried(caplog):
    """An exception no sender expects (here from the resolver) is a failed attempt,
    logged in one line without a traceback, due again after the retry delay."""

    def broken(host, port):
        raise RuntimeError("resolver broke")

    settings = Settings(
        callbacks=CallbackSettings(allowed=allowed("127.0.0.1"), secret=SECRET, max_attempts=3)
    )
    delivery = CallbackDelivery(None, lambda: settings, "node", resolver=broken)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="xruntime.callbacks.delivery"):
        message, due = delivery._attempt(event("http://127.0.0.1:9/hook"))
        assert due is not None
        assert "failed: RuntimeError: resolver broke (attempt 1 of 3; next in" in message
        last = dataclasses.replace(event("http://127.0.0.1:9/hook"), attempts=2)
        message, due = delivery._attempt(last)
        assert due is None and "given up after attempt 3" in message
    assert [r.exc_info for r in caplog.records if r.levelno >= logging.INFO] == [None, None]


def test_a_poison_url_stored_before_this_check_is_given_up_at_its_attempt():
    settings = Settings(callbacks=CallbackSettings(allowed=allowed("127.0.0.1"), secret=SECRET))
    delivery = CallbackDelivery(None, lambda: settings, "node")  # type: ignore[arg-type]
    message, due = delivery._attempt(event("http://127.0.0.1:9/xr/été"))
    assert due is None and "refused: it holds 'é'" in message and "given up" in message
