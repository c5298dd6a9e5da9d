"""Accounts (docs/protocol.md §10) end to end, through real HTTP to real nodes with real clients:
each user sees only their own jobs in every binding (another user's job answers exactly
as an id never used), an admin sees and manages everyone's, fair shares under
``max_running`` (one node, and two nodes on PostgreSQL), ``max_queued``, missing, wrong
and revoked credentials in each binding's form, the WSDL with and without
``public_wsdl``, zeep, suds, JSON-RPC and curl authenticating, and accounts off
changing nothing.  No token may ever reach a server's log."""

import base64
import json
import os
import subprocess
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from lxml import etree

from tests.clients import (
    BINDINGS,
    RemoteFault,
    SudsClient,
    make_client,
    start,
    wait_done,
    wait_status,
    watch,
)
from tests.harness import Server, write_config
from xruntime.operations.accounts import new_token, token_sha256

CHALLENGE = 'Basic realm="xruntime"'
IN_FORCE = 2.0  # s: a live edit of the file is in force this soon (§5, §10)

#: Every user's token, fresh for each run; the file holds only their sha256.
TOKENS = {name: new_token() for name in ("alice", "bob", "carol", "dave", "quinn", "root")}
#: Tokens nobody has, sent as wrong credentials.
WRONG = [new_token() for _ in range(3)]
#: alice's token after a rotation (test_users_removed_rotated_and_added_live).
ROTATED = new_token()

#: The module's node: plain users, an admin, and quinn with quotas.
USERS = {
    "alice": {},
    "bob": {},
    "carol": {},
    "dave": {},
    "root": {"admin": True},
    "quinn": {"max_running": 1, "max_queued": 2},
}

SOAP_ENVELOPE = (
    b'<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" '
    b'xmlns:x="http://xruntime.org/xserver/xruntime"><soap:Body>'
    b"<x:getRuntimeInformation/></soap:Body></soap:Envelope>"
)


def accounts_toml(users, public_wsdl=None):
    """``[auth]`` and a ``[users.NAME]`` table per user, as an administrator writes them."""
    text = "\n[auth]\nrequired = true\n"
    if public_wsdl is not None:
        text += f"public_wsdl = {json.dumps(public_wsdl)}\n"
    for name, keys in users.items():
        text += f'\n[users.{name}]\ntoken_sha256 = "{token_sha256(TOKENS[name])}"\n'
        text += "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
    return text


def creds(user):
    return (user, TOKENS[user])


def client(binding, srv, user):
    return make_client(binding, srv.base, auth=creds(user))


def basic(user, token):
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def fault_of(call, *args, **kwargs):
    with pytest.raises(RemoteFault) as caught:
        call(*args, **kwargs)
    return caught.value


def fetch(c, job_id):
    return c.call("XDemo", "fetchSimulateResponse", {"id": job_id})


def counts(c):
    info = c.call("XRuntime", "getRuntimeInformation", {"withJobCounts": True})
    return {count["status"]: count["count"] for count in info["jobs"]}


def quiet(srv, timeout=20):
    """Wait until no job of anyone is queued, running, stopping or deleted-but-held, so
    that both workers are free and the counts stay as they are."""
    root = make_client("json", srv.base, auth=creds("root"))
    deadline = time.time() + timeout
    while True:
        now = counts(root)
        if not any(now[s] for s in ("QUEUING", "RUNNING", "STOPPING", "DELETED")):
            return now
        assert time.time() < deadline, f"the node never became quiet: {now}"
        time.sleep(0.05)


def swapped(value, old, new):
    """``value`` (an answer, or a fault's parts) with the id ``old`` written as ``new``."""
    return json.loads(json.dumps(value).replace(old, new))


def parts(fault):
    return {
        "type": fault.type,
        "message": fault.message,
        "fields": fault.fields,
        "status": fault.status,
        "code": fault.code,
    }


def secrets_in(text):
    """The tokens (and Basic encodings of them) found in ``text``."""
    found = []
    for token in list(TOKENS.values()) + WRONG + [ROTATED]:
        if token in text:
            found.append(token)
        for user in list(TOKENS) + ["xtok", "mallory"]:
            if base64.b64encode(f"{user}:{token}".encode()).decode() in text:
                found.append(f"{user}:{token} (Basic)")
    return found


def assert_no_token_logged(srv):
    log = srv.log()
    assert log, "the server wrote no log"
    assert secrets_in(log) == [], "a token is in the server's log"


def rewrite_config(srv, extra):
    """Replace the node's file as a whole (written aside, renamed in place), as a live
    edit by an administrator; the node re-reads it within IN_FORCE."""
    path = write_config(
        os.path.join(srv.folder, "edit"), srv.port, extra=extra, workers=srv.workers
    )
    os.replace(path, srv.config)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    """The module's node: [auth] required, USERS, 2 workers; the harness calls as root."""
    node = Server(
        str(tmp_path_factory.mktemp("accounts")),
        # (DEBUG: every start's QUEUING line, which names its user)
        extra=accounts_toml(USERS) + '\n[log]\nlevel = "debug"\n',
        auth=creds("root"),
        server_keys={"processes": 2},
    ).start()  # races across both
    yield node
    node.stop()


