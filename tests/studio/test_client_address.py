"""The login lockout counts the address the request really comes from: the socket's peer, or, behind a
proxy this install trusts (TRUSTED_PROXIES), the hop that proxy names; a client-written
X-Forwarded-For never buys it fresh tries."""
import ipaddress
import re
from pathlib import Path

import httpx
import pytest
from django.test import RequestFactory

from studio.client_address import client_address
from tests.conftest import PASSWORD
from tests.processes import kill_group, start_asgi_server

REPO = Path(__file__).resolve().parents[2]
TRIES = 12  # more than AXES_FAILURE_LIMIT (10)


def log_in(base: str, *, username: str, password: str, forwarded_for: str) -> httpx.Response:
    with httpx.Client(base_url=base, follow_redirects=False, timeout=30) as http:
        page = http.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return http.post("/accounts/login/", data={"username": username, "password": password,
                                                    "csrfmiddlewaretoken": token},
                         headers={"X-Forwarded-For": forwarded_for, "Referer": base + "/accounts/login/"})


@pytest.fixture
def studio_server(tmp_path, request):
    proc, url = start_asgi_server(tmp_path / "asgi.log", env=getattr(request, "param", None))
    yield url
    kill_group(proc)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_new_forwarded_for_on_every_try_does_not_escape_the_lockout(owner, studio_server):
    answers = [log_in(studio_server, username=owner.username, password="wrong",
                      forwarded_for=f"198.51.100.{n}").status_code for n in range(TRIES)]
    assert 429 in answers, answers
    right = log_in(studio_server, username=owner.username, password=PASSWORD, forwarded_for="198.51.100.200")
    assert right.status_code == 429
    assert "sessionid" not in right.cookies


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("studio_server", [{"TRUSTED_PROXIES": "127.0.0.1"}], indirect=True)
def test_behind_a_trusted_proxy_the_hop_it_names_is_locked_out_whatever_the_client_wrote(owner, studio_server):
    # The proxy (the test, on 127.0.0.1) appends the client's real address; the client forged the rest.
    answers = [log_in(studio_server, username=owner.username, password="wrong",
                      forwarded_for=f"192.0.2.{n}, 203.0.113.7").status_code for n in range(TRIES)]
    assert 429 in answers, answers
    again = log_in(studio_server, username=owner.username, password=PASSWORD, forwarded_for="192.0.2.99, 203.0.113.7")
    assert again.status_code == 429
    elsewhere = log_in(studio_server, username=owner.username, password=PASSWORD, forwarded_for="203.0.113.8")
    assert elsewhere.status_code == 302 and "sessionid" in elsewhere.cookies


def address(settings, *, peer: str, forwarded: str | None = None, trusted: str = "") -> str | None:
    settings.TRUSTED_PROXIES = tuple(ipaddress.ip_network(n) for n in trusted.split(",") if n)
    extra = {"REMOTE_ADDR": peer} | ({"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {})
    return client_address(RequestFactory().get("/", **extra))


def test_without_trusted_proxies_the_header_is_ignored(settings):
    assert address(settings, peer="127.0.0.1", forwarded="198.51.100.1") == "127.0.0.1"


def test_a_peer_that_is_not_a_trusted_proxy_is_the_client(settings):
    assert address(settings, peer="198.51.100.9", forwarded="192.0.2.1", trusted="10.0.0.0/8") == "198.51.100.9"


def test_the_right_most_untrusted_hop_is_the_client(settings):
    got = address(settings, peer="10.0.0.2", forwarded="6.6.6.6, 192.0.2.5, 10.0.0.1", trusted="10.0.0.0/8")
    assert got == "192.0.2.5"


def test_an_unreadable_hop_stops_the_walk_at_the_last_trusted_one(settings):
    assert address(settings, peer="10.0.0.2", forwarded="192.0.2.5, junk", trusted="10.0.0.0/8") == "10.0.0.2"


def test_a_trusted_proxy_without_the_header_is_the_client(settings):
    assert address(settings, peer="10.0.0.2", trusted="10.0.0.0/8") == "10.0.0.2"


def test_bad_trusted_proxies_refuse_to_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from studio.settings import envnetworks

    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8,not-a-network")
    with pytest.raises(ImproperlyConfigured, match="not-a-network"):
        envnetworks("TRUSTED_PROXIES")


def test_every_uvicorn_launch_ignores_proxy_headers():
    # uvicorn believes X-Forwarded-For from 127.0.0.1 by default and rewrites the peer before Django sees it.
    launches = {
        "scripts/run_studio.sh": (REPO / "scripts/run_studio.sh").read_text(),
        "docker-compose.yml": (REPO / "docker-compose.yml").read_text(),
        "Dockerfile": (REPO / "Dockerfile").read_text(),
        "tests/processes.py": (REPO / "tests/processes.py").read_text(),
    }
    for name, text in launches.items():
        lines = [line for line in text.splitlines() if "studio.asgi:application" in line]
        assert lines, name
        for line in lines:
            assert "no-proxy-headers" in line or "no-proxy-headers" in text[text.index(line):][:400], (name, line)
