"""The ``xruntime`` command: serve, check-config, db (the schema's version), backup,
wsdl, new-service, token new (and new-secret); and the client commands start, watch,
fetch, stop, delete, jobs (``client_cli``)."""

import argparse
import logging
import sqlite3
import sys
from collections.abc import Sequence

from . import __version__
from .client import commands as client_cli
from .settings import config
from .support.logs import setup_logging

log = logging.getLogger(__name__)


def cmd_serve(args: argparse.Namespace) -> int:
    from .support import stop_signals

    stop_signals.catch()  # first: a Ctrl-C or SIGTERM from now on stops the node cleanly
    setup_logging()
    try:
        settings = config.load(
            args.config, known_services=_service_names(), service_keys=_service_keys()
        )
    except config.ConfigError as exc:
        for line in exc.errors:
            log.error("%s: %s", exc.path, line)
        log.error("the server does not start on an invalid configuration")
        return 2
    settings = config.with_overrides(settings, host=args.host, port=args.port)
    # [log]: from here on, in this process and every process of the node (before:
    # text, for the errors of a file that could not be read)
    setup_logging(form=settings.log_format, level=settings.log_level, export=True)
    from .store.probe import DatabaseUnusable, probe

    try:
        log.info("database: %s", probe(settings.database_url, auto_upgrade=settings.auto_upgrade))
    except DatabaseUnusable as exc:  # one line that names the key, no traceback
        log.error("[database] url: %s; the server does not start", exc)
        return 2
    from .serving.node import serve

    try:
        serve(settings, _service_names(), reload_path=settings.path)
    except OSError as exc:
        log.error("cannot serve on %s:%s: %s", settings.host, settings.port, exc.strerror or exc)
        return 1
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """Check the file; when valid, show the settings the services declare, as in force."""
    from .operations.runtime_service import origin_of, served_services

    try:
        settings = config.load(
            args.path, known_services=_service_names(), service_keys=_service_keys()
        )
    except config.ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.path}: {line}")
        print(f"{len(exc.errors)} error(s)")
        return 1
    print(f"{args.path}: OK")
    if args.connect:
        from .store.probe import DatabaseUnusable, probe

        try:
            print(f"[database] url: {probe(settings.database_url, auto_upgrade=True)}")
        except DatabaseUnusable as exc:
            print(f"[database] url: {exc}")
            return 1
    for name in served_services():
        served = "" if settings.service(name).enabled else "  (not served: enabled = false)"
        print(f"service {name}: {origin_of(name)}{served}")
    for name, service in served_services().items():
        written = settings.service(name).declared
        for key, value in service.settings_in_force(settings).items():
            origin = "" if key in written else "  (default)"
            print(f"[services.{name}] {key} = {_toml_value(value)}{origin}")
    return 0


