"""The administrator's file (docs/protocol.md §5, §8): defaults, every key, durations, errors
with their line, per-service overrides, request timeouts and ``check-config``."""

import os
import textwrap

import pytest

from xruntime import cli
from xruntime.settings import config
from xruntime.settings.config import ConfigError, JobSettings, Settings, parse_duration

KNOWN = ["XRuntime", "XDemo"]

FULL = """\
[server]
host = "0.0.0.0"
port = 8080
public_url = "https://example.org/xr/"
threads = 50
processes = 3
max_request_bytes = 2048

[database]
url = "sqlite:///../data/other.db"

[workers]
count = 4

[jobs]
unfetched_retention = "7d"
fetched_retention = "30s"
queueing_timeout = "15m"
computation_timeout = "48h"
max_queued = 500
max_attempts = 5
cleanup_interval = "500ms"

[services.XDemo]
enabled = false
max_queued = 7
"""


def write(folder, text, name="xserver.toml"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def errors_of(text, known_services=KNOWN):
    with pytest.raises(ConfigError) as excinfo:
        config.parse(textwrap.dedent(text), "xserver.toml", known_services)
    return excinfo.value.errors


def single_error(text, line):
    errors = errors_of(text)
    assert len(errors) == 1, errors
    assert f"line {line}" in errors[0], errors[0]
    assert errors[0].startswith(f"line {line}:"), errors[0]
    return errors[0]


# --------------------------------------------------------------------------- defaults


def test_defaults_when_there_is_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = config.load(None, known_services=KNOWN)
    assert (
        settings.host,
        settings.port,
        settings.public_url,
        settings.threads,
        settings.processes,
        settings.max_request_bytes,
        settings.workers,
    ) == ("127.0.0.1", 50000, "", 32, 0, 10485760, 2)
    assert settings.http_processes() == os.cpu_count(), "0 processes: one per core"
    assert settings.jobs == JobSettings(
        unfetched_retention_ms=48 * 3600_000,
        fetched_retention_ms=15 * 60_000,
        queueing_timeout_ms=0,
        computation_timeout_ms=0,
        max_queued=10000,
        max_attempts=3,
        cleanup_interval_ms=60_000,
    )
    assert settings.service_enabled("XDemo")
    assert settings.jobs_for("XDemo") == settings.jobs
    assert settings.database_url.startswith("sqlite:///")
    db = settings.database_url[len("sqlite:///") :]
    assert os.path.isabs(db) and db.endswith(os.path.join("data", "xruntime.db"))


def test_default_file_under_the_working_directory_is_read(tmp_path, monkeypatch):
    write(tmp_path / "config", "[workers]\ncount = 7\n")
    monkeypatch.chdir(tmp_path)
    assert config.load(None, known_services=KNOWN).workers == 7


def test_an_empty_file_is_the_defaults(tmp_path):
    settings = config.load(write(tmp_path, ""), known_services=KNOWN)
    assert settings.jobs == JobSettings()
    assert (settings.host, settings.port, settings.workers) == ("127.0.0.1", 50000, 2)


def test_the_shipped_file_is_valid():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    settings = config.load(os.path.join(root, "config", "xserver.toml"), known_services=KNOWN)
    assert settings.jobs == JobSettings()
    assert settings.port == 50000


# --------------------------------------------------------------------------- a full file


def test_a_valid_file_with_every_key(tmp_path):
    path = write(tmp_path / "config", FULL)
    s = config.load(path, known_services=KNOWN)
    assert s.host == "0.0.0.0"
    assert s.port == 8080
    assert s.public_url == "https://example.org/xr"
    assert s.threads == 50
    assert s.processes == 3 and s.http_processes() == 3
    assert s.max_request_bytes == 2048
    assert s.workers == 4
    assert s.database_url == "sqlite:///" + str(tmp_path / "data" / "other.db"), (
        "relative paths are relative to the file's own folder"
    )
    assert s.jobs == JobSettings(
        unfetched_retention_ms=7 * 86400_000,
        fetched_retention_ms=30_000,
        queueing_timeout_ms=15 * 60_000,
        computation_timeout_ms=48 * 3600_000,
        max_queued=500,
        max_attempts=5,
        cleanup_interval_ms=500,
    )
    assert not s.service_enabled("XDemo")
    assert s.service_enabled("XRuntime")
    assert s.path == os.path.abspath(path)


def test_postgresql_url_is_kept(tmp_path):
    url = "postgresql+psycopg://user@db.example.org/xr"
    s = config.load(write(tmp_path, f'[database]\nurl = "{url}"\n'), known_services=KNOWN)
    assert s.database_url == url


def test_absolute_sqlite_path_is_kept(tmp_path):
    db = tmp_path / "elsewhere" / "x.db"
    s = config.load(
        write(tmp_path / "config", f'[database]\nurl = "sqlite:///{db}"\n'), known_services=KNOWN
    )
    assert s.database_url == f"sqlite:///{db}"


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    "value, ms",
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("48h", 172_800_000),
        ("7d", 604_800_000),
        ("0", 0),
        (0, 0),
        (0.0, 0),
        ("2.5s", 2500),
    ],
)
def test_parse_duration(value, ms):
    assert parse_duration(value) == ms