# ----------------------------------------------------------------------- credentials


def raw_call(srv, binding, authorization=None, user=None, token=None):
    """getRuntimeInformation in ``binding``'s own form, with an Authorization header (or
    requests' Basic from user/token); answers the requests Response."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    auth = (user, token) if user is not None else None
    if binding == "json":
        return requests.post(
            f"{srv.base}/services/rs/XRuntime/getRuntimeInformation",
            json={},
            headers=headers,
            auth=auth,
            timeout=10,
        )
    if binding == "soap":
        return requests.post(
            f"{srv.base}/services/ws/XRuntime",
            data=SOAP_ENVELOPE,
            auth=auth,
            headers={
                **headers,
                "Content-Type": "text/xml; charset=utf-8",
                "SOAPAction": '"getRuntimeInformation"',
            },
            timeout=10,
        )
    return requests.post(
        f"{srv.base}/services/rpc/XRuntime",
        headers=headers,
        auth=auth,
        timeout=10,
        json={"jsonrpc": "2.0", "method": "getRuntimeInformation", "params": {}, "id": 7},
    )


def assert_refused(r, binding):
    """401, the Basic challenge, and an AccessDeniedFault in the binding's own form."""
    assert r.status_code == 401, (r.status_code, r.text)
    assert r.headers.get("WWW-Authenticate") == CHALLENGE
    assert secrets_in(r.text) == []
    if binding == "json":
        body = r.json()
        assert body["faultInfo"]["$type"] == "AccessDeniedFault", body
        assert body["message"]
    elif binding == "soap":
        assert r.headers["Content-Type"].startswith("text/xml")
        root = etree.fromstring(r.content)
        ns = {"soap": "http://schemas.xmlsoap.org/soap/envelope/"}
        [fault] = root.findall("soap:Body/soap:Fault", ns)
        assert fault.findtext("faultcode").split(":")[-1] == "Client"
        assert fault.findtext("faultstring")
        [typed] = list(fault.find("detail"))
        assert etree.QName(typed).localname == "AccessDeniedFault"
    else:
        body = r.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert -32099 <= body["error"]["code"] <= -32000, body
        assert body["error"]["data"]["$type"] == "AccessDeniedFault", body
        assert body["error"]["message"]


def refusal_message(r, binding):
    if binding == "soap":
        return etree.fromstring(r.content).findtext(".//faultstring")
    body = r.json()
    return body["message"] if binding == "json" else body["error"]["message"]


def assert_served(r, binding):
    assert r.status_code == 200, (r.status_code, r.text)
    if binding == "soap":
        assert b"getRuntimeInformationResponse" in r.content
    elif binding == "json":
        assert r.json()["version"]
    else:
        assert r.json()["result"]["version"]


WRONG_CREDENTIALS = {
    "missing": {},
    "wrong token": {"user": "alice", "token": WRONG[0]},
    "other user's name with alice's token": {"user": "bob", "token": TOKENS["alice"]},
    "unknown user with alice's token": {"user": "mallory", "token": TOKENS["alice"]},
    "xtok with a wrong token": {"user": "xtok", "token": WRONG[1]},
    "Bearer with a wrong token": {"authorization": f"Bearer {WRONG[2]}"},
    "Bearer without a token": {"authorization": "Bearer "},
    "Basic that is not base64": {"authorization": "Basic %%%not-base64"},
    "Basic without a token": {"authorization": basic("alice", "")},
    "an unknown scheme": {"authorization": f"Token {TOKENS['alice']}"},
}


@pytest.mark.parametrize("binding", BINDINGS)
def test_missing_or_wrong_credentials_are_refused_in_the_bindings_form(srv, binding):
    for case, kwargs in WRONG_CREDENTIALS.items():
        r = raw_call(srv, binding, **kwargs)
        try:
            assert_refused(r, binding)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from exc
    # which part was wrong is not told
    messages = {
        case: refusal_message(raw_call(srv, binding, **WRONG_CREDENTIALS[case]), binding)
        for case in (
            "wrong token",
            "other user's name with alice's token",
            "unknown user with alice's token",
            "Bearer with a wrong token",
        )
    }
    assert len(set(messages.values())) == 1, messages
    # the same request with credentials is served: only the credentials were wrong
    assert_served(raw_call(srv, binding, user="alice", token=TOKENS["alice"]), binding)
    assert_served(raw_call(srv, binding, authorization=f"Bearer {TOKENS['alice']}"), binding)
    assert_served(raw_call(srv, binding, user="xtok", token=TOKENS["alice"]), binding)


