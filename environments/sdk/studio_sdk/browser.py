"""Browser environments: the package's site served on a loopback port, and a Chromium page the agent
works through JSON actions (Playwright's sync API, the system Chromium).

An env.py subclasses `BrowserEnvironment`; it may declare a WSGI app (`make_site`) whose Python state
the verifier reads, or serve site/ as static files. Example::

    from studio_sdk.browser import BrowserEnvironment, Request, respond

    class Guestbook(BrowserEnvironment):
        def make_site(self, task, seed):
            self.entries = []
            def app(environ, start_response):
                request = Request(environ)
                if request.method == "POST":
                    self.entries.append(request.form.get("name", ""))
                return respond(start_response, self.site_text("index.html"))
            return app

        def verify(self):                         # the site's real state, not the page text
            ok = self.entries == [self.task["name"]]
            return (1.0 if ok else 0.0), f"entries={self.entries}"

Actions (one JSON object; "action" names the kind): goto {url} (same origin only), click {id|selector},
fill {id|selector, value}, select {id|selector, value}, press {key, id|selector?}, scroll {dy},
wait {ms}, done {answer}. Ids are the [n] of the observation's text view.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import posixpath
import re
import socketserver
import threading
import time
import urllib.parse
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from . import Environment

__all__ = ["BrowserCrashed", "BrowserEnvironment", "Request", "StaticSite", "redirect", "respond"]

CHROMIUM_PATH = os.environ.get("STUDIO_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # the studio sandbox (uid, namespace, rlimits) confines Chromium instead
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
]
ACTION_KINDS = ("goto", "click", "fill", "select", "press", "scroll", "wait", "done")
BINARY_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".woff", ".woff2", ".ttf", ".otf")
ID_ATTRIBUTE = "data-studio-id"

# Walks the page: gives interactive elements stable ids (kept across observations of one document)
# and returns a compact text view, one line per text run or interactive element.
_TEXT_VIEW_JS = r"""
([attr, maxChars]) => {
  const interactive = 'a[href],button,input,select,textarea,[role=button],[role=link],[onclick],summary';
  let next = window.__studioNextId || 1;
  const lines = [];
  let size = 0;
  const push = (line) => { if (size < maxChars) { lines.push(line); size += line.length + 1; } };
  const squash = (text) => (text || '').replace(/\s+/g, ' ').trim();
  const visible = (el) => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return false;
    const style = getComputedStyle(el);
    return style.display !== 'none' && style.visibility !== 'hidden';
  };
  const labelOf = (el) => {
    if (el.labels && el.labels.length) {
      const label = el.labels[0].cloneNode(true);
      label.querySelectorAll('input,select,textarea,button').forEach((control) => control.remove());
      return squash(label.textContent);
    }
    return squash(el.getAttribute('aria-label') || el.getAttribute('placeholder') || el.getAttribute('title') || '');
  };
  const describe = (el) => {
    let id = el.getAttribute(attr);
    if (!id) { id = String(next++); el.setAttribute(attr, id); }
    const tag = el.tagName.toLowerCase();
    const parts = ['[' + id + ']'];
    if (tag === 'a') {
      parts.push('link', JSON.stringify(squash(el.innerText).slice(0, 80)), '->', el.getAttribute('href'));
    } else if (tag === 'input') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (type === 'hidden') return null;
      parts.push(type === 'checkbox' || type === 'radio' ? type : 'input[' + type + ']');
      if (el.name) parts.push('name=' + el.name);
      const label = labelOf(el);
      if (label) parts.push('label=' + JSON.stringify(label.slice(0, 80)));
      if (type === 'checkbox' || type === 'radio') parts.push('checked=' + el.checked + (el.value && el.value !== 'on' ? ' value=' + JSON.stringify(el.value) : ''));
      else if (type === 'submit' || type === 'button') parts.push(JSON.stringify(el.value));
      else parts.push('value=' + JSON.stringify(el.value.slice(0, 120)));
    } else if (tag === 'select') {
      parts.push('select');
      if (el.name) parts.push('name=' + el.name);
      const label = labelOf(el);
      if (label) parts.push('label=' + JSON.stringify(label.slice(0, 80)));
      parts.push('value=' + JSON.stringify(el.value));
      parts.push('options=' + JSON.stringify(Array.from(el.options).slice(0, 30).map(o => squash(o.text))));
    } else if (tag === 'textarea') {
      parts.push('textarea');
      if (el.name) parts.push('name=' + el.name);
      const label = labelOf(el);
      if (label) parts.push('label=' + JSON.stringify(label.slice(0, 80)));
      parts.push('value=' + JSON.stringify(el.value.slice(0, 200)));
    } else {
      parts.push(tag === 'button' ? 'button' : tag, JSON.stringify(squash(el.innerText || el.value).slice(0, 80)));
    }
    if (el.disabled) parts.push('disabled');
    return parts.join(' ');
  };
  const walk = (node) => {
    if (size >= maxChars) return;
    if (node.nodeType === Node.TEXT_NODE) {
      const text = squash(node.textContent);
      if (text) push(text);
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    const tag = node.tagName;
    if (tag === 'SCRIPT' || tag === 'STYLE' || tag === 'NOSCRIPT' || tag === 'TEMPLATE' || tag === 'HEAD') return;
    if (!visible(node)) return;
    if (node.matches(interactive)) {
      const line = describe(node);
      if (line) push(line);
      return;
    }
    if (/^H[1-6]$/.test(tag)) { push('#'.repeat(Number(tag[1])) + ' ' + squash(node.innerText)); return; }
    for (const child of node.childNodes) walk(child);
  };
  if (document.body) walk(document.body);
  window.__studioNextId = next;
  return lines.join('\n');
}
"""

_HIGHLIGHT_JS = """
([attr, id, on]) => {
  const el = document.querySelector('[' + attr + '="' + id + '"]');
  if (!el) return false;
  if (on) { el.dataset.studioOutline = el.style.outline; el.style.outline = '3px solid #e5484d'; }
  else { el.style.outline = el.dataset.studioOutline || ''; delete el.dataset.studioOutline; }
  return true;
}
"""


class BrowserCrashed(RuntimeError):
    """Chromium (or the page's renderer) is gone: the episode cannot go on."""


class ActionError(Exception):
    """An action the browser could not carry out; it becomes the observation's `error`."""


# -- the site side -------------------------------------------------------------------------------


class Request:
    """The parts of a WSGI request a small site needs: method, path, query and form values."""

    def __init__(self, environ: dict):
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        self.path = environ.get("PATH_INFO") or "/"
        self.query = _single_values(urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        self.form: dict[str, str] = {}
        if self.method == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            body = environ["wsgi.input"].read(min(length, 1024 * 1024)).decode("utf-8", "replace")
            self.form = _single_values(urllib.parse.parse_qs(body, keep_blank_values=True))


def _single_values(values: dict) -> dict:
    return {key: items[-1] for key, items in values.items()}


def respond(start_response, body: str | bytes, status: str = "200 OK", content_type: str = "text/html; charset=utf-8", headers=()):
    data = body.encode("utf-8") if isinstance(body, str) else body
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data))), *headers])
    return [data]


