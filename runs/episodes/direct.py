"""The direct data plane: web processes step episodes over one TCP connection to their host.

Routing stays in Redis (which host holds an episode, for which team; starts go through the shared
start list), but a step, an observation or a close of a routed episode travels over a persistent
connection from the web process to the host that holds it: one loopback (or network) hop, no Redis
list, no reply key. A host listens on EPISODE_HOST_BIND:EPISODE_HOST_PORT (default 127.0.0.1 and an
ephemeral port) and announces the address web processes should dial (EPISODE_HOST_ADVERTISE, else
the bound one) beside its presence key; a host that announces none (an older one) is reached through
Redis as before.

Frames are a 4-byte big-endian length and a JSON object (the same JSON as the Redis path, arrays in
their inline form). A request carries an `id`, its reply the same `id`, so one connection carries
many episodes' requests at once, answered in any order. The first frame of a connection carries the
host's secret, a random token it announces in Redis beside its address, and the host acknowledges it:
the port reaches no episode without what Redis holds, so the direct path is no weaker a boundary than
Redis (whoever reads Redis may already push requests onto a host's list), and a stale address that
another process now listens on is never mistaken for the host.

Failures keep the Redis path's meaning: a connection that cannot be made sends nothing, and the caller
goes through Redis instead (`Unreachable`); a connection that drops, or a host whose presence lapses
for HOST_GRACE_S, fails the requests it carried with the HostUnavailable "stopped" error, so the
caller ends the episode once with the infrastructure reason. The async client (for the ASGI step
paths) reads and writes on the caller's event loop: no thread hand-off; the sync client keeps a small
pool of blocking sockets per host, one request at a time each.
"""
import asyncio
import hmac
import json
import logging
import secrets
import socket
import struct
import threading
import time

from ..artifacts import array_json_default
from . import routing

logger = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 512 * 1024 * 1024
# After a failed connect, callers go through Redis for this long before dialling the host again.
UNREACHABLE_FOR_S = 5.0
IDLE_SOCKETS_PER_HOST = 32


class Unreachable(Exception):
    """The host's address could not be dialled: nothing was sent (the caller may use Redis)."""


def announced(address: str, token: str) -> str:
    """What a host announces: its address and its token."""
    return f"{address} {token}"


def parse_announced(value: str) -> tuple[str, str]:
    address, _, token = value.partition(" ")
    return address, token


def encode(payload: dict) -> bytes:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=array_json_default).encode()
    return HEADER.pack(len(body)) + body


def encode_reply(payload: dict) -> bytes:
    # Replies carry what environments return, which JSON may only spell with NaN (as the Redis path does).
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=array_json_default).encode()
    return HEADER.pack(len(body)) + body


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


# -- the host's side ------------------------------------------------------------------------------