@pytest.mark.parametrize("binding", ["json", "soap"])
def test_a_client_without_credentials_reads_the_refusal_as_a_typed_fault(srv, binding):
    """The refusal parsed by the binding's own client (zeep reads the WSDL's fault types)."""
    for auth in (None, ("alice", WRONG[0])):
        fault = fault_of(
            make_client(binding, srv.base, auth=auth).call, "XRuntime", "getRuntimeInformation", {}
        )
        assert fault.type == "AccessDeniedFault"
        if binding == "json":
            assert fault.status == 401
        else:
            assert fault.code.split(":")[-1] == "Client"


def test_basic_xtok_and_bearer_name_the_tokens_user(srv):
    """Each accepted form starts a job owned by the token's user (the name sent with
    xtok or Bearer does not matter, the token does)."""
    url = srv.url("XDemo", "startSimulate")
    forms = [
        ("alice", {"Authorization": basic("alice", TOKENS["alice"])}),
        ("alice", {"Authorization": basic("xtok", TOKENS["alice"])}),
        ("alice", {"Authorization": f"Bearer {TOKENS['alice']}"}),
        ("bob", {"Authorization": basic("xtok", TOKENS["bob"])}),
        ("bob", {"Authorization": f"bearer {TOKENS['bob']}"}),
    ]
    alice, bob = (
        make_client("json", srv.base, creds("alice")),
        make_client("json", srv.base, creds("bob")),
    )
    for owner, headers in forms:
        r = requests.post(url, json={"durationMs": 0}, headers=headers, timeout=10)
        assert r.status_code == 200, (headers, r.text)
        job = r.json()["id"]
        mine, theirs = (alice, bob) if owner == "alice" else (bob, alice)
        assert wait_done(mine, job)["status"] == "SUCCEEDED"
        assert watch(theirs, job)["status"] == "UNKNOWN"
        assert mine.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"


def test_the_wsdl_is_public_by_default(srv):
    for service in ("XRuntime", "XDemo"):
        r = requests.get(f"{srv.base}/services/ws/{service}?wsdl", timeout=10)
        assert r.status_code == 200, r.text
        assert etree.fromstring(r.content).get("name") == service
    # and the schema documents the WSDLs import, for the generators
    r = requests.get(f"{srv.base}/services/ws/schemas/types.xsd", timeout=10)
    assert r.status_code == 200 and b"JobStatus" in r.content
    # only the WSDL: the same path's operations need credentials
    assert_refused(raw_call(srv, "soap"), "soap")


# ----------------------------------------------------------------------- isolation


@pytest.mark.parametrize("binding", BINDINGS)
def test_another_users_job_is_an_id_never_used(srv, binding):
    """Bob gets for each of alice's jobs exactly what he gets for a fresh uuid (the id
    swapped), at once, and his watch, stop, delete and fetch change nothing of it."""
    quiet(srv)
    alice, bob = client(binding, srv, "alice"), client(binding, srv, "bob")
    job = start(alice, durationMs=3000, steps=6)["id"]
    wait_status(alice, job, "RUNNING")

    def as_never_used():
        never = str(uuid.uuid4())
        for id_ in (job, never):  # the watch answers at once, not at a period's end
            t0 = time.monotonic()
            seen = watch(bob, id_, progressUpdatePeriod=5000, maximumPollingPeriod=10000)
            took = time.monotonic() - t0
            # held, it would answer 5 s at the earliest: half of that tells "at once" on
            # any machine (0.52 s was seen on one 4× slower than this one)
            assert took < 2.5, f"bob's watch of {id_} took {took:.2f} s"
            assert seen == {"id": id_, "status": "UNKNOWN", "elapsedTime": 0}
        assert bob.call("XRuntime", "deleteJob", {"id": job}) == swapped(
            bob.call("XRuntime", "deleteJob", {"id": never}), never, job
        )
        for service, operation in (
            ("XRuntime", "stopJob"),
            ("XDemo", "fetchSimulateResponse"),
            ("XCrashy", "fetchCrashResponse"),  # (not InvalidFetchType)
            ("XRuntime", "getJobEvents"),
        ):
            for_job = parts(fault_of(bob.call, service, operation, {"id": job}))
            for_never = parts(fault_of(bob.call, service, operation, {"id": never}))
            assert for_job["type"] == "UnknownJobFault", for_job
            assert for_job == swapped(for_never, never, job), operation

    as_never_used()  # while it runs
    assert job not in [
        j["id"] for j in bob.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs", [])
    ]
    assert job in [j["id"] for j in alice.call("XRuntime", "listJobs", {"limit": 1000})["jobs"]]
    refused = fault_of(bob.call, "XRuntime", "listJobs", {"user": "alice"})
    assert refused.type == "AccessDeniedFault" and refused.status in (403, None)
    # untouched by bob: running still, or (on a slow machine, after bob's many calls)
    # done, with every step and no limitation (below): neither stopped nor deleted
    assert watch(alice, job, progressUpdatePeriod=250)["status"] in ("RUNNING", "SUCCEEDED")
    assert wait_done(alice, job)["status"] == "SUCCEEDED"
    as_never_used()  # and once it has its result
    result = fetch(alice, job)
    assert result["stepsDone"] == 6 and not result.get("resultLimitations"), result
    assert watch(alice, job)["status"] == "SUCCEEDED"
    assert alice.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"


