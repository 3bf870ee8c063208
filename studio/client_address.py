"""The address a request comes from: the one place that decides it (the login lockout counts by it).

The socket's peer is the client, unless that peer is a proxy this install trusts (TRUSTED_PROXIES):
then the client is the right-most X-Forwarded-For hop that is not itself a trusted proxy. Only the
hops our own proxies appended are believed; whatever the client wrote to the left of them is not.
uvicorn is started with --no-proxy-headers everywhere, so REMOTE_ADDR is the socket's peer and this
module, not the server, reads the forwarded header."""
import ipaddress

from django.conf import settings


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return address.ipv4_mapped or address if isinstance(address, ipaddress.IPv6Address) else address


def _trusted(address, networks) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def client_address(request) -> str | None:
    """The client's address for `request` (a Django request): what axes locks out and logs."""
    peer_text = request.META.get("REMOTE_ADDR") or ""
    peer = _address(peer_text)
    networks = settings.TRUSTED_PROXIES
    if peer is None:
        return peer_text or None
    if not networks or not _trusted(peer, networks):
        return str(peer)
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    client = peer
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            # A hop we cannot read was written by someone we do not trust: the last trusted hop's peer.
            break
        client = address
        if not _trusted(address, networks):
            break
    return str(client)
