"""Settings a service declares for its own [services.NAME] table (``Service.setting``):
read and checked with the file (errors with their lines), their defaults when not
written, unknown keys still refused, and handed to ``validate`` as in force."""

import pytest

from xruntime.author import Service
from xruntime.author.registry import setting_keys
from xruntime.cli import main
from xruntime.protocol.faults import InvalidValueFault
from xruntime.settings import config
from xruntime.settings.config import ConfigError

shop = Service("XShop")
LIMIT = shop.setting("max_items", int, 10, "items one order may hold", minimum=1, maximum=100)
GREETING = shop.setting("greeting", str, "hello", "said first")
KEYS = {"XShop": shop.setting_keys(), "XDemo": ()}


def read(text):
    return config.parse(text, "f.toml", ["XShop", "XDemo"], KEYS)


def errors(text):
    with pytest.raises(ConfigError) as caught:
        read(text)
    return caught.value.errors


def test_a_declared_setting_is_read_from_its_services_table():
    settings = read('[services.XShop]\nmax_items = 42\ngreeting = "hi"\nmax_queued = 5\n')
    assert shop.settings_in_force(settings) == {"max_items": 42, "greeting": "hi"}
    assert settings.jobs_for("XShop").max_queued == 5  # the [jobs] keys still apply


def test_a_setting_not_written_has_its_default():
    assert shop.settings_in_force(read("[services.XShop]\nenabled = true\n")) == {
        "max_items": 10,
        "greeting": "hello",
    }
    assert shop.settings_in_force(config.Settings()) == {"max_items": 10, "greeting": "hello"}


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "must be between 1 and 100"),
        ("101", "must be between 1 and 100"),
        ('"many"', "expected an integer, got 'many'"),
    ],
)
def test_a_value_of_the_wrong_kind_or_out_of_bounds_names_its_line(value, message):
    assert errors(f"[jobs]\nmax_queued = 1\n\n[services.XShop]\nmax_items = {value}\n") == [
        f"line 5: [services.XShop] max_items: {message}"
    ]


def test_a_setting_is_a_key_of_its_own_service_only():
    found = errors("[services.XDemo]\nmax_items = 3\n")
    assert len(found) == 1 and found[0].startswith(
        "line 2: [services.XDemo] max_items: unknown key"
    )
    found = errors("[services.XShop]\nmax_itemz = 3\n")
    assert found[0].startswith("line 2: [services.XShop] max_itemz: unknown key")
    assert "max_items" in found[0] and "greeting" in found[0]  # the known ones are listed


def test_an_edit_of_a_setting_changes_the_settings():
    """What a live reload compares: a changed value is a change to apply."""
    assert read("[services.XShop]\nmax_items = 3\n") != read("[services.XShop]\nmax_items = 4\n")


def test_the_author_cannot_declare_a_bad_setting():
    with pytest.raises(ValueError, match="already a key"):
        Service("XBad").setting("max_queued", int, 1, "clashes with [jobs] max_queued", minimum=0)
    with pytest.raises(ValueError, match="must be at least 1"):
        Service("XBad").setting("size", int, 0, "its default out of its bounds", minimum=1)
    with pytest.raises(ValueError, match="int, bool or str"):
        Service("XBad").setting("ratio", float, 0.5, "no such kind")
    service = Service("XBad")
    service.setting("size", int, 1, "once")
    with pytest.raises(ValueError, match="declared twice"):
        service.setting("size", int, 2, "twice")


def test_validate_gets_the_settings_in_force():
    seen = []

    def check(request, settings):
        seen.append(settings["max_items"])
        if settings["max_items"] < 5:
            raise InvalidValueFault("too many", parameter="items")

    @shop.long_operation(request=object, response=object, validate=check)  # type: ignore[arg-type]
    def order(request, job): ...

    op = shop.long_operations["order"]
    op.check(None, read("[services.XShop]\nmax_items = 7\n"))
    with pytest.raises(InvalidValueFault):
        op.check(None, read("[services.XShop]\nmax_items = 3\n"))
    assert seen == [7, 3]


def test_xdima_declares_max_cells_and_the_registry_hands_it_over():
    keys = setting_keys()
    assert [key.name for key in keys["XDima"]] == ["max_cells", "threads"]
    assert keys["XDima"][0].default == 4_000_000
    assert "line 2: [services.XDima] max_cells: must be at least 1" in str(
        pytest.raises(
            ConfigError, config.parse, "[services.XDima]\nmax_cells = 0\n", "f", None, keys
        ).value
    )
    assert "line 2: [services.XDima] threads: must be between 0 and 256" in str(
        pytest.raises(
            ConfigError, config.parse, "[services.XDima]\nthreads = -1\n", "f", None, keys
        ).value
    )


def test_check_config_shows_each_services_settings_in_force(tmp_path, capsys):
    path = tmp_path / "x.toml"
    path.write_text("[services.XDima]\nmax_cells = 100\n")
    assert main(["check-config", str(path)]) == 0
    assert "[services.XDima] max_cells = 100\n" in capsys.readouterr().out
    path.write_text("[services.XDima]\nmax_cells = -1\n")
    assert main(["check-config", str(path)]) == 1
    assert "line 2: [services.XDima] max_cells: must be at least 1" in capsys.readouterr().out


def test_a_worker_gets_the_services_own_settings_alone():
    """What each run carries to its worker process: small whatever the file holds."""
    settings = read(
        '[services.XShop]\nmax_items = 42\nmax_queued = 5\n\n[users.ann]\ntoken_sha256 = "'
        + "a" * 64
        + '"\n'
    )
    sent = settings.services_own()
    assert shop.settings_in_force(sent) == {"max_items": 42, "greeting": "hello"}
    assert sent.users == {} and sent.jobs_for("XShop") == config.JobSettings()
