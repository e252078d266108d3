"""Count the HTTP requests a client makes to S3: a forwarding proxy in front of the SeaweedFS gateway.

A read's cost on S3 is its requests, and a LIST (`GET /<bucket>?list-type=2&prefix=...`) is the one
that grows with a table's partitions when a reader lists storage instead of the metadata table.
`CountingS3Proxy(server)` listens on a free loopback port and forwards every request unchanged
(headers included: the client signs for the proxy's host, and the gateway checks the signature
against the Host header it receives, which is the proxy's) to the real gateway, counting each by
kind. Point a reader at `proxy.options` and read `proxy.counts` (and `listed_keys`, the object keys
the LIST answers returned: one LIST request pages through up to 1,000 of them; `object_gets`, the
keys of the objects read).
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from tests.support.seaweedfs import S3Server

#: Response headers the proxy sets itself (the body is re-sent with a Content-Length).
_HOP_HEADERS = {"transfer-encoding", "connection", "keep-alive", "content-length"}
#: Request headers about how the body travelled to the proxy (it forwards the body whole).
_REQUEST_FRAMING = {"transfer-encoding", "expect", "content-length"}


def request_kind(method: str, path: str, bucket: str) -> str:
    """`LIST` for a bucket-level GET (ListObjects/V2), else the method and `object` or `bucket`."""
    parsed = urllib.parse.urlsplit(path)
    on_bucket = parsed.path.strip("/") == bucket
    if method == "GET" and on_bucket:
        return "LIST"
    return f"{method} {'bucket' if on_bucket else 'object'}"


class CountingS3Proxy:
    """A loopback HTTP proxy to `server` counting requests by `request_kind` (thread-safe)."""

    def __init__(self, server: S3Server):
        self.target = urllib.parse.urlsplit(server.endpoint_url)
        self.bucket = server.bucket
        self.counts: Counter[str] = Counter()
        self.list_prefixes: list[str] = []
        self.object_gets: list[str] = []
        self.listed_keys = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.options = {**server.options, "aws_endpoint_url": self.endpoint_url}
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="s3-counting-proxy", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """Forget the counts so far."""
        with self._lock:
            self.counts.clear()
            self.list_prefixes.clear()
            self.object_gets.clear()
            self.listed_keys = 0

    @property
    def lists(self) -> int:
        """LIST requests counted since the last `reset`."""
        with self._lock:
            return self.counts["LIST"]

    def close(self) -> None:
        """Stop listening."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> CountingS3Proxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _listed(self, body: bytes) -> None:
        with self._lock:
            self.listed_keys += body.count(b"<Key>")

    def _record(self, method: str, path: str) -> None:
        kind = request_kind(method, path, self.bucket)
        with self._lock:
            self.counts[kind] += 1
            if kind == "LIST":
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
                self.list_prefixes.append(query.get("prefix", [""])[0])
            elif kind == "GET object":
                key = urllib.parse.unquote(urllib.parse.urlsplit(path).path).lstrip("/")
                self.object_gets.append(key.removeprefix(f"{self.bucket}/"))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                proxy._record(self.command, self.path)
                body = self._body()
                # the body goes on whole, with its length (the 100 Continue was answered here)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _REQUEST_FRAMING}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                host = proxy.target.hostname or "127.0.0.1"
                connection = http.client.HTTPConnection(host, proxy.target.port, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    data = response.read()
                finally:
                    connection.close()
                if request_kind(self.command, self.path, proxy.bucket) == "LIST":
                    proxy._listed(data)
                self.send_response_only(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in _HOP_HEADERS:
                        self.send_header(name, value)
                # a HEAD answer's Content-Length is the object's size, not the (empty) body's
                size = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", size or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes | None:
                """The request's body: by Content-Length, or chunked (as pyarrow sends object bodies)."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else None
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()  # the CRLF after the chunk
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

        return Handler