@pytest.mark.parametrize("binding", BINDINGS)
def test_an_admin_sees_and_manages_every_users_jobs(srv, binding):
    quiet(srv)
    alice, bob, root = (client(binding, srv, user) for user in ("alice", "bob", "root"))
    done = {"alice": start(alice, durationMs=200)["id"], "bob": start(bob, durationMs=200)["id"]}
    for job in done.values():
        assert wait_done(root, job)["status"] == "SUCCEEDED"
        assert fetch(root, job)["stepsDone"] == 1
    # stop alice's running job and delete bob's
    a_run = start(alice, durationMs=20000, steps=40)["id"]
    b_run = start(bob, durationMs=20000, steps=40)["id"]
    for job in (a_run, b_run):
        while "progress" not in wait_status(root, job, "RUNNING"):
            pass
    assert root.call("XRuntime", "stopJob", {"id": a_run})["status"] == "STOPPING"
    assert root.call("XRuntime", "deleteJob", {"id": b_run})["status"] == "DELETED"
    assert wait_done(alice, a_run)["status"] == "SUCCEEDED"
    assert [e["message"] for e in root.call("XRuntime", "getJobEvents", {"id": a_run})["events"]][
        2
    ] == "stop asked"
    listed = {
        j["id"]: j.get("user")
        for j in root.call("XRuntime", "listJobs", {"limit": 1000, "status": ["SUCCEEDED"]})["jobs"]
    }
    assert listed[done["alice"]] == "alice" and listed[done["bob"]] == "bob"
    of_bob = [
        j["id"] for j in root.call("XRuntime", "listJobs", {"user": "bob", "limit": 1000})["jobs"]
    ]
    assert done["bob"] in of_bob and done["alice"] not in of_bob
    stopped = fetch(alice, a_run)
    assert 0 < stopped["stepsDone"] < 40 and stopped["resultLimitations"], stopped
    assert watch(bob, b_run)["status"] in ("DELETED", "UNKNOWN")
    assert fault_of(fetch, bob, b_run).type in ("UnknownJobFault", "JobStateFault")
    # delete their finished jobs: gone for their owners
    for user, job in done.items():
        assert root.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
        owner = alice if user == "alice" else bob
        assert watch(owner, job)["status"] == "UNKNOWN"
        assert fault_of(fetch, owner, job).type == "UnknownJobFault"
    assert root.call("XRuntime", "deleteJob", {"id": a_run})["status"] == "DELETED"


