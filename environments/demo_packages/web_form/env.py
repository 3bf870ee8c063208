"""A sign-up form behind a small WSGI app; the verifier judges the submissions the server recorded."""

import html
from string import Template

from studio_sdk.browser import BrowserEnvironment, Request, StaticSite, redirect, respond

FIELDS = ("name", "email", "country", "plan", "newsletter", "message")


class SignupForm(BrowserEnvironment):
    def make_site(self, task, seed):
        self.submissions = []  # what the server accepted: the state the verifier reads
        self.drafts = []
        static = StaticSite(self.site_dir)

        def page(template, **values):
            return Template(self.site_text(template)).safe_substitute(
                {key: html.escape(str(value)) for key, value in values.items()}
            )

        def app(environ, start_response):
            request = Request(environ)
            if request.path == "/" and request.method == "GET":
                return respond(start_response, page("form.html", error=request.query.get("error", "")))
            if request.path == "/submit" and request.method == "POST":
                form = {key: request.form.get(key, "").strip() for key in FIELDS}
                form["newsletter"] = "yes" if form["newsletter"] == "yes" else "no"
                if not form["name"] or "@" not in form["email"]:
                    return redirect(start_response, "/?error=Name+and+a+valid+email+are+required")
                if task.get("confirm"):
                    self.drafts.append(form)
                    summary = "".join(
                        f"<dt>{html.escape(key)}</dt><dd>{html.escape(value)}</dd>" for key, value in form.items()
                    )
                    body = Template(self.site_text("review.html")).safe_substitute(
                        summary=summary, draft=len(self.drafts) - 1
                    )
                    return respond(start_response, body)
                self.submissions.append(form)
                return redirect(start_response, "/done?name=" + form["name"].replace(" ", "+"))
            if request.path == "/confirm" and request.method == "POST":
                try:
                    form = self.drafts[int(request.form.get("draft", ""))]
                except (ValueError, IndexError):
                    return redirect(start_response, "/?error=Nothing+to+confirm")
                self.submissions.append(form)
                return redirect(start_response, "/done?name=" + form["name"].replace(" ", "+"))
            if request.path == "/done":
                return respond(start_response, page("done.html", name=request.query.get("name", "")))
            return static(environ, start_response)

        return app

    def verify(self):
        expected = self.task.get("fields") or {}
        if not self.submissions:
            drafts = " (a draft awaits confirmation)" if self.drafts else ""
            return 0.0, "the server recorded no submission" + drafts
        if len(self.submissions) > 1:
            return 0.0, f"the server recorded {len(self.submissions)} submissions; one was asked for"
        got = self.submissions[0]
        wrong = [f"{key}={got.get(key)!r} (expected {value!r})" for key, value in expected.items() if got.get(key) != value]
        if wrong:
            return 0.0, "submitted with wrong fields: " + ", ".join(wrong)
        return 1.0, "the server recorded one submission with every field as asked"