class DirectServer:
    """Accepts web processes' connections for an EpisodeHost; each request runs on the host's step
    pool (steps of different episodes side by side) and is answered on the connection it came on."""

    def __init__(self, host, *, bind: str, port: int, advertise: str = ""):
        self.host = host
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.sock = socket.create_server((bind, port), family=family, backlog=256)
        self.sock.settimeout(0.5)
        bound_port = self.sock.getsockname()[1]
        name = advertise or bind
        if name in ("0.0.0.0", "::", ""):
            name = _own_address()
        self.address = f"[{name}]:{bound_port}" if ":" in name else f"{name}:{bound_port}"
        self.token = secrets.token_hex(16)
        self.announced = announced(self.address, self.token)
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._accept_forever, name="episode-direct-accept", daemon=True).start()

    def _accept_forever(self) -> None:
        while not self.host.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.host.stopping.is_set():
                    return
                logger.warning("episode host %s: accepting a direct connection failed", self.host.id, exc_info=True)
                time.sleep(0.1)
                continue
            threading.Thread(target=self._serve_connection, args=(conn,), name="episode-direct", daemon=True).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        write_lock = threading.Lock()

        def respond(reply: dict) -> None:
            frame = encode_reply(reply)
            with write_lock:
                try:
                    conn.sendall(frame)
                except OSError:
                    pass  # the caller went away: its requests were failed on its side

        reader = conn.makefile("rb", buffering=65536)
        try:
            hello = _read_frame(reader)
            if hello is None or not hmac.compare_digest(str(hello.get("token", "")).encode(), self.token.encode()):
                logger.warning("episode host %s: refused a direct connection without its token", self.host.id)
                return
            respond({"hello": self.host.id})
            with self.lock:
                self.connections.add(conn)
            while not self.host.stopping.is_set():
                message = _read_frame(reader)
                if message is None:
                    return
                self.host.dispatch_direct(message, respond)
        except (OSError, ValueError):
            return
        finally:
            with self.lock:
                self.connections.discard(conn)
            try:
                reader.close()
                conn.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            connections = list(self.connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _own_address() -> str:
    """This machine's address as others reach it (a host bound to every interface announces it)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def _read_frame(reader) -> dict | None:
    header = reader.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ValueError("frame too large")
    body = reader.read(length)
    if len(body) < length:
        return None
    return json.loads(body)


# -- the web's side: an asyncio client ------------------------------------------------------------

class _Connection:
    """One open connection of an AsyncLink, with the requests it carries."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future] = {}


class AsyncLink:
    """One multiplexed connection from this event loop to one host."""

    def __init__(self, host_id: str, announced_as: str):
        self.host_id = host_id
        self.address, self.token = parse_announced(announced_as)
        self.conn: _Connection | None = None
        self.next_id = 0
        self.connecting = asyncio.Lock()
        self.watching: asyncio.Task | None = None
        self.unreachable_until = 0.0

    async def _connect(self) -> _Connection:
        async with self.connecting:
            if self.conn is not None:
                return self.conn
            if time.monotonic() < self.unreachable_until:
                raise Unreachable(self.address)
            host, port = split_address(self.address)
            writer = None
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), routing.CONNECT_TIMEOUT_S)
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                writer.write(encode({"token": self.token}))
                (length,) = HEADER.unpack(await asyncio.wait_for(reader.readexactly(HEADER.size), routing.CONNECT_TIMEOUT_S))
                hello = json.loads(await asyncio.wait_for(reader.readexactly(length), routing.CONNECT_TIMEOUT_S))
                if hello.get("hello") != self.host_id:
                    raise OSError(f"{self.address} is not episode host {self.host_id}")
            except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                if writer is not None:
                    writer.close()
                self.unreachable_until = time.monotonic() + UNREACHABLE_FOR_S
                logger.warning("episode host %s at %s is unreachable directly (%s); going through Redis",
                               self.host_id, self.address, exc)
                raise Unreachable(self.address) from None
            conn = self.conn = _Connection(reader, writer)
            conn.reading = asyncio.create_task(self._read_forever(conn))
            return conn

    async def request(self, message: dict, timeout_s: float) -> dict:
        conn = self.conn or await self._connect()
        loop = asyncio.get_running_loop()
        self.next_id += 1
        request_id = self.next_id
        future = loop.create_future()
        conn.pending[request_id] = future
        conn.writer.write(encode({**message, "id": request_id}))
        timer = loop.call_later(timeout_s, self._expire, conn, request_id, timeout_s)
        if self.watching is None or self.watching.done():
            self.watching = asyncio.create_task(self._watch())
        try:
            if conn.writer.transport.get_write_buffer_size() > 1024 * 1024:
                await conn.writer.drain()
            return await future
        finally:
            timer.cancel()
            conn.pending.pop(request_id, None)

    @staticmethod
    def _expire(conn: _Connection, request_id: int, timeout_s: float) -> None:
        future = conn.pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(routing.HostUnavailable(f"The episode host did not answer within {timeout_s:g} s."))

    async def _read_forever(self, conn: _Connection) -> None:
        try:
            while True:
                (length,) = HEADER.unpack(await conn.reader.readexactly(HEADER.size))
                reply = json.loads(await conn.reader.readexactly(length))
                future = conn.pending.pop(reply.pop("id", None), None)
                if future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, OSError, ValueError, asyncio.CancelledError):
            pass
        self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        """The connection is gone: fail what it carried with the host-stopped error; dial again next time."""
        if self.conn is conn:
            self.conn = None
        try:
            conn.writer.close()
        except Exception:  # noqa: BLE001 - closing a dead transport
            pass
        pending, conn.pending = conn.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(routing.lost(self.host_id))

    async def _watch(self) -> None:
        """While requests wait, check the host's presence every WAIT_SLICE_S (a host whose machine
        vanished sends no FIN): one check per link, not per request."""
        watch = routing.HostWatch(self.host_id)
        r = routing.async_client()
        while self.conn is not None and self.conn.pending:
            await asyncio.sleep(routing.WAIT_SLICE_S)
            conn = self.conn
            if conn is None or not conn.pending:
                return
            try:
                alive = bool(await r.exists(routing.host_alive_key(self.host_id)))
            except Exception:  # noqa: BLE001 - Redis down says nothing of the host: keep waiting
                continue
            if watch.lost(alive):
                self._drop(conn)
                return