def test_job_counts_are_the_callers_own_and_an_admins_are_everyones(srv):
    quiet(srv)
    carol, dave = (
        make_client("json", srv.base, creds("carol")),
        make_client("json", srv.base, creds("dave")),
    )
    jobs = [
        (carol, start(carol, durationMs=0)["id"]),
        (carol, start(carol, durationMs=0)["id"]),
        (carol, start(carol, failAtStep=1)["id"]),
        (dave, start(dave, durationMs=0)["id"]),
    ]
    assert sorted(wait_done(c, j)["status"] for c, j in jobs) == ["FAILED"] + ["SUCCEEDED"] * 3
    quiet(srv)
    nothing = dict.fromkeys(("QUEUING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "DELETED"), 0)
    users = [user for user, keys in USERS.items() if not keys.get("admin")]
    for binding in BINDINGS:
        assert counts(client(binding, srv, "carol")) == {**nothing, "SUCCEEDED": 2, "FAILED": 1}
        assert counts(client(binding, srv, "dave")) == {**nothing, "SUCCEEDED": 1}
        assert counts(client(binding, srv, "bob")) == counts(client("json", srv, "bob"))
        everyone = counts(client(binding, srv, "root"))
        total = {
            status: sum(counts(client("json", srv, user))[status] for user in users)
            for status in nothing
        }
        assert everyone == total, (everyone, total)
    for c, j in jobs:
        assert c.call("XRuntime", "deleteJob", {"id": j})["status"] == "DELETED"
    assert counts(carol) == counts(dave) == nothing


# ----------------------------------------------------------------------- fair by default


def test_fair_by_default_bobs_job_does_not_wait_behind_alices_flood(srv):
    """No max_running set: alice queues 12 jobs of 3 s on the node's 2 workers, then bob
    starts one.  His job takes the next worker that frees (his lane runs none, hers 2)
    and is done while most of hers still wait; first in, first out, it would have run
    after all of hers, about 18 s later (docs/protocol.md §10)."""
    quiet(srv)
    alice, bob = client("json", srv, "alice"), client("json", srv, "bob")
    flood = [start(alice, durationMs=3000)["id"] for _ in range(12)]
    job = start(bob, durationMs=0)["id"]
    assert wait_done(bob, job, timeout=120)["status"] == "SUCCEEDED"
    waiting = counts(alice).get("QUEUING", 0)
    for flooded in flood:
        alice.call("XRuntime", "deleteJob", {"id": flooded})
    assert waiting >= 4, f"only {waiting} of alice's 12 jobs still queued when bob's ended"
    quiet(srv, timeout=60)


# ----------------------------------------------------------------------- max_queued


def test_past_max_queued_start_is_quota_exceeded_and_others_still_start(srv):
    """quinn: max_running 1, max_queued 2.  One job runs, two wait QUEUING (a worker is
    free: her max_running holds them); a fourth start is refused in every binding,
    stores nothing, and alice's starts are accepted meanwhile."""
    quiet(srv)
    root, quinn = (
        make_client("json", srv.base, creds("root")),
        make_client("json", srv.base, creds("quinn")),
    )
    running = start(quinn, durationMs=30000, steps=60)["id"]
    wait_status(quinn, running, "RUNNING")
    queued = [start(quinn, durationMs=0)["id"] for _ in range(2)]
    time.sleep(0.3)  # a free worker would have taken them by now
    mine = {**counts(quinn)}
    assert (mine["RUNNING"], mine["QUEUING"]) == (1, 2), mine
    # queued, running: to bob her jobs are still ids never used, and stay as they are
    never, bob = str(uuid.uuid4()), make_client("json", srv.base, creds("bob"))
    for job in (queued[0], running):
        assert watch(bob, job) == swapped(watch(bob, never), never, job)
        assert bob.call("XRuntime", "deleteJob", {"id": job}) == swapped(
            bob.call("XRuntime", "deleteJob", {"id": never}), never, job
        )
        assert parts(fault_of(bob.call, "XRuntime", "stopJob", {"id": job})) == swapped(
            parts(fault_of(bob.call, "XRuntime", "stopJob", {"id": never})), never, job
        )
    assert counts(quinn) == mine
    everyone = counts(root)
    for binding in BINDINGS:
        fault = fault_of(start, client(binding, srv, "quinn"), durationMs=0)
        assert fault.type == "QuotaExceededFault", parts(fault)
        assert "2" in fault.message
        if binding == "json":
            assert fault.status == 429
        elif binding == "soap":
            assert fault.code.split(":")[-1] == "Client"
        else:
            assert -32099 <= fault.code <= -32000, fault.code
        assert counts(quinn) == mine and counts(root) == everyone, (
            "the refused start stored something"
        )
        other = client(binding, srv, "alice")
        job = start(other, durationMs=0)["id"]
        assert wait_done(other, job)["status"] == "SUCCEEDED"
        assert other.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
    assert srv.log().count("QUEUING (user quinn)") == 3
    # a queued job fewer: she may start one again
    assert root.call("XRuntime", "deleteJob", {"id": queued[0]})["status"] == "DELETED"
    queued[0] = start(quinn, durationMs=0)["id"]
    assert counts(quinn) == mine
    assert fault_of(start, quinn, durationMs=0).type == "QuotaExceededFault"
    for job in queued:
        assert root.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
    # starts at once, through both HTTP processes: exactly max_queued are taken
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: try_start(client("json", srv, "quinn")), range(8)))
    assert sorted(answers, key=str) == ["QUEUING", "QUEUING"] + ["QuotaExceededFault"] * 6, answers
    assert (counts(quinn)["RUNNING"], counts(quinn)["QUEUING"]) == (1, 2)
    for job in quinn_jobs(srv):
        root.call("XRuntime", "deleteJob", {"id": job})
    quiet(srv)
    assert counts(quinn) == dict.fromkeys(mine, 0)


def try_start(c):
    try:
        return start(c, durationMs=0)["status"]
    except RemoteFault as fault:
        return fault.type


def quinn_jobs(srv):
    """The ids of quinn's jobs the log names as queued."""
    return [
        line.split("job ")[1].split()[0]
        for line in srv.log().splitlines()
        if line.endswith("QUEUING (user quinn)")
    ]


# ----------------------------------------------------------------------- real clients


def life(c, owner, srv):
    """start, watch until SUCCEEDED, fetch; the job is ``owner``'s (bob cannot see it)."""
    job = start(c, durationMs=300, steps=3)
    assert job["status"] == "QUEUING"
    assert wait_done(c, job["id"])["status"] == "SUCCEEDED"
    assert fetch(c, job["id"])["stepsDone"] == 3
    assert watch(make_client("json", srv.base, creds(owner)), job["id"])["status"] == "SUCCEEDED"
    assert watch(make_client("json", srv.base, creds("bob")), job["id"])["status"] == "UNKNOWN"
    assert c.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "DELETED"


def test_zeep_with_http_basic_auth(srv):
    life(make_client("soap", srv.base, auth=creds("alice")), "alice", srv)