def redirect(start_response, location: str):
    """303 See Other: the browser follows with a GET (post/redirect/get)."""
    return respond(start_response, b"", "303 See Other", headers=[("Location", location)])


class StaticSite:
    """A WSGI app serving files of a folder (binary assets may be stored as "base64:..." text)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def read(self, path: str) -> bytes | None:
        relative = posixpath.normpath(urllib.parse.unquote(path)).lstrip("/")
        if relative in ("", "."):
            relative = "index.html"
        full = os.path.abspath(os.path.join(self.root, relative))
        if not full.startswith(self.root + os.sep):
            return None
        if os.path.isdir(full):
            full = os.path.join(full, "index.html")
        try:
            with open(full, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        if full.lower().endswith(BINARY_EXTENSIONS) and data.startswith(b"base64:"):
            data = base64.b64decode(data[len(b"base64:"):])
        return data

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        data = self.read(path)
        if data is None:
            return respond(start_response, "<h1>Not found</h1>", "404 Not Found")
        name = path if not path.endswith("/") else path + "index.html"
        content_type = mimetypes.guess_type(name)[0] or "text/html"
        if content_type.startswith("text/"):
            content_type += "; charset=utf-8"
        return respond(start_response, data, content_type=content_type)


class _SiteServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


# -- the environment -----------------------------------------------------------------------------


class BrowserEnvironment(Environment):
    """Base class of browser environments. Override `make_site` (or ship a static site/), `verify`,
    and optionally `task_prompt`, `start_path_for` and `reward_for`.

    One sandbox keeps one site server and one Chromium; every reset opens a fresh browser context
    (no cookies, storage or cache shared between rollouts) and a new site from `make_site`.
    """

    site_dir = "site"
    start_path = "/"
    viewport = {"width": 1024, "height": 720}
    action_timeout_ms = 3000
    navigation_timeout_ms = 5000
    max_wait_ms = 3000
    text_max_chars = 6000
    screenshot_quality = 60
    screenshot_max_bytes = 200_000
    screenshots = True
    action_space = {
        "type": "unsupported",
        "note": "browser actions: goto, click, fill, select, press, scroll, wait, done",
        "kinds": list(ACTION_KINDS),
    }

    # -- hooks for the author ---------------------------------------------------------------------

    def make_site(self, task: dict, seed: int):
        """The WSGI app to serve for this episode; by default site/ as static files."""
        return StaticSite(self.site_dir)

    def task_prompt(self, task: dict) -> str:
        return str(task.get("prompt") or task.get("goal") or "")

    def start_path_for(self, task: dict) -> str:
        return str(task.get("start_path") or self.start_path)

    def reward_for(self, action: dict, observation: dict) -> float:
        """Per-step reward; the outcome is judged by `verify`."""
        return 0.0

    # -- verifier helpers ---------------------------------------------------------------------------

    def site_text(self, path: str) -> str:
        """A text file of site/ (templates of a WSGI site)."""
        with open(os.path.join(self.site_dir, path), encoding="utf-8") as handle:
            return handle.read()

    def dom_value(self, selector: str) -> str | None:
        """The current value of a form field on the page, or None."""
        try:
            return self.page.locator(selector).first.input_value(timeout=self.action_timeout_ms)
        except Exception:
            return None

    def dom_text(self, selector: str = "body") -> str | None:
        try:
            return self.page.locator(selector).first.inner_text(timeout=self.action_timeout_ms)
        except Exception:
            return None

    def page_path(self) -> str:
        """The path (and query) of the page now shown, when it is on the site."""
        url = self.page.url if self.page is not None else ""
        if not url.startswith(self.origin):
            return url
        return url[len(self.origin):] or "/"

    # -- lifecycle ----------------------------------------------------------------------------------

    def __init__(self):
        self.origin = ""
        self.task: dict = {}
        self.seed = 0
        self.site = None
        self.answer = None
        self.finished = False
        self.page = None
        self._server = None
        self._playwright = None
        self._browser = None
        self._context = None
        self._crash: str | None = None
        self._events: dict[str, list] = {}
        self._artifact: dict | None = None
        self._highlight: str | None = None
        self._steps = 0

    def reset(self, task, seed):
        self.task, self.seed = task, seed
        self.answer, self.finished, self._steps = None, False, 0
        self.site = self.make_site(task, seed)
        self._start_server()
        self._start_browser()
        self._open_context()
        error = None
        try:
            self._goto(self.start_path_for(task))
        except ActionError as exc:
            error = str(exc)
        return self._observe(error)

    def step(self, action):
        self._steps += 1
        self._check_alive()
        self._highlight = None
        kind, error, target = None, None, None
        try:
            if not isinstance(action, dict):
                raise ActionError(f"an action is a JSON object with an 'action' field, got {type(action).__name__}")
            kind = action.get("action") or action.get("type")
            if kind not in ACTION_KINDS:
                raise ActionError(f"unknown action {kind!r}; one of {', '.join(ACTION_KINDS)}")
            target = self._perform(kind, action)
        except ActionError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - Playwright's errors: timeouts, detached elements...
            self._check_alive()
            error = _short_error(exc)
        if kind != "done":
            error = error or self._settle()
        self._check_alive()
        observation = self._observe(error)
        terminated = kind == "done" and error is None
        self.finished = self.finished or terminated
        info = {"action_error": error, **self._take_events()}
        if target:
            info["target"] = target
        reward = float(self.reward_for(action if isinstance(action, dict) else {}, observation) or 0.0)
        return observation, reward, terminated, False, info

    def take_artifact(self):
        artifact, self._artifact = self._artifact, None
        return artifact

    def close(self):
        for closer in (
            lambda: self._context and self._context.close(),
            lambda: self._browser and self._browser.close(),
            lambda: self._playwright and self._playwright.stop(),
        ):
            try:
                closer()
            except Exception:
                pass
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._server = self._browser = self._playwright = self._context = self.page = None

    # -- site and browser ---------------------------------------------------------------------------

    def _start_server(self):
        if self._server is not None:
            return

        def app(environ, start_response):
            return self.site(environ, start_response)

        self._server = _SiteServer(("127.0.0.1", 0), _QuietHandler)
        self._server.set_app(app)
        threading.Thread(target=self._server.serve_forever, name="site", daemon=True).start()
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _start_browser(self):
        if self._browser is not None and self._browser.is_connected():
            return
        if self._browser is not None:
            raise BrowserCrashed(self._crash or "Chromium is no longer running")
        global _WARM
        if _WARM is not None:
            # A pooled sandbox started Chromium while it waited for this rollout.
            self._playwright, self._browser, _WARM = _WARM[0], _WARM[1], None
            if self._browser.is_connected():
                self._browser.on("disconnected", lambda _browser: self._note_crash("Chromium exited (the browser process is gone)"))
                return
            self._browser = None
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS, timeout=30_000, handle_sigint=False, handle_sigterm=False
        )
        self._browser.on("disconnected", lambda _browser: self._note_crash("Chromium exited (the browser process is gone)"))

    def _open_context(self):
        if self._context is not None:
            try:
                self._context.close()
            except Exception:
                pass
        self._crash = None
        self._events = {"blocked_urls": [], "dialogs": [], "downloads": [], "popups": []}
        self._context = self._browser.new_context(
            viewport=self.viewport, accept_downloads=False, service_workers="block", java_script_enabled=True
        )
        # Only requests that leave the site match (a regex is matched inside the browser driver, so the
        # site's own requests never make a round trip through Python).
        self._context.route(re.compile(r"^(?!" + re.escape(self.origin) + r"(?:/|$)|data:|blob:|about:)"), self._route)
        page = self._context.new_page()
        page.set_default_timeout(self.action_timeout_ms)
        page.set_default_navigation_timeout(self.navigation_timeout_ms)
        page.on("dialog", self._on_dialog)
        page.on("download", self._on_download)
        page.on("crash", lambda _page: self._note_crash("the page's renderer crashed"))
        # A main-frame navigation in flight (a form post, a link): the step waits for its load.
        self._navigating = False
        page.on("request", self._on_request)
        page.on("requestfailed", self._on_request_failed)
        page.on("load", self._on_load)
        self._context.on("page", self._on_popup)  # after the main page: only popups from here on
        self.page = page

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.origin + "/") or url == self.origin or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
            return
        self._events["blocked_urls"].append(url[:300])
        route.abort("blockedbyclient")

    def _on_request(self, request):
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self._navigating = True

    def _on_request_failed(self, request):
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self._navigating = False

    def _on_load(self, _page):
        self._navigating = False

    def _on_dialog(self, dialog):
        self._events["dialogs"].append({"type": dialog.type, "message": dialog.message[:300]})
        try:
            dialog.dismiss()
        except Exception:
            pass

    def _on_download(self, download):
        self._navigating = False  # a navigation that became a download never loads
        self._events["downloads"].append({"url": download.url[:300], "refused": True})
        try:
            download.cancel()
        except Exception:
            pass

    def _on_popup(self, page):
        self._events["popups"].append({"url": page.url[:300], "closed": True})
        try:
            page.close()
        except Exception:
            pass

    def _note_crash(self, reason):
        self._crash = self._crash or reason

    def _check_alive(self):
        if self._crash or self._browser is None or not self._browser.is_connected():
            raise BrowserCrashed(self._crash or "Chromium exited (the browser process is gone)")

    def _take_events(self):
        events = {key: list(values) for key, values in self._events.items() if values}
        for values in self._events.values():
            values.clear()
        return events

    # -- actions --------------------------------------------------------------------------------------

    def _perform(self, kind, action):
        page = self.page
        if kind == "goto":
            self._goto(str(action.get("url") or "/"))
            return None
        if kind == "done":
            self.answer = action.get("answer")
            return None
        if kind == "scroll":
            page.evaluate("([dx, dy]) => window.scrollBy(dx, dy)", [int(action.get("dx") or 0), int(action.get("dy") or 400)])
            return None
        if kind == "wait":
            page.wait_for_timeout(max(0, min(int(action.get("ms") or 500), self.max_wait_ms)))
            return None
        if kind == "press":
            key = str(action.get("key") or "")
            if not key:
                raise ActionError("press needs a key, e.g. Enter")
            if action.get("id") is None and not action.get("selector"):
                page.keyboard.press(key)
                return None
        locator, target = self._locate(action)
        if kind == "click":
            target["box"] = _box(locator)
            self._highlight = target.get("id")
            locator.click()
        elif kind == "fill":
            locator.fill(str(action.get("value") if action.get("value") is not None else ""))
        elif kind == "select":
            locator.select_option(str(action.get("value") if action.get("value") is not None else ""))
        elif kind == "press":
            locator.press(str(action["key"]))
        return target

    def _locate(self, action):
        if action.get("id") is not None:
            element_id = str(action["id"]).strip().lstrip("[").rstrip("]")
            if not element_id.isdigit():
                raise ActionError(f"element id {action['id']!r} is not a number from the text view")
            selector = f'[{ID_ATTRIBUTE}="{element_id}"]'
            target = {"id": element_id}
        elif action.get("selector"):
            selector = str(action["selector"])
            target = {"selector": selector}
        else:
            raise ActionError(f"{action.get('action') or action.get('type')} needs an element: 'id' or 'selector'")
        locator = self.page.locator(selector).first
        if locator.count() == 0:
            raise ActionError(f"no element matches {selector}")
        if "id" not in target:
            target["id"] = locator.get_attribute(ID_ATTRIBUTE)
        return locator, target

    def _goto(self, url):
        full = urllib.parse.urljoin(self.origin + "/", url)
        if not (full == self.origin or full.startswith(self.origin + "/")):
            self._events["blocked_urls"].append(full[:300])
            raise ActionError(f"goto is for this site only; {full[:200]} was blocked")
        try:
            self.page.goto(full, wait_until="load")
            self._navigating = False
        except Exception as exc:  # noqa: BLE001
            self._check_alive()
            self._stop_loading()
            raise ActionError(_short_error(exc)) from None

    def _settle(self):
        """Let a navigation the action started finish loading; a page that never does is an error."""
        deadline = time.monotonic() + self.navigation_timeout_ms / 1000.0
        while self._navigating:
            if time.monotonic() >= deadline:
                self._stop_loading()
                return f"the page did not finish loading within {self.navigation_timeout_ms} ms"
            self.page.wait_for_timeout(15)  # lets Playwright deliver the page's events
        return None

    def _stop_loading(self):
        """Cancel a navigation still in flight (as the browser's Stop button does): until then
        Playwright would wait for the new document before reading the page."""
        self._navigating = False
        try:
            session = self._context.new_cdp_session(self.page)
            try:
                session.send("Page.stopLoading")
            finally:
                session.detach()
        except Exception:  # noqa: BLE001 - best effort; the step's own timeout still bounds it
            pass

    # -- observation ----------------------------------------------------------------------------------

    def _observe(self, error):
        page = self.page
        try:
            text = page.evaluate(_TEXT_VIEW_JS, [ID_ATTRIBUTE, self.text_max_chars])
            title = page.title()
        except Exception as exc:  # noqa: BLE001 - a navigation in flight destroys the context
            self._check_alive()
            text, title = "", ""
            error = error or f"the page could not be read: {_short_error(exc)}"
        if self.screenshots:
            self._artifact = self._screenshot()
        return {
            "task": self.task_prompt(self.task),
            "url": self.page_path(),
            "title": title,
            "text": text,
            "error": error,
        }

    def _screenshot(self):
        page, highlighted = self.page, False
        try:
            if self._highlight:
                highlighted = page.evaluate(_HIGHLIGHT_JS, [ID_ATTRIBUTE, self._highlight, True])
            quality = self.screenshot_quality
            while True:
                data = page.screenshot(type="jpeg", quality=quality, timeout=self.action_timeout_ms, animations="disabled")
                if len(data) <= self.screenshot_max_bytes or quality <= 20:
                    break
                quality -= 20
            if len(data) > self.screenshot_max_bytes:
                return None
            return {"type": "image/jpeg", "base64": base64.b64encode(data).decode("ascii")}
        except Exception:  # noqa: BLE001 - a missing screenshot must not fail the step
            return None
        finally:
            if highlighted:
                try:
                    page.evaluate(_HIGHLIGHT_JS, [ID_ATTRIBUTE, self._highlight, False])
                except Exception:
                    pass


_WARM = None
WARM_DATA_LIMIT_MB = 1024


def warm():
    """Start Playwright and Chromium before any rollout (a pooled sandbox calls this while it waits).
    The browser gets a data-segment cap now, since the rollout's own limits come only at load."""
    global _WARM
    if _WARM is not None:
        return
    import resource

    from playwright.sync_api import sync_playwright

    cap = WARM_DATA_LIMIT_MB * 1024 * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard == resource.RLIM_INFINITY or hard > cap:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS, timeout=30_000, handle_sigint=False, handle_sigterm=False
    )
    _WARM = (playwright, browser)


def _box(locator):
    try:
        box = locator.bounding_box(timeout=1000)
    except Exception:
        return None
    return [round(box["x"]), round(box["y"]), round(box["width"]), round(box["height"])] if box else None


def _short_error(exc) -> str:
    text = str(exc).split("\n", 1)[0].strip() or type(exc).__name__
    name = type(exc).__name__
    return (text if name in ("Error", "ActionError") else f"{name}: {text}")[:400]

