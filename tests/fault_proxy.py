"""A small TCP proxy on loopback in front of a real ``mlflow server``, with faults on demand.

Modes (``proxy.mode = ...``), taken by every new connection; switching closes the connections
in flight, so a pooled client meets the new mode on its next request:

- ``"pass"``: forward bytes both ways.
- ``"503"`` (or ``"502"``, ``"504"``, ``"429"``): answer each request with that status, as a
  reverse proxy does while the server behind it restarts.
- ``"silent"``: accept the connection and never answer.
- ``"reset"``: accept and close at once.
- ``"lose"`` (set by :meth:`FaultProxy.lose_answers`): each request is forwarded on a connection
  of its own; the next ``count`` requests whose path holds a given text reach the server, which
  acts on them, but their answers are dropped and the client's connection closed: a lost answer
  (the server restarted, or a proxy timed out, after the write). Every other answer passes.

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
        self.lost: list[str] = []  # the request lines whose answers were dropped
        self._lose: list = ["", 0]
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

    def lose_answers(self, path: str, count: int = 1) -> None:
        """Drop the answers of the next ``count`` requests whose path holds ``path`` (mode ``"lose"``)."""
        with self._lock:
            self._lose = [path, count]
        self.mode = "lose"

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
        elif mode == "lose":
            try:
                while self._forward_one(client):
                    pass
            except OSError:
                pass
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

    def _forward_one(self, client: socket.socket) -> bool:
        """Forward one request on a connection of its own; answer it unless its answer is to be lost."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = 0
        for line in lines:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = client.recv(65536)
            if not chunk:
                return False
            body += chunk
        self.requests += 1
        kept = [line for line in lines[1:] if not line.lower().startswith(b"connection:")]
        request = b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n" + body
        upstream = socket.create_connection(self.upstream, timeout=60)
        try:
            upstream.sendall(request)
            answer = b""
            while True:  # the server closes after its answer (Connection: close)
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                answer += chunk
        finally:
            _close(upstream)
        request_line = lines[0].decode("latin-1")
        with self._lock:
            lose = self._lose[1] > 0 and self._lose[0] in request_line
            if lose:
                self._lose[1] -= 1
                self.lost.append(request_line)
        if lose:
            return False  # the server acted; the client never hears of it
        client.sendall(answer)
        return b"connection: close" not in answer.lower().split(b"\r\n\r\n", 1)[0]

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
