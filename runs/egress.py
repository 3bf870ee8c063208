"""Where model agents may connect: the egress policy for a model endpoint's base_url.

The worker calls the endpoint from inside the studio's network, so a base_url could reach the database,
Redis or a cloud metadata service. Every address the host resolves to must be public, unless the host,
the address or a network holding it is in settings.MODEL_EGRESS_ALLOW (e.g. a model server on the
team's own network, or a loopback stand-in in tests).
"""
import ipaddress
import socket
from urllib.parse import urlsplit

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


def resolve_endpoint_host(base_url: str) -> list[str]:
    """The addresses base_url's host resolves to, once each; EgressRefused when any of them is not a
    public address and the allow list does not name it (or the host does not resolve)."""
    host = urlsplit(base_url).hostname or ""
    if not host:
        raise EgressRefused("base_url has no host name.", field="config.base_url")
    port = urlsplit(base_url).port or (443 if base_url.startswith("https") else 80)
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
