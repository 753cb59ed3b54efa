"""A real HTTP server on loopback that plays Slack and a webhook receiver for alert tests.

Responses are scripted per path (status, headers, delay in seconds), default 200 "ok". Every
request is recorded; ``/webhook`` requests are also deduplicated by ``Idempotency-Key`` the way a
careful receiver would (``unique``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    script: dict[str, list[tuple[int, dict, float]]] = field(default_factory=dict)
    unique: dict[str, Received] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def respond(self, path: str, *responses: tuple[int, dict, float]) -> None:
        """Queue responses for ``path``; when they run out, 200 is the answer."""
        self.script.setdefault(path, []).extend(responses)

    def on(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]


def start() -> Receiver:
    rec: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            item = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            with rec.lock:
                rec.requests.append(item)
                queue = rec.script.get(self.path) or []
                status, headers, delay = queue.pop(0) if queue else (200, {}, 0.0)
                key = item.headers.get("idempotency-key")
                if status == 200 and key and key not in rec.unique:
                    rec.unique[key] = item
            if delay:
                time.sleep(delay)
            payload = b"ok" if status == 200 else f"error {status}".encode()
            try:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec = Receiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return rec