_async_links: dict[tuple[int, str, str], tuple[asyncio.AbstractEventLoop, AsyncLink]] = {}


def async_link(host_id: str, announced_as: str) -> AsyncLink:
    loop = asyncio.get_running_loop()
    key = (id(loop), host_id, announced_as)
    found = _async_links.get(key)
    if found is None or found[0] is not loop:
        for stale in [k for k, (other, _) in _async_links.items() if other.is_closed()]:
            del _async_links[stale]
        found = _async_links[key] = (loop, AsyncLink(host_id, announced_as))
    return found[1]


async def arequest(host_id: str, announced_as: str, message: dict, timeout_s: float) -> dict:
    return await async_link(host_id, announced_as).request(message, timeout_s)


# -- the web's side: a sync client ----------------------------------------------------------------

class SyncLink:
    """Blocking sockets to one host, each carrying one request at a time (threads share the pool)."""

    def __init__(self, host_id: str, announced_as: str):
        self.host_id = host_id
        self.address, self.token = parse_announced(announced_as)
        self.idle: list[socket.socket] = []
        self.lock = threading.Lock()
        self.unreachable_until = 0.0
        self.next_id = 0

    def _take(self) -> socket.socket:
        with self.lock:
            if self.idle:
                return self.idle.pop()
            if time.monotonic() < self.unreachable_until:
                raise Unreachable(self.address)
        sock = None
        try:
            sock = socket.create_connection(split_address(self.address), timeout=routing.CONNECT_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(encode({"token": self.token}))
            hello = _read_frame_from(sock)
            if hello is None or hello.get("hello") != self.host_id:
                raise OSError(f"{self.address} is not episode host {self.host_id}")
        except (OSError, ValueError) as exc:
            if sock is not None:
                sock.close()
            with self.lock:
                self.unreachable_until = time.monotonic() + UNREACHABLE_FOR_S
            logger.warning("episode host %s at %s is unreachable directly (%s); going through Redis",
                           self.host_id, self.address, exc)
            raise Unreachable(self.address) from None
        return sock

    def _give_back(self, sock: socket.socket) -> None:
        with self.lock:
            if len(self.idle) < IDLE_SOCKETS_PER_HOST:
                self.idle.append(sock)
                return
        sock.close()

    def request(self, message: dict, timeout_s: float) -> dict:
        sock = self._take()
        with self.lock:
            self.next_id += 1
            request_id = self.next_id
        try:
            sock.sendall(encode({**message, "id": request_id}))
            reply = self._read_reply(sock, request_id, timeout_s)
        except BaseException:
            sock.close()
            raise
        self._give_back(sock)
        return reply

    def _read_reply(self, sock: socket.socket, request_id: int, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        watch = routing.HostWatch(self.host_id)
        buffer = bytearray()
        sock.settimeout(routing.WAIT_SLICE_S)
        while True:
            need = HEADER.size if len(buffer) < HEADER.size else HEADER.size + HEADER.unpack_from(buffer)[0]
            if len(buffer) >= need > HEADER.size:
                reply = json.loads(bytes(buffer[HEADER.size:need]))
                if reply.pop("id", None) == request_id:
                    return reply
                del buffer[:need]  # a late reply to a request given up on (not expected: one at a time)
                continue
            try:
                chunk = sock.recv(max(65536, need - len(buffer)))
            except TimeoutError:
                if watch.lost(routing.host_is_alive(self.host_id)):
                    raise routing.lost(self.host_id) from None
                if time.monotonic() >= deadline:
                    raise routing.HostUnavailable(f"The episode host did not answer within {timeout_s:g} s.") from None
                continue
            except OSError:
                raise routing.lost(self.host_id) from None
            if not chunk:
                raise routing.lost(self.host_id)
            buffer += chunk


def _read_frame_from(sock: socket.socket) -> dict | None:
    """One frame read from a blocking socket (its timeout applies)."""
    buffer = b""
    while len(buffer) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(buffer))
        if not chunk:
            return None
        buffer += chunk
    (length,) = HEADER.unpack(buffer)
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


_sync_links: dict[tuple[str, str], SyncLink] = {}
_sync_links_lock = threading.Lock()


def sync_link(host_id: str, announced_as: str) -> SyncLink:
    key = (host_id, announced_as)
    found = _sync_links.get(key)
    if found is None:
        with _sync_links_lock:
            found = _sync_links.get(key) or SyncLink(host_id, announced_as)
            _sync_links[key] = found
    return found


def request(host_id: str, announced_as: str, message: dict, timeout_s: float) -> dict:
    return sync_link(host_id, announced_as).request(message, timeout_s)
