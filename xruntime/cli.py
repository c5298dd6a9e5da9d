"""The ``xruntime`` command: serve, check-config."""
import argparse
import logging
import sys

from . import __version__, config
from .logs import setup_logging


def cmd_serve(args) -> int:
    setup_logging()
    try:
        settings = config.load(args.config, known_services=_service_names())
    except config.ConfigError as exc:
        for line in exc.errors:
            logging.error("%s: %s", exc.path, line)
        logging.error("the server does not start on an invalid configuration")
        return 2
    settings = config.with_overrides(settings, host=args.host, port=args.port)
    from .node import serve
    try:
        serve(settings, _service_names(), reload_path=settings.path)
    except OSError as exc:
        logging.error("cannot serve on %s:%s: %s", settings.host, settings.port, exc.strerror or exc)
        return 1
    return 0


def cmd_check_config(args) -> int:
    try:
        config.load(args.path, known_services=_service_names())
    except config.ConfigError as exc:
        for line in exc.errors:
            print(f"{exc.path}: {line}")
        print(f"{len(exc.errors)} error(s)")
        return 1
    print(f"{args.path}: OK")
    return 0


def cmd_wsdl(args) -> int:
    """Write every service's WSDL (the files kept in wsdl/)."""
    import os
    from .bindings.soap import wsdl_for
    from .registry import discover
    os.makedirs(args.out, exist_ok=True)
    base = args.base_url.rstrip("/")
    for name, service in discover().items():
        path = os.path.join(args.out, f"{name}.wsdl")
        with open(path, "wb") as f:
            f.write(wsdl_for(service, f"{base}/services/ws/{name}"))
        print(path)
    return 0


def _service_names():
    from .registry import discover
    return list(discover())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xruntime", description="Long operations as asynchronous jobs.")
    parser.add_argument("--version", action="version", version=f"xruntime {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start a node: the HTTP server and its worker processes")
    p.add_argument("--config", help="configuration file (default: config/xserver.toml if present)")
    p.add_argument("--host", help="address to listen on (overrides [server] host)")
    p.add_argument("--port", type=int, help="port to listen on (overrides [server] port)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("check-config", help="validate a configuration file")
    p.add_argument("path")
    p.set_defaults(func=cmd_check_config)
    p = sub.add_parser("wsdl", help="write every service's WSDL into a folder")
    p.add_argument("--out", required=True, help="folder to write <Service>.wsdl into")
    p.add_argument("--base-url", default="http://localhost:50000",
                   help="base URL for soap:address (default http://localhost:50000)")
    p.set_defaults(func=cmd_wsdl)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
