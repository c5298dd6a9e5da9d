"""The configuration schema against everything that repeats it: the settings' dataclasses,
the parser, the shipped config/xserver.toml and the documentation's key tables.  Each
test fails on drift, so that a key is added in one place (xruntime/settings/model.py)."""

import os
import re
import tomllib
from dataclasses import fields

import pytest

from xruntime.author.registry import setting_keys
from xruntime.settings import config
from xruntime.settings import docs as config_docs
from xruntime.settings import schema as config_schema
from xruntime.settings.config import (
    AuthSettings,
    CallbackSettings,
    ConfigError,
    JobSettings,
    Quota,
    ServiceSettings,
    Settings,
    User,
)
from xruntime.settings.docs import _toml
from xruntime.settings.schema import KEYS, TABLES, children_of, keys_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "a" * 64
#: a value for the keys without a plain default
SAMPLES = {
    "token_sha256": TOKEN,
    "max_stored_bytes": 5,
    "max_held_watches": 5,
    "max_held_watched_ids": 5,
}

#: the model object whose fields a table's own keys fill, with its defaults
MODELS = {
    "server": Settings(),
    "database": Settings(),
    "workers": Settings(),
    "log": Settings(),
    "jobs": JobSettings(),
    "services.NAME": ServiceSettings(),
    "auth": AuthSettings(),
    "users.NAME": User(name="u", token_sha256=TOKEN),
    "callbacks": CallbackSettings(),
}
#: the fields of each model that no key fills (objects of their own, or derived)
NOT_KEYS = {
    Settings: {"jobs", "services", "auth", "users", "callbacks", "path"},
    ServiceSettings: {"jobs", "overridden", "declared"},
    User: {"name", "quota", "services"},
}


def concrete(path: str) -> str:
    """A table path as a file writes it: ``users.NAME.services.SERVICE`` →
    ``users.alice.services.XDemo``."""
    return (
        path.replace("services.NAME", "services.XDemo")
        .replace("NAME", "alice")
        .replace("SERVICE", "XDemo")
    )


def file_with(path: str, line: str) -> str:
    """A file holding ``line`` in the table ``path`` (after the token a user needs)."""
    text = ""
    if path.startswith("users."):
        text += "[users.alice]\n"
        if not line.startswith("token_sha256 "):
            text += f'token_sha256 = "{TOKEN}"\n'
    if path != "users.NAME":
        text += f"[{concrete(path)}]\n"
    return text + line + "\n"


def test_every_table_and_key_is_declared_consistently():
    paths = [declared.path for declared in TABLES]
    assert len(paths) == len(set(paths))
    for key in KEYS:
        assert key.doc and key.tables, key
        assert set(key.tables) | set(key.refused) <= set(paths), key
        assert key.default is not None or key.default_doc, f"{key.name}: no default, no word for it"
        assert (key.default is None) == (key.default_value() is None)
    for declared in TABLES:
        names = [key.name for key in KEYS if declared.path in key.tables]
        assert len(names) == len(set(names)), f"[{declared.path}] declares a key twice"
        assert not set(names) & set(children_of(declared.path)), declared.path


@pytest.mark.parametrize(
    "model", [Settings, JobSettings, ServiceSettings, AuthSettings, Quota, User, CallbackSettings]
)
def test_each_model_field_is_a_key_and_each_key_a_model_field(model):
    homes = {
        Settings: ("server", "database", "workers", "log"),
        JobSettings: ("jobs",),
        ServiceSettings: ("services.NAME",),
        AuthSettings: ("auth",),
        Quota: ("users.NAME",),
        User: ("users.NAME",),
        CallbackSettings: ("callbacks",),
    }[model]
    own = {f.name for f in fields(model)} - NOT_KEYS.get(model, set())
    declared = {key.setting for key in KEYS if key.home in homes}
    if model in (Quota, User):  # [users.NAME] keys fill a User and its Quota
        quota = {f.name for f in fields(Quota)}
        declared = declared & quota if model is Quota else declared - quota
    assert own == declared


@pytest.mark.parametrize(
    "key", [key for key in KEYS if not key.missing], ids=lambda key: f"{key.home}.{key.name}"
)
def test_the_models_defaults_are_the_schemas(key):
    model = MODELS[key.home]
    if isinstance(model, User) and key.setting in {f.name for f in fields(Quota)}:
        model = model.quota
    assert getattr(model, key.setting) == key.default_value()


def test_the_restart_keys_are_the_keys_not_applied_live():
    assert set(config.RESTART_KEYS) == {key.setting for key in KEYS if not key.live}
    every = {f.name for f in fields(Settings)}
    assert set(config.RESTART_KEYS) | set(config.LIVE_FIELDS) | {"path"} == every


@pytest.mark.parametrize(
    "path, key",
    [(path, key) for key in KEYS for path in key.tables],
    ids=lambda item: getattr(item, "name", item),
)
def test_every_key_is_read_where_it_may_be_written(path, key):
    value = key.default if key.default is not None else SAMPLES[key.name]
    config.parse(file_with(path, f"{key.name} = {_toml(value)}"), "f.toml", ["XDemo"])
    text = file_with(path, f"{key.name} = {{ wrong = 1 }}")
    with pytest.raises(ConfigError) as caught:
        config.parse(text, "f.toml", ["XDemo"])
    line = text.count("\n")
    assert caught.value.errors[0].startswith(f"line {line}: [{concrete(path)}] {key.name}: "), (
        caught.value.errors
    )