@pytest.fixture
def challenges(monkeypatch):
    """Counts the 401 challenges urllib's HTTPBasicAuthHandler answers (suds'
    HttpAuthenticated uses it): a list, one item per challenge."""
    answered = []
    original = urllib.request.HTTPBasicAuthHandler.http_error_401

    def counted(self, req, fp, code, msg, headers):
        answered.append(headers.get("WWW-Authenticate"))
        return original(self, req, fp, code, msg, headers)

    monkeypatch.setattr(urllib.request.HTTPBasicAuthHandler, "http_error_401", counted)
    return answered


def test_suds_answers_the_challenge(srv, challenges):
    """suds' default HttpAuthenticated sends the credentials only after a 401 challenge."""
    life(SudsClient(srv.base, auth=creds("carol")), "carol", srv)
    assert challenges and set(challenges) == {CHALLENGE}


def test_suds_sending_credentials_with_every_request(srv, challenges):
    """suds.transport.http's HttpAuthenticated (Basic on every request, never challenged)."""
    life(SudsClient(srv.base, auth=creds("carol"), challenge=False), "carol", srv)
    assert challenges == []


def test_jsonrpc_clients(srv, challenges):
    # requests, credentials sent with every call
    life(make_client("jsonrpc", srv.base, auth=creds("alice")), "alice", srv)
    assert challenges == []
    # urllib's HTTPBasicAuthHandler: the credentials only once challenged
    life(UrllibJsonRpc(srv.base, creds("dave")), "dave", srv)
    assert challenges and set(challenges) == {CHALLENGE}