@pytest.mark.parametrize(
    "value, ms",
    [
        ('"500ms"', 500),
        ('"30s"', 30_000),
        ('"15m"', 900_000),
        ('"48h"', 172_800_000),
        ('"7d"', 604_800_000),
        ('"0"', 0),
        ("0", 0),
    ],
)
def test_durations_in_the_file(value, ms):
    s = config.parse(
        f"[jobs]\nfetched_retention = {value}\ncomputation_timeout = {value}\n", "f.toml", KNOWN
    )
    assert s.jobs.fetched_retention_ms == ms
    assert s.jobs.computation_timeout_ms == ms


@pytest.mark.parametrize("value", ["soon", "-5s", "5 years", "", "1e3", True, -1, [1]])
def test_parse_duration_refuses(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize("value", ["5000", "0.25", "120"])
def test_a_duration_without_a_unit_is_refused_with_both_forms(value):
    """``queueing_timeout = 5000`` was 83 minutes (a plain number meant seconds here and
    milliseconds in a request): refused, the message showing both spellings, and
    check-config says so with the line."""
    message = single_error(f"[jobs]\nqueueing_timeout = {value}\n", 2)
    assert f'"{value}s"' in message and f'"{value}ms"' in message, message
    assert "queueing_timeout" in message
    message = single_error(f'[jobs]\nqueueing_timeout = "{value}"\n', 2)
    assert f'"{value}s"' in message and f'"{value}ms"' in message, message


# --------------------------------------------------------------------------- errors with lines


def test_unknown_key_names_its_line():
    message = single_error(
        """\
        [server]
        host = "h"

        [jobs]
        max_queued = 5
        fetched_retension = "1m"
        """,
        6,
    )
    assert "fetched_retension" in message


def test_unknown_key_in_a_service_table_names_its_line():
    message = single_error(
        """\
        [services.XDemo]
        enabled = true
        colour = "blue"
        """,
        3,
    )
    assert "colour" in message


def test_unknown_table_names_its_line():
    message = single_error(
        """\
        [server]
        port = 1234

        [servers]
        port = 1
        """,
        4,
    )
    assert "servers" in message


@pytest.mark.parametrize(
    "text, line, key",
    [
        ('[server]\nhost = "h"\nport = "fifty"\n', 3, "port"),
        ("[server]\nthreads = 1.5\n", 2, "threads"),
        ("[server]\n\nprocesses = -1\n", 3, "processes"),
        ('[server]\nprocesses = "auto"\n', 2, "processes"),
        ('[workers]\n\n\ncount = "2"\n', 4, "count"),
        ("[jobs]\nmax_queued = true\n", 2, "max_queued"),
        ('[jobs]\nmax_attempts = "3"\n', 2, "max_attempts"),
        ("[database]\nurl = 5\n", 2, "url"),
        ('[services.XDemo]\nenabled = "yes"\n', 2, "enabled"),
        ('[services.XDemo]\nenabled = true\nmax_queued = "ten"\n', 3, "max_queued"),
        ('[server]\npublic_url = "ftp://x"\n', 2, "public_url"),
        ("[server]\nport = 70000\n", 2, "port"),
        ("[jobs]\nmax_attempts = 0\n", 2, "max_attempts"),
        ('[server]\nallowed_origins = "https://a.example"\n', 2, "allowed_origins"),
        ('[server]\nallowed_origins = ["https://a.example/app"]\n', 2, "allowed_origins"),
        ('[server]\n\nallowed_origins = ["a.example"]\n', 3, "allowed_origins"),
        ('[server]\nallowed_hosts = ["http://a.example"]\n', 2, "allowed_hosts"),
        ('[server]\nallowed_hosts = ["a.example:80"]\n', 2, "allowed_hosts"),
        ("[server]\nallowed_hosts = [1]\n", 2, "allowed_hosts"),
        ('[server]\nnode_name = "two words"\n', 2, "node_name"),
        ("[server]\nnode_name = 5\n", 2, "node_name"),
    ],
)
def test_wrong_type_or_value_names_its_line(text, line, key):
    assert key in single_error(text, line)


@pytest.mark.parametrize(
    "key",
    [
        "unfetched_retention",
        "fetched_retention",
        "queueing_timeout",
        "computation_timeout",
        "cleanup_interval",
    ],
)
@pytest.mark.parametrize("value", ['"-5s"', "-3", '"-1ms"', "-0.5"])
def test_negative_duration_names_its_line(key, value):
    message = single_error(f"# comment\n[jobs]\nmax_queued = 3\n{key} = {value}\n", 4)
    assert key in message


@pytest.mark.parametrize(
    "value",
    ['"soon"', '"15 minutes"', '"15min"', "true", '""', "[1, 2]", "{ m = 15 }", "nan", "inf"],
)
def test_fetched_retention_that_is_not_a_duration_names_its_line(value):
    message = single_error(f"[jobs]\nmax_queued = 3\n\nfetched_retention = {value}\n", 4)
    assert "fetched_retention" in message


@pytest.mark.parametrize(
    "text, line",
    [
        ('# jobs, written with dotted keys\n\njobs.max_queued = "a"\n', 3),
        ('[server]\nhost = "h"\n\n[services]\nXDemo = { enabled = true, max_queued = "a" }\n', 5),
        ('[services.XDemo]\nenabled = true\n[services.XRuntime]\n"max_queued" = "b"\n', 4),
    ],
    ids=["dotted-key", "inline-table", "quoted-key"],
)
def test_other_toml_spellings_name_the_right_line(text, line):
    """Dotted keys, inline tables and quoted keys are TOML too; their errors must name
    the line the key is on."""
    assert "max_queued" in single_error(text, line)


def test_fetched_retention_in_a_service_table_that_is_not_a_duration():
    assert "fetched_retention" in single_error(
        '[services.XDemo]\nenabled = true\nfetched_retention = "soon"\n', 3
    )


def test_cleanup_interval_must_be_longer_than_zero():
    assert "cleanup_interval" in single_error('[jobs]\ncleanup_interval = "0"\n', 2)


@pytest.mark.parametrize(
    "text, line",
    [
        ('[server]\nhost = "h"\nport = \n', 3),
        ('[server]\nhost = "h\n', 2),
        ("[jobs]\nmax_queued = 1\nmax_queued = 2\n", 3),
        ("[server\nport = 1\n", 1),
        ("\n\n\n[jobs]\nfetched_retention = 15m\n", 5),
    ],
)
def test_invalid_toml_names_its_line(text, line):
    errors = errors_of(text)
    assert len(errors) == 1
    assert errors[0].startswith(f"line {line}:"), errors[0]


def test_unknown_service_table_names_its_line():
    message = single_error("[jobs]\nmax_queued = 3\n\n[services.XDemox]\nenabled = true\n", 4)
    assert "XDemox" in message


def test_any_service_is_accepted_without_a_list_of_known_ones():
    s = config.parse("[services.Whatever]\nenabled = false\n", "f.toml", None)
    assert not s.service_enabled("Whatever")


def test_every_error_is_reported_each_with_its_line():
    errors = errors_of("""\
        [server]
        port = "x"
        colour = 1

        [jobs]
        fetched_retention = "soon"
        unfetched_retention = "-1h"

        [services.Nope]
        enabled = true
        """)
    assert len(errors) == 5, errors
    assert sorted(int(e.split(":")[0].split()[1]) for e in errors) == [2, 3, 6, 7, 9]


def test_an_invalid_file_is_never_half_applied(tmp_path):
    path = write(tmp_path, '[workers]\ncount = 9\n[jobs]\nmax_queued = "x"\n')
    with pytest.raises(ConfigError):
        config.load(path, known_services=KNOWN)


def test_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError):
        config.load(str(tmp_path / "nope.toml"), known_services=KNOWN)


