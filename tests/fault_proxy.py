"""A small TCP proxy on loopback in front of a real ``mlflow server``, with faults on demand.

Modes (``proxy.mode = ...``), taken by every new connection; switching closes the connections
in flight, so a pooled client meets the new mode on its next request:

- ``"pass"``: forward bytes both ways.
- ``"503"`` (or ``"502"``, ``"504"``, ``"429"``): answer each request with that status, as a
  reverse proxy does while the server behind it restarts.
- ``"silent"``: accept the connection and never answer.
- ``"reset"``: accept and close at once.

It only ever connects to the upstream address it was given (a loopback port).
"""

from __future__ import annotations

import socket
import threading


class FaultProxy:
    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self._mode = "pass"
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = 0
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        with self._lock:
            self._mode = value
            open_now, self._open = self._open, set()
        for sock in open_now:
            _close(sock)

    def close(self) -> None:
        self._stopped.set()
        _close(self._listener)
        self.mode = "pass"

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client, self._mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: str) -> None:
        self._track(client)
        if mode == "reset":
            _close(client)
        elif mode == "silent":
            self._stopped.wait(600)
            _close(client)
        elif mode.isdigit():
            try:
                while self._read_request(client):
                    self.requests += 1
                    client.sendall(f"HTTP/1.1 {mode} Fault\r\nContent-Length: 0\r\n\r\n".encode())
            except OSError:
                pass
            _close(client)
        else:
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                _close(client)
                return
            upstream.settimeout(None)
            self._track(upstream)
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
            _pump(client, upstream, count=self)

    @staticmethod
    def _read_request(client: socket.socket) -> bool:
        """Read one request's head and body (Content-Length); False at the end of the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = client.recv(65536)
            if not chunk:
                return False
            body += chunk
        return True


def _pump(source: socket.socket, target: socket.socket, count: FaultProxy | None = None) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            if count is not None and data[:4] in (b"GET ", b"POST", b"PATC", b"DELE", b"PUT "):
                count.requests += 1
            target.sendall(data)
    except OSError:
        pass
    _close(source)
    _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