def _toml_value(value: object) -> str:
    """A setting's value as the file would write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _file_or_errors(path: str | None) -> "config.Settings | None":
    """The settings of the file at ``path`` (None: the default one); None, with each
    error on stderr, when it is invalid (``db``, ``backup``)."""
    try:
        return config.load(path, known_services=_service_names(), service_keys=_service_keys())
    except config.ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.path}: {line}", file=sys.stderr)
        return None


def cmd_db(args: argparse.Namespace) -> int:
    """``xruntime db current|upgrade|history``: the job store's schema version, by hand."""
    from .store import schema_versions

    if args.db_command == "history":
        for line in schema_versions.history():
            print(line)
        return 0
    setup_logging()
    settings = _file_or_errors(args.config)
    if settings is None:
        return 2
    from .store import StoreUnavailable, open_store
    from .store.probe import DatabaseUnusable, probe

    try:
        probe(settings.database_url, auto_upgrade=True)  # reachable, and not too new
        if args.db_command == "current":  # read only: a plain connection, no store
            print(schema_versions.current_line_of(settings.database_url))
            return 0
        store = open_store(settings.database_url)  # (brings it up to date, under the lock)
    except (DatabaseUnusable, StoreUnavailable) as exc:
        print(f"xruntime: [database] url: {exc}", file=sys.stderr)
        return 2
    try:
        with store.engine.connect() as conn:
            print(f"upgraded: {schema_versions.current_line(conn)}")
    finally:
        store.close()
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """``xruntime backup PATH``: an online, consistent copy of a SQLite node's store."""
    settings = _file_or_errors(args.config)
    if settings is None:
        return 2
    from sqlalchemy.engine import make_url

    from .store.backup import BackupRefused, backup

    url = make_url(settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        print(
            "xruntime: [database] url is not a SQLite file: back PostgreSQL up with pg_dump "
            "(docs/operations.md, 'Backup and restore')",
            file=sys.stderr,
        )
        return 2
    try:
        size, files, held = backup(url.database, args.path)
    except (BackupRefused, OSError, sqlite3.Error) as exc:
        print(f"xruntime: backup not made: {exc}", file=sys.stderr)
        return 1
    print(
        f"{args.path}: the database ({size} bytes) and {files} result files; the node's "
        f"writes waited {held * 1000:.0f} ms"
    )
    return 0


def cmd_wsdl(args: argparse.Namespace) -> int:
    """Write every service's WSDL, the schema documents they import, the WSDL of all
    services, the OpenAPI document of the JSON binding and the OGC API's (the files kept
    in wsdl/: <Service>.wsdl, schemas/<name>.xsd, XServices.wsdl, openapi.json,
    ogcapi.json), as a node with the default settings serves them."""
    import os

    from .bindings import openapi
    from .bindings.ogcapi import document as ogcapi_document
    from .bindings.soap import wsdl_for
    from .bindings.wsdl import ALL_SERVICES_FILE, SCHEMA_FOLDER, build_all_wsdl, schema_documents
    from .operations.runtime_service import served_services

    base = args.base_url.rstrip("/")
    services = served_services()
    os.makedirs(os.path.join(args.out, SCHEMA_FOLDER), exist_ok=True)
    written = {
        f"{name}.wsdl": wsdl_for(service, f"{base}/services/ws/{name}")
        for name, service in services.items()
    }
    written[ALL_SERVICES_FILE] = build_all_wsdl(list(services.values()), f"{base}/services/ws")
    written.update(
        {f"{SCHEMA_FOLDER}/{name}": document for name, document in schema_documents().items()}
    )
    defaults = config.Settings()
    written[openapi.DOCUMENT_NAME] = openapi.served(services.values(), defaults)
    written[ogcapi_document.DOCUMENT_NAME] = ogcapi_document.served(services.values(), defaults)
    for name, document in written.items():
        path = os.path.join(args.out, name)
        with open(path, "wb") as f:
            f.write(document)
        print(path)
    return 0


def cmd_new_service(args: argparse.Namespace) -> int:
    """Write a new service's package (xruntime.author.new_service)."""
    from pathlib import Path

    from .author.new_service import NewServiceError, package_name, write

    try:
        written = write(args.name, Path(args.dir))
    except (NewServiceError, OSError) as exc:
        print(f"xruntime new-service: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    print(f"# next: pip install -e {args.dir}  (then: python -m pytest {args.dir})")
    print(f"# the package {package_name(args.name)} declares {args.name} as an xruntime service")
    return 0


def cmd_token_new(args: argparse.Namespace) -> int:
    """A fresh token for a user, and the lines that give it to them (docs/protocol.md §10)."""
    from .operations.accounts import new_token, token_sha256

    if not config.USER_NAME.match(args.name) or args.name == config.ANY_USER:
        print(
            f"{args.name!r} is no user name: letters, digits and _ . @ -, at most 100 "
            f"(and not {config.ANY_USER!r})",
            file=sys.stderr,
        )
        return 2
    token = new_token()
    print(f"# The token for {args.name}; give it to them, it is shown only this once:")
    print(f"#   {token}")
    print("# Paste these lines into the configuration file (replacing an older")
    print(f"# [users.{args.name}] token_sha256 rotates the token; the old one stops working):")
    print(f"[users.{args.name}]")
    print(f'token_sha256 = "{token_sha256(token)}"')
    return 0


def cmd_token_new_secret(args: argparse.Namespace) -> int:
    """A fresh secret to sign callbacks with (docs/protocol.md §14), in the ``whsec_``
    form that Standard Webhooks libraries take."""
    import base64
    import secrets

    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    where = f"[users.{args.name}]" if args.name else "[callbacks]"
    print(f"# The secret callbacks are signed with: for the receiver's owner, and for {where}:")
    print(f'{"callback_secret" if args.name else "secret"} = "{secret}"')
    return 0


def _service_names() -> list[str]:
    from .operations.runtime_service import served_services

    return list(served_services())


def _service_keys() -> dict:
    from .author.registry import setting_keys

    return setting_keys()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="xruntime", description="Long operations as asynchronous jobs."
    )
    parser.add_argument("--version", action="version", version=f"xruntime {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start a node: the HTTP server and its worker processes")
    p.add_argument("--config", help="configuration file (default: config/xserver.toml if present)")
    p.add_argument("--host", help="address to listen on (overrides [server] host)")
    p.add_argument("--port", type=int, help="port to listen on (overrides [server] port)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("check-config", help="validate a configuration file")
    p.add_argument("path")
    p.add_argument(
        "--connect",
        action="store_true",
        help="also connect to [database] url and say what is there",
    )
    p.set_defaults(func=cmd_check_config)
    p = sub.add_parser(
        "backup", help="copy a SQLite node's job store, while it serves, into a new folder"
    )
    p.add_argument("path", help="the new folder (0700): xruntime.db and xruntime.db.results/")
    p.add_argument("--config", help="configuration file (default: config/xserver.toml if present)")
    p.set_defaults(func=cmd_backup)
    p = sub.add_parser("db", help="the job store's schema version: current, upgrade, history")
    p.add_argument("db_command", choices=["current", "upgrade", "history"])
    p.add_argument("--config", help="configuration file (default: config/xserver.toml if present)")
    p.set_defaults(func=cmd_db)
    p = sub.add_parser(
        "wsdl",
        help="write every service's WSDL, the schemas they import and the JSON binding's "
        "OpenAPI document into a folder",
    )
    p.add_argument(
        "--out",
        required=True,
        help="folder to write <Service>.wsdl, schemas/*.xsd, openapi.json and ogcapi.json into",
    )
    p.add_argument(
        "--base-url",
        default="http://localhost:50000",
        help="base URL for soap:address (default http://localhost:50000)",
    )
    p.set_defaults(func=cmd_wsdl)
    p = sub.add_parser(
        "new-service", help="write a new service's installable package, with its tests"
    )
    p.add_argument("name", help="the service's name, e.g. XWords")
    p.add_argument("--dir", required=True, help="the folder to write it into (new or empty)")
    p.set_defaults(func=cmd_new_service)
    p = sub.add_parser("token", help="user tokens")
    tokens = p.add_subparsers(dest="token_command", required=True)
    p = tokens.add_parser(
        "new", help="print a fresh token for a user and the [users.NAME] lines to paste"
    )
    p.add_argument("name", help="the user's name")
    p.set_defaults(func=cmd_token_new)
    p = tokens.add_parser(
        "new-secret", help="print a fresh secret to sign callbacks with ([callbacks] or a user's)"
    )
    p.add_argument("name", nargs="?", help="the user whose callbacks it signs (none: the node's)")
    p.set_defaults(func=cmd_token_new_secret)
    client_cli.add_commands(sub)
    args = parser.parse_args(argv)
    from .author.registry import PluginError

    try:
        return args.func(args)
    except PluginError as exc:  # a service plug-in that cannot be served: one line
        print(f"xruntime: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
