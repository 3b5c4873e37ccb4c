"""Serving the dashboard: a threaded WSGI server on one address, quiet, stoppable."""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import sys
import threading
import webbrowser
from collections.abc import Sequence

from jaxmodel.dashboard.data import DashboardError


def host_allowed(header: str, bound: str) -> bool:
    """Whether a request's ``Host`` header may reach a dashboard bound to
    ``bound``: an IP address, ``localhost``, or the bound name itself.

    A page of another site can make a browser send requests here under its
    own domain name, once that name resolves to this machine (DNS rebinding);
    such a request names that domain in its Host header, and is refused.  A
    request without the header (HTTP/1.0) names no domain and passes."""
    if not header:
        return True
    name = header.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[1:name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in ("localhost", bound.strip("[]").lower())


def host_checked(wsgi_app, bound: str):
    """``wsgi_app`` behind the :func:`host_allowed` check (403 otherwise)."""
    def app(environ, start_response):
        if not host_allowed(environ.get("HTTP_HOST", ""), bound):
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"forbidden: the Host header names no address of this dashboard\n"]
        return wsgi_app(environ, start_response)

    return app


def make_server(wsgi_app, host: str, port: int):
    """A threaded werkzeug server bound to ``host:port`` (port 0: any free port).

    Raises:
      DashboardError: the address cannot be bound (in use, not an address here).
    """
    from werkzeug.serving import make_server as _make

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request lines
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # werkzeug prints its own advice, then exits
            return _make(host, port, host_checked(wsgi_app, host), threaded=True)
    except (OSError, SystemExit) as e:
        reason = getattr(e, "strerror", None) or (
            "address already in use" if "in use" in said.getvalue() else
            said.getvalue().strip().splitlines()[0] if said.getvalue().strip() else str(e))
        raise DashboardError(f"--port {port} / --host {host}: cannot listen there "
                             f"({reason}); choose another --port or --host") from None


def serve(wsgi_app, host: str, port: int, *, open_browser: bool,
          names: Sequence[str]) -> None:
    """Serve until Ctrl-C; print the address first."""
    server = make_server(wsgi_app, host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.server_port}/"
    print(f"jaxmodel dashboard: {', '.join(names)} at {url} (Ctrl-C to stop)", flush=True)
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()


class Background:
    """A server in a daemon thread (tests, screenshots, benchmarks): ``url``, ``stop()``."""

    def __init__(self, wsgi_app, host: str = "127.0.0.1", port: int = 0):
        self.server = make_server(wsgi_app, host, port)
        self.url = f"http://{host}:{self.server.server_port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