# --------------------------------------------------------------------------- per service


def test_service_table_overrides_a_jobs_key_for_that_service_alone():
    s = config.parse(
        """\
        [jobs]
        max_queued = 100
        fetched_retention = "10m"

        [services.XDemo]
        fetched_retention = "1m"
        computation_timeout = "30s"
        """,
        "f.toml",
        KNOWN,
    )
    demo = s.jobs_for("XDemo")
    assert demo.fetched_retention_ms == 60_000
    assert demo.computation_timeout_ms == 30_000
    assert demo.max_queued == 100, "keys not repeated come from [jobs]"
    assert s.jobs.fetched_retention_ms == 600_000, "[jobs] itself is unchanged"
    assert s.jobs.computation_timeout_ms == 0
    assert s.jobs_for("XRuntime") == s.jobs
    assert s.service_enabled("XDemo")


def test_service_table_without_job_keys_uses_jobs():
    s = config.parse("[jobs]\nmax_queued = 4\n[services.XDemo]\nenabled = true\n", "f.toml", KNOWN)
    assert s.jobs_for("XDemo").max_queued == 4


# --------------------------------------------------------------------------- request timeouts


def limits_settings(queueing="10s", computation="60s", demo_computation=None):
    text = f'[jobs]\nqueueing_timeout = "{queueing}"\ncomputation_timeout = "{computation}"\n'
    if demo_computation is not None:
        text += f'[services.XDemo]\ncomputation_timeout = "{demo_computation}"\n'
    return config.parse(text, "f.toml", KNOWN)


