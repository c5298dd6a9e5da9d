"""One node: the store, notifier, supervisor, operation layer and the HTTP application.

``Node(settings)`` wires the parts together; ``node.wsgi`` is the WSGI application with
each binding mounted at its address, and ``serve(node)`` runs it under waitress until
SIGTERM or SIGINT.
"""
import logging
import signal
import threading

from werkzeug.middleware.dispatcher import DispatcherMiddleware

from .bindings.json_binding import JsonBinding, fault_response
from .bindings.jsonrpc import JsonRpcBinding
from .bindings.soap import SoapBinding
from .dispatch import Dispatcher
from .store.channel import PostgresChannel
from .engine.cleaner import RetentionCleaner
from .engine.notifier import Notifier
from .engine.supervisor import Supervisor, default_node_name
from .jobs import JobManager
from .protocol.faults import InvalidRequestFault
from .reload import ConfigReloader
from .store import open_store

log = logging.getLogger("xruntime")


def not_found(environ, start_response):
    fault = InvalidRequestFault(f"nothing is served at {environ.get('PATH_INFO', '/')}",
                                hint="Operations are at /services/rs/<Service>/<operation>.")
    return fault_response(fault)(environ, start_response)


class Node:
    def __init__(self, settings, node_name=None):
        self._settings = settings
        self._settings_lock = threading.Lock()
        self.name = node_name or default_node_name(settings.port)
        self.store = open_store(settings.database_url)
        self.notifier = Notifier()
        self.cleaner = RetentionCleaner(self.store, self.settings)
        self.supervisor = Supervisor(self.store, self.notifier, self.settings, self.name, self.cleaner)
        self.jobs = JobManager(self.store, self.notifier, self.supervisor, self.settings, self.name)
        self.channel = None
        if self.store.dialect == "postgresql":        # several nodes may share the database
            self.channel = PostgresChannel(settings.database_url, self.name,
                                           on_job=self._changed_elsewhere, on_queue=self.supervisor.work.set)
            self.notifier.bridge = self.channel
        self.dispatcher = Dispatcher(self.jobs)
        self.bindings = {
            "/services/rs": JsonBinding(self.dispatcher, self.settings),
            "/services/ws": SoapBinding(self.dispatcher, self.settings),
            "/services/rpc": JsonRpcBinding(self.dispatcher, self.settings),
        }
        self.wsgi = DispatcherMiddleware(not_found, self.bindings)

    def settings(self):
        """The settings in force (a reload swaps them as a whole)."""
        return self._settings

    def replace_settings(self, settings):
        with self._settings_lock:
            self._settings = settings

    def _changed_elsewhere(self, job_id: str):
        self.notifier.notify_local(job_id)
        self.supervisor.changed_elsewhere(job_id)

    def start(self):
        if self.channel is not None:
            self.channel.start()
        self.supervisor.start()

    def close(self):
        self.notifier.close()
        self.supervisor.shutdown()
        if self.channel is not None:
            self.channel.close()
        self.store.close()


    def refusal(self, path: str, fault):
        """A fault for a request refused before it reached a binding (e.g. by waitress,
        for a body over the limit), in the form of the binding its path names."""
        for prefix, binding in self.bindings.items():
            if path.startswith(prefix):
                return binding.refusal(path[len(prefix):], fault)
        return fault_response(fault)


def serve(node: Node, reload_path=None, known_services=None) -> None:
    """Run the node under waitress until SIGTERM/SIGINT, then shut down cleanly: the
    running jobs go back to the queue, waiting watches answer, the workers end.
    With ``reload_path``, edits of that file are applied live (xruntime.reload)."""
    from waitress import create_server
    settings = node.settings()
    server = create_server(  # raises OSError when the address is taken: the CLI reports it
        node.wsgi, host=settings.host, port=settings.port, threads=settings.threads,
        asyncore_use_poll=True, connection_limit=max(100, settings.threads * 2),
        max_request_body_size=settings.max_request_bytes + 1, ident="xruntime",  # it refuses >= max
        clear_untrusted_proxy_headers=True)
    server.channel_class = refusing_channel(node)
    # helper processes (workers, multiprocessing's resource tracker) ignore SIGHUP, which
    # means "re-read the configuration" to the server alone
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    node.start()
    reloader = None
    if reload_path:
        def follow(new):          # waitress refuses oversized bodies itself, before reading them
            server.adj.max_request_body_size = new.max_request_bytes + 1
        reloader = ConfigReloader(node, reload_path, known_services, [follow])
        reloader.start()
        signal.signal(signal.SIGHUP, lambda *_: reloader.wake.set())

    def stop(signum, _frame):
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        node.supervisor.closing = True
        node.notifier.close()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("xruntime node %s serving on http://%s:%s (%d threads, %d workers, database %s)",
             node.name, settings.host, server.effective_port, settings.threads, settings.workers,
             _safe_url(settings.database_url))
    try:
        server.run()
    finally:
        if reloader is not None:
            reloader.stopped = True
        node.close()
        log.info("xruntime node %s stopped", node.name)


def refusing_channel(node):
    """A waitress channel whose refusals (body too large, bad framing) are faults in the
    form of the binding the request was for, not waitress's plain-text pages."""
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask

    class FaultErrorTask(ErrorTask):
        def execute(self):
            error = self.request.error
            fault = InvalidRequestFault(f"the request was refused: {error.reason}: {error.body}",
                                        hint="Send a well-formed request within the size limit.")
            response = node.refusal(self.request.path or "/", fault)
            body = response.get_data()
            self.status = response.status
            self.response_headers.extend(
                (k, v) for k, v in response.headers.items() if k.lower() != "content-length")
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class FaultChannel(HTTPChannel):
        error_task_class = FaultErrorTask

    return FaultChannel


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url
    return make_url(url).render_as_string(hide_password=True)

