"""Web hardening: DEBUG off unless asked, `check --deploy` clean with a deployment's environment, a
Content-Security-Policy without inline script, login throttling, model API keys encrypted at rest,
and the egress policy of model agents."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from runs import egress
from runs.models import AgentSecret, RolloutStatus
from runs.openai_agent import api_key_decrypt, api_key_encrypt, api_key_of
from tests.conftest import PASSWORD, login
from tests.runs.rollout_factories import demo_version, play_one

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT_ENV = {
    "DJANGO_SETTINGS_MODULE": "studio.settings", "SECRET_KEY": "k" * 20 + "a-long-random-deployment-secret-0123456789",
    "ALLOWED_HOSTS": "studio.example.com", "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/studio"),
}


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    clean = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "DJANGO_SETTINGS_MODULE")}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=clean | env, capture_output=True, text=True, timeout=120)


def test_debug_is_off_unless_asked_for():
    code = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    assert run_python(code, DEPLOYMENT_ENV).stdout.strip() == "False"
    assert run_python(code, DEPLOYMENT_ENV | {"DEBUG": "true"}).stdout.strip() == "True"
    refused = run_python(code, {"DJANGO_SETTINGS_MODULE": "studio.settings"})
    assert refused.returncode != 0 and "SECRET_KEY must be set" in refused.stderr


def test_check_deploy_is_clean_with_a_deployments_environment():
    clean = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=clean | DEPLOYMENT_ENV, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_pages_send_a_content_security_policy_without_inline_script(owner):
    response = login(owner).get("/")
    policy = response["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]+)", policy).group(1)
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
    assert "frame-ancestors 'none'" in policy


def test_no_template_has_inline_script_or_event_handlers():
    offenders = []
    for template in (REPO / "templates").rglob("*.html"):
        text = template.read_text()
        for match in re.finditer(r"<script(?![^>]*\bsrc=)([^>]*)>", text):
            if 'type="application/json"' not in match.group(1):  # data, never run
                offenders.append(f"{template.relative_to(REPO)}: inline <script>")
        for match in re.finditer(r"\son[a-z]+\s*=\s*[\"']", text):
            offenders.append(f"{template.relative_to(REPO)}: {match.group(0).strip()} handler")
    assert not offenders, offenders


@pytest.mark.django_db
def test_login_is_throttled_after_repeated_failures(owner, client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/accounts/login/", {"username": owner.username, "password": "wrong"})
    response = client.post("/accounts/login/", {"username": owner.username, "password": PASSWORD})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_good_password_still_logs_in_below_the_limit(owner, client):
    for _ in range(3):
        client.post("/accounts/login/", {"username": owner.username, "password": "wrong"})
    response = client.post("/accounts/login/", {"username": owner.username, "password": PASSWORD})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(owner.pk)


# -- model API keys at rest --------------------------------------------------------------------------


def test_model_api_keys_are_stored_encrypted(owner_api):
    key = "sk-very-secret-model-key-123"
    response = owner_api.post("/agents", {"name": "m", "kind": "openai", "api_key": key,
                                          "config": {"base_url": "https://models.example.com/v1", "model": "x"}})
    assert response.status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM runs_agentsecret")
        (stored,) = cursor.fetchone()
    assert key not in stored and stored.startswith("fernet:")
    assert api_key_of(AgentSecret.objects.get().agent) == key


def test_the_migration_encrypts_keys_stored_in_plain_text(owner_api):
    from importlib import import_module

    from django.apps import apps

    from runs.models import Agent

    owner_api.post("/agents", {"name": "m", "kind": "openai", "config": {"base_url": "https://m.example.com/v1", "model": "x"}})
    AgentSecret.objects.create(agent=Agent.objects.get(name="m"), api_key="sk-plain-old")
    migration = import_module("runs.migrations.0008_webhard_encrypt_api_keys")
    migration.encrypt_plain_keys(apps, None)
    stored = AgentSecret.objects.get().api_key
    assert "sk-plain-old" not in stored and api_key_decrypt(stored) == "sk-plain-old"
    assert api_key_decrypt(api_key_encrypt("x")) == "x"


# -- egress of model agents --------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:5432/v1", "http://localhost:6379/v1", "http://169.254.169.254/latest", "http://10.0.0.8/v1",
    "http://[::1]:8000/v1", "http://[::ffff:127.0.0.1]/v1", "http://0.0.0.0:8000/v1",
])
def test_private_loopback_and_link_local_endpoints_are_refused(url, settings):
    settings.MODEL_EGRESS_ALLOW = []
    with pytest.raises(egress.EgressRefused, match="MODEL_EGRESS_ALLOW"):
        egress.resolve_endpoint_host(url)


def test_the_allow_list_admits_a_named_network(settings):
    settings.MODEL_EGRESS_ALLOW = ["10.0.0.0/8", "127.0.0.1"]
    assert egress.resolve_endpoint_host("http://10.1.2.3:8000/v1") == ["10.1.2.3"]
    assert egress.resolve_endpoint_host("http://127.0.0.1:9/v1") == ["127.0.0.1"]


@pytest.mark.django_db(transaction=True)
def test_a_model_agent_pointed_at_an_internal_service_errors_without_echoing_it(team, owner, settings):
    import socket
    import threading

    # An "internal service" on loopback that answers anything with a secret-looking banner.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 27\r\n\r\nINTERNAL-BANNER password=42")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    from runs import services

    version = demo_version(team, owner, "inventory_tools")
    try:
        for allow in ([], ["127.0.0.1"]):
            settings.MODEL_EGRESS_ALLOW = allow
            agent = services.agent_create(team=team, actor=owner, name=f"internal-{len(allow)}", kind="openai", config={
                "base_url": f"http://127.0.0.1:{port}/v1", "model": "x", "max_retries": 0})
            rollout = play_one(team, owner, version, agent, task_id=version.tasks[0]["id"])
            assert rollout.status == RolloutStatus.ERRORED
            assert "INTERNAL-BANNER" not in rollout.error and "password" not in rollout.error
            if not allow:
                assert "egress policy" in rollout.error
    finally:
        server.close()


def test_with_debug_off_http_redirects_to_https_and_https_answers_send_hsts_and_secure_cookies():
    code = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from django.test import Client\n"
        "plain = Client().get('/accounts/login/', HTTP_HOST='studio.example.com')\n"
        "tls = Client().get('/accounts/login/', HTTP_HOST='studio.example.com', secure=True)\n"
        "print(plain.status_code, plain.get('Location'))\n"
        "print(tls.status_code, tls.get('Strict-Transport-Security'))\n"
        "print(bool(tls.cookies['csrftoken']['secure']), settings.SESSION_COOKIE_SECURE, settings.SESSION_COOKIE_HTTPONLY)\n"
    )
    result = run_python(code, DEPLOYMENT_ENV)
    assert result.returncode == 0, result.stderr
    redirect, hsts, cookies = result.stdout.strip().splitlines()[-3:]
    assert redirect == "301 https://studio.example.com/accounts/login/"
    status, policy = hsts.split(" ", 1)
    assert status == "200" and "max-age=" in policy and "includeSubDomains" in policy and int(policy.split("max-age=")[1].split(";")[0]) >= 31536000
    assert cookies == "True True True"