@pytest.mark.parametrize(
    "asked_q, asked_c, expected",
    [
        (None, None, (10_000, 60_000)),
        (5_000, 30_000, (5_000, 30_000)),  # a request may shorten
        (20_000, 120_000, (10_000, 60_000)),  # never lengthen
        (10_000, 60_000, (10_000, 60_000)),
        (0, 0, (10_000, 60_000)),  # 0 asks for nothing
        (-5, -5, (10_000, 60_000)),
        (1, None, (1, 60_000)),
    ],
)
def test_limits_for_request_may_shorten_never_lengthen(asked_q, asked_c, expected):
    limits = limits_settings().limits_for("XDemo", asked_q, asked_c)
    assert (limits.queueing_timeout_ms, limits.computation_timeout_ms) == expected


def test_limits_for_without_configured_timeout_takes_the_requests():
    s = limits_settings(queueing="0", computation="0")
    limits = s.limits_for("XDemo", 5_000, 30_000)
    assert (limits.queueing_timeout_ms, limits.computation_timeout_ms) == (5_000, 30_000)
    limits = s.limits_for("XDemo")
    assert (limits.queueing_timeout_ms, limits.computation_timeout_ms) == (0, 0)


def test_limits_for_uses_the_services_own_maximum():
    s = limits_settings(computation="60s", demo_computation="20s")
    assert s.limits_for("XDemo", None, 45_000).computation_timeout_ms == 20_000
    assert s.limits_for("XRuntime", None, 45_000).computation_timeout_ms == 45_000


def test_default_settings_object():
    assert Settings().jobs_for("XDemo") == JobSettings()
    assert Settings().limits_for("XDemo", 100, 200).computation_timeout_ms == 200


# --------------------------------------------------------------------------- check-config


def test_check_config_valid_file_exits_zero(tmp_path, capsys):
    path = write(tmp_path / "config", FULL)
    assert cli.main(["check-config", path]) == 0
    out = capsys.readouterr().out
    assert "OK" in out


def test_check_config_invalid_file_exits_non_zero_and_prints_lines(tmp_path, capsys):
    path = write(tmp_path, '[server]\nport = "x"\n\n[jobs]\nfetched_retention = "soon"\n')
    assert cli.main(["check-config", path]) != 0
    out = capsys.readouterr().out
    assert "line 2" in out
    assert "line 5" in out
    assert "fetched_retention" in out


def test_check_config_invalid_toml_exits_non_zero(tmp_path, capsys):
    path = write(tmp_path, "[server]\nport = = 1\n")
    assert cli.main(["check-config", path]) != 0
    assert "line 2" in capsys.readouterr().out


def test_check_config_unknown_service_exits_non_zero(tmp_path, capsys):
    path = write(tmp_path, "[services.NoSuchService]\nenabled = true\n")
    assert cli.main(["check-config", path]) != 0
    assert "line 1" in capsys.readouterr().out


def test_check_config_impossible_duration_exits_non_zero(tmp_path, capsys):
    path = write(tmp_path, "[jobs]\n\nunfetched_retention = inf\n")
    assert cli.main(["check-config", path]) != 0
    assert "line 3" in capsys.readouterr().out


def test_check_config_missing_file_exits_non_zero(tmp_path, capsys):
    assert cli.main(["check-config", str(tmp_path / "missing.toml")]) != 0
    capsys.readouterr()


def test_check_config_needs_a_path(capsys):
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["check-config"])
    assert excinfo.value.code != 0
    capsys.readouterr()


def test_allowed_origins_and_hosts_are_read_as_compared():
    """Origins and names are compared in lower case, an origin without its last slash."""
    settings = config.parse(
        '[server]\nallowed_origins = ["https://App.Example/", "http://[::1]:3000", "*"]\n'
        'allowed_hosts = ["XR.example.org.", ".corp.example", "*"]\n'
    )
    assert settings.allowed_origins == ("https://app.example", "http://[::1]:3000", "*")
    assert settings.allowed_hosts == ("xr.example.org", ".corp.example", "*")
    assert config.parse("").allowed_origins == () and config.parse("").allowed_hosts == ()


def test_node_name_is_read_and_waits_for_a_restart():
    assert config.parse('[server]\nnode_name = "host-a:50000"\n').node_name == "host-a:50000"
    assert config.parse("").node_name == ""
    assert "node_name" in config.RESTART_KEYS