class UrllibJsonRpc:
    """JSON-RPC over the standard library's urllib, which answers a Basic challenge."""

    def __init__(self, base, auth):
        self.base = base
        passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        passwords.add_password(None, base, *auth)
        self.opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))

    def call(self, service, operation, request=None):
        data = json.dumps(
            {"jsonrpc": "2.0", "method": operation, "params": request or {}, "id": 1}
        ).encode()
        req = urllib.request.Request(
            f"{self.base}/services/rpc/{service}",
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with self.opener.open(req, timeout=70) as r:
            body = json.loads(r.read())
        if "error" in body:
            info = dict(body["error"]["data"])
            raise RemoteFault(
                info.pop("$type"), body["error"]["message"], info, code=body["error"]["code"]
            )
        return body["result"]


def test_curl_with_basic_and_bearer(srv):
    """curl as the operations guide shows it: -u alice:TOKEN, or a Bearer header."""

    def curl(*args):
        out = subprocess.run(
            ["curl", "-s", "-w", "\n%{http_code}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        body, _, code = out.rpartition("\n")
        return int(code), json.loads(body)

    url = srv.url("XDemo", "startSimulate")
    code, job = curl(
        "-u",
        f"alice:{TOKENS['alice']}",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"durationMs": 0}',
        url,
    )
    assert code == 200 and job["status"] == "QUEUING"
    code, answer = curl(
        "-H",
        f"Authorization: Bearer {TOKENS['alice']}",
        "-H",
        "Content-Type: application/json",
        "-d",
        json.dumps({"id": job["id"]}),
        srv.url("XRuntime", "deleteJob"),
    )
    assert code == 200 and answer["status"] == "DELETED"
    code, answer = curl("-d", "{}", srv.url("XRuntime", "getRuntimeInformation"))
    assert code == 401 and answer["faultInfo"]["$type"] == "AccessDeniedFault"


def test_no_token_in_the_log(srv):
    """Refusals are logged with the address, never the credentials (this module's
    calls sent every token, right and wrong)."""
    deadline = time.time() + 3  # (at most one such line a second)
    while (
        "refused POST /services/rs/XRuntime/getRuntimeInformation from 127.0.0.1" not in srv.log()
    ):
        assert time.time() < deadline, "no refusal logged"
        assert_refused(raw_call(srv, "json", user="alice", token=WRONG[0]), "json")
        time.sleep(0.1)
    assert_no_token_logged(srv)


# ----------------------------------------------------------------------- fair shares

FAIR_USERS = {"alice": {"max_running": 1}, "bob": {}, "root": {"admin": True}}
HER_JOBS, HER_JOB_S = 5, 2.0  # one at a time, alice's jobs take HER_JOBS × HER_JOB_S
PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


def fair_shares(nodes):
    """alice (max_running 1) starts 5 jobs of 2 s, then bob one: bob's runs at once on a
    free worker, alice never has 2 running on all ``nodes`` together (sampled as she
    sees her counts, one query each), and her 5 run one after the other."""
    alices = [make_client("json", n.base, creds("alice")) for n in nodes]
    bob = make_client("json", nodes[-1].base, creds("bob"))
    t_first = time.monotonic()
    hers = [
        start(alices[i % len(alices)], durationMs=int(HER_JOB_S * 1000), steps=10)["id"]
        for i in range(HER_JOBS)
    ]
    t0 = time.monotonic()
    his = start(bob, durationMs=1000, steps=5)["id"]
    while (
        watch(bob, his, progressUpdatePeriod=250, maximumPollingPeriod=250)["status"] == "QUEUING"
    ):
        assert time.monotonic() - t0 < 1.0, "bob's job waited behind alice's"
    first = counts(alices[0])
    assert (first["RUNNING"], first["QUEUING"]) == (1, HER_JOBS - 1), first
    samples = []
    while True:
        now = counts(alices[-1 if len(samples) % 2 else 0])
        samples.append(now)
        assert now["RUNNING"] + now["STOPPING"] <= 1, f"alice has 2 running: {now}"
        assert now["QUEUING"] + now["RUNNING"] + now["SUCCEEDED"] == HER_JOBS, now
        if now["SUCCEEDED"] == HER_JOBS:
            break
        assert time.monotonic() - t_first < HER_JOBS * HER_JOB_S + 20, (
            f"alice's jobs never ended: {now}"
        )
        time.sleep(0.05)
    span = time.monotonic() - t_first
    assert span >= HER_JOBS * HER_JOB_S * 0.95, (
        f"her {HER_JOBS} jobs took {span:.1f} s: not one at a time"
    )
    assert span < HER_JOBS * HER_JOB_S + 5, f"her jobs took {span:.1f} s: they waited for nothing"
    assert len(samples) > 50 and sum(s["RUNNING"] == 1 for s in samples) > 0.8 * len(samples)
    assert wait_done(bob, his)["status"] == "SUCCEEDED"
    for i, job in enumerate(hers):
        assert fetch(alices[i % len(alices)], job)["stepsDone"] == 10


def test_fair_shares_on_one_node(fresh_server):
    node = fresh_server(extra=accounts_toml(FAIR_USERS), auth=creds("root"), workers=2).start()
    fair_shares([node])
    assert_no_token_logged(node)


@pytest.mark.skipif(not PG_URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")
def test_fair_shares_across_two_nodes_on_postgresql(tmp_path):
    """Two nodes of 2 workers on one database: alice's max_running holds for both together."""
    from sqlalchemy import MetaData, create_engine

    engine = create_engine(PG_URL)
    tables = MetaData()
    tables.reflect(engine)  # every table, those of other versions too (job_events...)
    tables.drop_all(engine)
    engine.dispose()
    nodes = []
    try:
        for name in ("a", "b"):
            nodes.append(
                Server(
                    str(tmp_path / name),
                    database_url=PG_URL,
                    workers=2,
                    extra=accounts_toml(FAIR_USERS),
                    auth=creds("root"),
                ).start()
            )
        fair_shares(nodes)
        for node in nodes:
            assert_no_token_logged(node)
    finally:
        for node in nodes:
            node.stop()


# ----------------------------------------------------------------------- nodes of their own


def wait_for_edit(node, user, token, want, others=()):
    """Call as ``user`` until the answer's status is ``want`` (the edit is in force);
    each ``others`` (user, token) is served meanwhile.  Answers the seconds it took."""
    t0 = time.monotonic()
    while True:
        r = raw_call(node, "json", user=user, token=token)
        took = time.monotonic() - t0
        if r.status_code == want:
            return took
        assert r.status_code in (200, 401), r.text
        assert took < IN_FORCE, f"{user}: still {r.status_code} {took:.1f} s after the edit"
        for other in others:
            assert_served(raw_call(node, "json", user=other[0], token=other[1]), "json")
        time.sleep(0.05)


def test_users_removed_rotated_and_added_live(fresh_server):
    users = {"alice": {}, "bob": {}, "root": {"admin": True}}
    node = fresh_server(extra=accounts_toml(users), auth=creds("root")).start()
    alice, bob = (
        make_client("json", node.base, creds("alice")),
        make_client("json", node.base, creds("bob")),
    )
    root = make_client("json", node.base, creds("root"))
    his, hers = start(bob, durationMs=1500, steps=3)["id"], start(alice, durationMs=0)["id"]
    now = counts(bob)
    assert now["QUEUING"] + now["RUNNING"] == 1, now
    # bob's table removed: refused within 2 s, alice served all along
    del users["bob"]
    rewrite_config(node, accounts_toml(users))
    wait_for_edit(node, "bob", TOKENS["bob"], 401, others=[creds("alice")])
    for binding in BINDINGS:
        assert_refused(raw_call(node, binding, user="bob", token=TOKENS["bob"]), binding)
        assert_refused(raw_call(node, binding, authorization=f"Bearer {TOKENS['bob']}"), binding)
        assert_served(raw_call(node, binding, user="alice", token=TOKENS["alice"]), binding)
    # his job stays his: it runs to its end, an admin fetches it, alice still cannot
    assert wait_done(root, his)["status"] == "SUCCEEDED"
    assert fetch(root, his)["stepsDone"] == 3
    assert watch(alice, his)["status"] == "UNKNOWN"
    # alice's token rotated and carol added: the old token refused, her jobs still hers
    text = accounts_toml({**users, "carol": {}}).replace(
        token_sha256(TOKENS["alice"]), token_sha256(ROTATED)
    )
    rewrite_config(node, text)
    wait_for_edit(node, "carol", TOKENS["carol"], 200)
    wait_for_edit(node, "alice", TOKENS["alice"], 401)
    assert_refused(raw_call(node, "soap", user="alice", token=TOKENS["alice"]), "soap")
    rotated = make_client("json", node.base, ("alice", ROTATED))
    assert watch(rotated, hers)["status"] == "SUCCEEDED"
    assert fetch(rotated, hers)["stepsDone"] == 1
    assert watch(make_client("json", node.base, creds("carol")), hers)["status"] == "UNKNOWN"
    assert "refused POST /services/rs/XRuntime/getRuntimeInformation from 127.0.0.1" in node.log()
    assert_no_token_logged(node)


def test_a_private_wsdl_needs_credentials(fresh_server):
    node = fresh_server(
        extra=accounts_toml({"alice": {}, "root": {"admin": True}}, public_wsdl=False),
        auth=creds("root"),
    ).start()
    url = f"{node.base}/services/ws/XDemo?wsdl"
    r = requests.get(url, timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == CHALLENGE
    assert b"AccessDeniedFault" in r.content and b"definitions" not in r.content
    assert requests.get(url, auth=("alice", WRONG[0]), timeout=10).status_code == 401
    for headers in (
        {"Authorization": basic("alice", TOKENS["alice"])},
        {"Authorization": f"Bearer {TOKENS['alice']}"},
    ):
        r = requests.get(url, headers=headers, timeout=10)
        assert r.status_code == 200 and etree.fromstring(r.content).get("name") == "XDemo"
    schema = f"{node.base}/services/ws/schemas/types.xsd"  # private as the WSDL is
    assert requests.get(schema, timeout=10).status_code == 401
    assert requests.get(schema, auth=creds("alice"), timeout=10).status_code == 200
    # zeep fetches the WSDL with its session's credentials; suds answers the challenge
    for c in (
        make_client("soap", node.base, auth=creds("alice")),
        SudsClient(node.base, auth=creds("alice")),
    ):
        job = start(c, durationMs=0)["id"]
        assert wait_done(c, job)["status"] == "SUCCEEDED"
        assert fetch(c, job)["stepsDone"] == 1
    with pytest.raises(requests.HTTPError) as refused:  # zeep cannot read the WSDL
        make_client("soap", node.base).call("XRuntime", "getRuntimeInformation", {})
    assert refused.value.response.status_code == 401
    assert_no_token_logged(node)


def test_auth_off_ignores_credentials(fresh_server):
    """Without [auth], credentials (right or wrong) change nothing: everyone is the
    anonymous user and sees every job."""
    node = fresh_server().start()
    clients = [make_client(binding, node.base, auth=("mallory", WRONG[0])) for binding in BINDINGS]
    clients.append(SudsClient(node.base, auth=("mallory", WRONG[1])))
    anonymous = make_client("json", node.base)
    for c in clients:
        job = start(c, durationMs=0)["id"]
        assert wait_done(c, job)["status"] == "SUCCEEDED"
        assert fetch(c, job)["stepsDone"] == 1
        assert watch(anonymous, job)["status"] == "SUCCEEDED"
    r = requests.post(
        node.url("XRuntime", "getRuntimeInformation"),
        json={"withJobCounts": True},
        headers={"Authorization": f"Bearer {WRONG[2]}"},
        timeout=10,
    )
    assert r.status_code == 200 and "WWW-Authenticate" not in r.headers
    assert {c["status"]: c["count"] for c in r.json()["jobs"]}["SUCCEEDED"] == len(clients)
    assert requests.get(f"{node.base}/services/ws/XDemo?wsdl", timeout=10).status_code == 200
    assert "refused" not in node.log()
    assert_no_token_logged(node)


def test_a_refused_path_cannot_forge_a_log_line(srv):
    """benchmarks/abuse.py, item 9: a "%0a" in the path of a refused request wrote a line of the
    client's choosing into the log. The path is logged escaped, on the refusal's line."""
    forged = "2026-01-01 00:00:00,000 CRITICAL xruntime[1]: the admin token is hunter2"
    deadline = time.time() + 10
    while "startSimulate\\n2026-01-01" not in srv.log():  # (refusals are logged once a second)
        assert time.time() < deadline, "the refusal was not logged"
        r = requests.post(
            f"{srv.base}/services/rs/XDemo/startSimulate%0a{forged.replace(' ', '%20')}",
            json={},
            timeout=10,
        )
        assert r.status_code == 401
        time.sleep(0.3)
    assert not any(line.startswith(forged) for line in srv.log().splitlines())