@pytest.mark.parametrize(
    "path, key, why",
    [(path, key, why) for key in KEYS for path, why in key.refused.items()],
    ids=lambda item: getattr(item, "name", item),
)
def test_a_refused_key_names_why(path, key, why):
    text = file_with(path, f"{key.name} = {_toml(SAMPLES.get(key.name, key.default))}")
    with pytest.raises(ConfigError) as caught:
        config.parse(text, "f.toml")
    line = text.count("\n")
    assert caught.value.errors == [f"line {line}: [{concrete(path)}] {key.name}: {why}"]


@pytest.mark.parametrize("declared", TABLES, ids=lambda declared: declared.path)
def test_an_unknown_key_lists_the_tables_keys(declared):
    with pytest.raises(ConfigError) as caught:
        config.parse(file_with(declared.path, "colour = 1"), "f.toml")
    (error,) = caught.value.errors
    assert "colour: unknown key (known: " + ", ".join(keys_of(declared.path)) in error


# --------------------------------------------------------------------------- the shipped file


def shipped() -> tuple[str, dict]:
    with open(os.path.join(ROOT, "config", "xserver.toml"), encoding="utf-8") as f:
        text = f.read()
    return text, tomllib.loads(text)


def test_the_shipped_file_writes_every_default_as_the_schema_declares_it():
    """Administrators copy config/xserver.toml: each value in it is the key's default."""
    _, data = shipped()
    written = [("", name, table) for name, table in data.items() if name != "services"]
    written += [("services.NAME", name, table) for name, table in data.get("services", {}).items()]
    assert written, "the shipped file sets nothing"
    for family, name, table in written:
        path = family or name
        keys = keys_of(path)
        for key_name, value in table.items():
            key = keys[key_name]
            assert key.home == path, f"[{name}] {key_name}: the shipped file overrides [{key.home}]"
            assert key.kind.check(value) == key.default_value(), (
                f"config/xserver.toml [{name}] {key_name} = {value!r}; "
                f"the schema's default is {key.default!r}"
            )


def test_the_shipped_file_shows_every_key():
    """Every key is in the shipped file: set, or in the example of its family's tables
    (``# [users.alice]`` and the commented keys after it)."""
    text, data = shipped()
    for key in KEYS:
        if key.home in data:
            assert key.name in data[key.home], f"config/xserver.toml lacks [{key.home}] {key.name}"
            continue
        family = text.index(f"[{key.home.split('.')[0]}.")
        example = text[family:].splitlines()
        assert any(line.lstrip("# ").startswith(f"{key.name} =") for line in example), (
            f"config/xserver.toml shows no [{key.home}] {key.name}"
        )


# --------------------------------------------------------------------------- the documents


@pytest.mark.parametrize("document, cite", config_docs.DOCUMENTS.items())
def test_the_documents_key_tables_are_generated_from_the_schema(document, cite):
    with open(os.path.join(ROOT, document), encoding="utf-8") as f:
        text = f.read()
    found = config_docs.current_block(text)
    assert found is not None, f"{document} has no <!-- config-table:begin --> … end markers"
    assert found == config_docs.block(cite, setting_keys()), (
        f"{document}'s table of configuration keys differs from {config_schema.__name__}; "
        f"run `{config_docs.command()}` in the repository's root"
    )


def test_the_generated_table_has_a_row_for_every_key():
    table = config_docs.markdown_table(service_keys=setting_keys())
    for key in KEYS:
        assert f"| `[{key.home}] {key.name}` |" in table
    assert "| `[services.XDima] max_cells` | integer ≥ 1 | `4000000` | live |" in table
    assert "| `[services.NAME] <any [jobs] key>` |" in table
    assert "(not `max_stored_bytes`)" in table


def test_write_rewrites_a_stale_table(tmp_path):
    for document in config_docs.DOCUMENTS:
        os.makedirs(tmp_path / os.path.dirname(document), exist_ok=True)
        (tmp_path / document).write_text(
            "intro\n\n<!-- config-table:begin -->\n| old |\n<!-- config-table:end -->\n\nrest\n"
        )
    assert sorted(config_docs.write(str(tmp_path))) == sorted(config_docs.DOCUMENTS)
    assert config_docs.write(str(tmp_path)) == []
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("intro\n\n") and text.endswith("\n\nrest\n") and "| old |" not in text


def test_the_operations_guides_limits_state_the_declared_defaults():
    """docs/operations.md's "Limits at the edges" names keys with their defaults by hand:
    each default it states is the declared one (a bare name is a [server] key)."""
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as f:
        text = f.read()
    rows = text[text.index("| key | default | past it |") :].split("\n\n")[0].splitlines()[2:]
    assert rows, "docs/operations.md has no limits table"
    for row in rows:
        named, default = row.split(" | ")[:2]
        names = re.findall(r"`(?:\[([a-z.]+)\] )?([a-z_]+)`", named)
        values = re.findall(r"`([^`]+)`", default)
        assert len(names) == len(values), row
        for (home, name), value in zip(names, values, strict=True):
            assert value == _toml(keys_of(home or "server")[name].default), (
                f"docs/operations.md: {name} = {value}, declared {keys_of(home or 'server')[name]}"
            )


def test_the_operations_guide_names_every_key_applied_at_a_restart():
    with open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    restart = text[text.index("The keys it marks `restart`") :]
    restart = restart[: restart.index("until the next restart")]
    for key in KEYS:
        named = re.search(rf"[`\]] ?{key.name}`", restart) is not None
        assert named == (not key.live), (
            f"docs/operations.md, Configuration changes: [{key.home}] {key.name} is "
            + ("restart" if not key.live else "live")
        )
