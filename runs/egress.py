"""Where model agents may connect: the egress policy for a model endpoint's base_url.

The worker calls the endpoint from inside the studio's network, so a base_url could reach the database,
Redis or a cloud metadata service. Every address the host resolves to must be public, unless the host,
the address or a network holding it is in settings.MODEL_EGRESS_ALLOW (e.g. a model server on the
team's own network, or a loopback stand-in in tests).

The check and the connection use one resolution (`pinned_transport`): the host is resolved once per
connection, every answer is checked, and the socket connects to a checked address, so a DNS server that
answers "public" to the check and "private" a moment later (DNS rebinding) reaches nothing. The URL keeps
its host name, so the Host header and TLS (SNI and certificate check) still name the host.
"""
import ipaddress
import socket
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

from studio.errors import DomainError


class EgressRefused(DomainError):
    pass


def _allowed(host: str, address) -> bool:
    for entry in getattr(settings, "MODEL_EGRESS_ALLOW", []) or []:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a host name that is not this one
    return False


def _is_public(address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def checked_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (one resolution), once each; EgressRefused when any of them is
    not a public address and the allow list does not name it, or when the host does not resolve."""
    if not host:
        raise EgressRefused("base_url has no host name.", field="config.base_url")
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressRefused(f"the model endpoint's host {host!r} does not resolve ({exc}).", field="config.base_url") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if not _is_public(address) and not _allowed(host, address):
            raise EgressRefused(
                f"the model endpoint {host} resolves to {address}, a private, loopback or link-local address;"
                " an operator may allow it with MODEL_EGRESS_ALLOW.",
                field="config.base_url",
            )
    return addresses


def resolve_endpoint_host(base_url: str) -> list[str]:
    """checked_addresses of base_url's host and port."""
    parts = urlsplit(base_url)
    return checked_addresses(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


class PinnedBackend(httpcore.NetworkBackend):
    """httpcore's socket backend, but each TCP connection goes to an address checked_addresses passed,
    from the same resolution (never a second lookup the policy did not see)."""

    def __init__(self):
        self.sockets = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        host = host.decode() if isinstance(host, bytes) else host
        last = None
        for address in checked_addresses(host, port):
            try:
                return self.sockets.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        raise last

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise EgressRefused("model endpoints are reached over TCP only.", field="config.base_url")

    def sleep(self, seconds):
        self.sockets.sleep(seconds)


class PinnedTransport(httpx.HTTPTransport):
    """An httpx transport whose connections go through PinnedBackend. No proxy from the environment:
    a proxy would resolve the host itself, out of the policy's sight."""

    def __init__(self, *, limits: httpx.Limits = httpx.Limits(max_connections=20, max_keepalive_connections=5)):
        # httpx.HTTPTransport takes no network backend; its pool is httpcore's, which does. handle_request
        # and close, inherited, use only this pool.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedBackend(),
        )


def pinned_client(**kwargs) -> httpx.Client:
    """An httpx.Client that reaches only hosts the egress policy admits, at the addresses it checked."""
    return httpx.Client(transport=PinnedTransport(), trust_env=False, **kwargs)
