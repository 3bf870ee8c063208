"""A model endpoint's host is resolved once per connection and the socket goes to the address the egress
policy checked: a rebinding DNS answer (public for the check, private for the connection) reaches
nothing, while the Host header and TLS still name the host."""
import datetime
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.agent_errors import AgentFailed
from runs.openai_agent import ModelEndpoint

CONFIG = {"timeout_s": 2.0, "max_retries": 0, "retry_backoff_s": 0.0, "retry_backoff_max_s": 0.0}
REPLY = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}


@pytest.fixture
def stand_in():
    """A loopback HTTP server that records every request's Host header and answers a chat completion."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers["Host"])
            body = json.dumps(REPLY).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.seen = seen
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def dns(monkeypatch):
    """A resolver for *.test names: answers[name] is a list of successive answers (the last repeats);
    `asked` counts the lookups of each name. Other names resolve as usual."""
    real = socket.getaddrinfo
    answers, asked = {}, {}

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".test"):
            asked[host] = asked.get(host, 0) + 1
            queue = answers[host]
            address = queue.pop(0) if len(queue) > 1 else queue[0]
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, asked


def test_a_rebinding_answer_never_reaches_the_private_address(stand_in, dns, settings):
    settings.MODEL_EGRESS_ALLOW = []
    answers, asked = dns
    port = stand_in.server_address[1]
    # Public when the policy looks, loopback (the "internal service") on any later lookup.
    answers["rebind.test"] = ["1.1.1.1", "127.0.0.1"]
    endpoint = ModelEndpoint({**CONFIG, "base_url": f"http://rebind.test:{port}/v1", "timeout_s": 0.5}, api_key="")
    try:
        with pytest.raises(AgentFailed):
            endpoint.complete({"model": "x", "messages": []})
    finally:
        endpoint.close()
    assert stand_in.seen == []
    assert asked["rebind.test"] == 1


def test_a_private_answer_is_refused_before_connecting(stand_in, dns, settings):
    settings.MODEL_EGRESS_ALLOW = []
    answers, _ = dns
    answers["inside.test"] = ["127.0.0.1"]
    endpoint = ModelEndpoint({**CONFIG, "base_url": f"http://inside.test:{stand_in.server_address[1]}/v1"}, api_key="")
    try:
        with pytest.raises(AgentFailed, match="egress policy"):
            endpoint.complete({"model": "x", "messages": []})
    finally:
        endpoint.close()
    assert stand_in.seen == []


def test_an_allowed_host_is_reached_at_its_checked_address_under_its_own_name(stand_in, dns, settings):
    settings.MODEL_EGRESS_ALLOW = ["models.test"]
    answers, asked = dns
    answers["models.test"] = ["127.0.0.1"]
    port = stand_in.server_address[1]
    endpoint = ModelEndpoint({**CONFIG, "base_url": f"http://models.test:{port}/v1"}, api_key="")
    try:
        reply, _ = endpoint.complete({"model": "x", "messages": []})
        endpoint.complete({"model": "x", "messages": []})
    finally:
        endpoint.close()
    assert reply == REPLY
    assert stand_in.seen == [f"models.test:{port}"] * 2
    assert asked["models.test"] == 1  # the kept-alive connection stays on the checked address


def test_tls_names_the_host_not_the_pinned_address(dns, settings, tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "models.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("models.test")]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server_names = []
    context.sni_callback = lambda sock, server_name, ctx: server_names.append(server_name)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_one():
        conn, _ = listener.accept()
        try:
            context.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            pass  # the client refuses the self-signed certificate, as it should

    threading.Thread(target=accept_one, daemon=True).start()
    settings.MODEL_EGRESS_ALLOW = ["models.test"]
    dns[0]["models.test"] = ["127.0.0.1"]
    endpoint = ModelEndpoint({**CONFIG, "base_url": f"https://models.test:{port}/v1"}, api_key="")
    try:
        with pytest.raises(AgentFailed, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            endpoint.complete({"model": "x", "messages": []})
    finally:
        endpoint.close()
        listener.close()
    assert server_names == ["models.test"]
