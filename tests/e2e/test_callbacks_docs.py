"""The receivers of docs/callbacks.md, run as written against real callbacks of a real
node: each accepts what the node signed and refuses a body or signature changed."""

import re

import pytest

from tests.harness import ROOT, Server
from tests.receiver import Receiver

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="


def snippets():
    with open(f"{ROOT}/docs/callbacks.md", encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture(scope="module")
def deliveries(tmp_path_factory):
    receiver = Receiver()
    extra = f'\n[callbacks]\nallowed = ["127.0.0.1"]\nsecret = "{SECRET}"\n'
    srv = Server(str(tmp_path_factory.mktemp("node")), extra=extra).start()
    try:
        for request in ({}, {"failAtStep": 1}):
            body = {"callback": {"url": receiver.url}, **request}
            assert srv.session.post(srv.url("XDemo", "startSimulate"), json=body).ok
        yield receiver.wait_for(lambda rs: len(rs) == 2)
    finally:
        srv.stop()
        receiver.stop()


@pytest.mark.parametrize("code", snippets(), ids=["standardwebhooks", "hmac"])
def test_the_documented_receiver_verifies_real_callbacks(code, deliveries):
    assert len(snippets()) == 2
    scope: dict = {}
    exec(code, scope)  # the documentation's code, as written
    verify = scope["verify"]
    for delivery in deliveries:
        event = verify(delivery.body, delivery.headers, SECRET)
        assert event["type"] == "job.finished" and event["status"] in ("SUCCEEDED", "FAILED")
        with pytest.raises(Exception):  # noqa: B017 (each snippet raises its own)
            verify(
                delivery.body.replace(b"job.finished", b"job.progress"), delivery.headers, SECRET
            )
        forged = dict(delivery.headers, **{"webhook-id": delivery.headers["webhook-id"] + "0"})
        with pytest.raises(Exception):  # noqa: B017
            verify(delivery.body, forged, SECRET)
