"""`lakeward serve`: one replica with its HTTP API, until SIGTERM or SIGINT (then a graceful drain)."""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import uvicorn

from lakeward.services.api.app import create_app
from lakeward.services.api.ui import UI_PREFIX
from lakeward.services.claims import StartAborted
from lakeward.services.daemon import Daemon
from lakeward.services.logs import configure_logging
from lakeward.services.settings import DaemonSettings

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The replica cannot start: its HTTP address cannot be listened on. The message names the settings keys."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (as uvicorn binds one); StartupError naming http.host / http.port."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}: http.host {host!r} does not resolve ({exc})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot listen on {host}:{port} (http.host, http.port): {exc.strerror or exc}"
            + (": another process uses the port" if exc.errno == errno.EADDRINUSE else "")
        ) from None
    sock.set_inheritable(True)
    return sock


class ApiServer:
    """uvicorn serving the API of `daemon` in a background thread."""

    def __init__(self, daemon: Daemon, host: str | None = None, port: int | None = None):
        http = daemon.settings.http
        config = uvicorn.Config(
            create_app(daemon),
            host=host or http.host,
            port=http.port if port is None else port,
            log_config=None,
            access_log=False,
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        """Listen (StartupError when the address cannot be listened on), then serve in a background thread."""
        config = self.server.config
        sock = bind(config.host, config.port)
        self._thread = threading.Thread(target=self.server.run, args=([sock],), name="http", daemon=True)
        self._thread.start()
        waited = 0.0
        while not self.server.started and self._thread.is_alive() and waited < timeout_s:
            threading.Event().wait(0.05)
            waited += 0.05
        if not self.server.started:
            raise StartupError("the HTTP server did not start (see the log)")

    @property
    def port(self) -> int:
        for server in self.server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.server.config.port)

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def serve(
    settings: DaemonSettings,
    *,
    on_started: Callable[[Daemon, ApiServer], None] | None = None,
    stop: threading.Event | None = None,
    spark: Any = None,
) -> int:
    """Run one replica until SIGTERM/SIGINT (or `stop` is set); drain, and return the exit code (0)."""
    configure_logging(settings.log.format, settings.log.level, settings.replica_id or "")
    stop = stop or threading.Event()
    daemon = Daemon(settings, spark=spark)

    def on_signal(signum: int, frame: object) -> None:
        log.info("received %s: draining", signal.Signals(signum).name)
        stop.set()

    def handle_signals() -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)

    # Before anything answers: a SIGTERM at any moment of start-up drains (it used to kill).
    handle_signals()
    # The HTTP server comes first: /healthz answers (and /readyz says 503) while Spark starts.
    api = ApiServer(daemon)
    api.start()
    base = f"http://{settings.http.host}:{api.port}"
    log.info("API on %s (replica %s); web UI on %s%s", base, daemon.replica_id, base, UI_PREFIX)
    try:
        if not stop.is_set():
            try:
                daemon.start(abort=stop)
            except StartAborted:
                log.info("start-up stopped before ZooKeeper answered")
            # Again after start: creating the SparkContext installs PySpark's own SIGINT handler.
            handle_signals()
        if on_started is not None and not stop.is_set():
            on_started(daemon, api)
        stop.wait()
    finally:
        daemon.drain()
        api.stop()
    return 0


__all__ = ["ApiServer", "StartupError", "bind", "serve"]
