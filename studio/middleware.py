"""The input gate: request input the studio could never store or would choke on is refused with a 400
naming the field, before any view, form or schema sees it (studio/inputs.py says what is refused).

Query strings and form fields: NUL characters, unpaired surrogates, integers outside a bigint.
JSON bodies: the same, plus NaN/Infinity, nesting deeper than MAX_JSON_DEPTH and bodies that are
not UTF-8. What is left (types, ranges, unknown ids) is each endpoint's own validation.
"""
import json
import re

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme

from .inputs import BIGINT_MAX, BIGINT_MIN, InputProblem, json_parse, text_problem

API_PREFIX = "/api/"
_INTEGER = re.compile(r"[+-]?[0-9]+")


def checks_its_own_form_fields(view):
    """Marks a page view whose form validates every posted field itself (ranges included) and shows
    its own inline errors: the gate lets a posted integer outside a bigint through to it, so the form
    says what is wrong beside the field and keeps what was typed (the gate still refuses NUL
    characters and unpaired surrogates)."""
    view.checks_its_own_form_fields = True
    return view


def checks_its_own_query_fields(view):
    """Marks a page view (a GET form) whose form validates every query parameter itself, ranges included:
    the gate lets an integer outside a bigint through to it, so the page shows the error beside the field."""
    view.checks_its_own_query_fields = True
    return view


def _value_problem(field: str, value: str, *, integers: bool = True) -> InputProblem | None:
    reason = text_problem(value)
    if reason:
        return InputProblem(field, reason)
    # An id or offset past a bigint cannot name anything; refuse it here rather than at the database.
    if integers and len(value) > 18 and _INTEGER.fullmatch(value) and not BIGINT_MIN <= int(value) <= BIGINT_MAX:
        return InputProblem(field, "is an integer outside -2^63 .. 2^63-1")
    return None


def _fields_problem(fields, where: str, *, integers: bool = True) -> InputProblem | None:
    for key, values in fields.lists():
        reason = text_problem(key)
        if reason:
            return InputProblem(None, f"a {where} name {reason}")
        for value in values:
            problem = _value_problem(key, value, integers=integers)
            if problem:
                return problem
    return None


def _view_checks_its_own(request, marker: str) -> bool:
    if request.path.startswith(API_PREFIX):
        return False
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    return getattr(match.func, marker, False)


def request_input_problem(request, *, form_integers: bool = True, query_integers: bool = True) -> InputProblem | None:
    """The first part of the request's query string or body the studio refuses, or None;
    `form_integers=False` leaves posted form fields' integer ranges to the view's form,
    `query_integers=False` the query string's."""
    for segment in request.path.split("/"):
        problem = _value_problem("path", segment)
        if problem:
            return problem
    problem = _fields_problem(request.GET, "query parameter", integers=query_integers)
    if problem:
        return problem
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    content_type = request.content_type or ""
    if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return _fields_problem(request.POST, "form field", integers=form_integers)
    if content_type == "application/json" or (request.path.startswith(API_PREFIX) and not content_type.startswith("multipart/")):
        body = request.body
        if not body:
            return None
        try:
            json_parse(body.decode("utf-8"))
        except UnicodeDecodeError:
            return InputProblem(None, "the request body is not UTF-8")
        except json.JSONDecodeError:
            return None  # not JSON at all: the endpoint's parser says so
        except InputProblem as problem:
            return problem
    return None


def refusal(request, problem: InputProblem) -> HttpResponse:
    where = problem.field or "input"
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": f"{where}: {problem.reason}", "field": problem.field}, status=400)
    # The gate runs before sessions' users are known: a page of its own, in the studio's style, with a
    # way back to the form (a browser's back keeps what was typed).
    referer = request.headers.get("Referer", "")
    back = referer if url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()}) else "/"
    return HttpResponse(
        render_to_string("studio/bad_request.html", {"where": where, "reason": problem.reason, "back": back}),
        status=400, content_type="text/html; charset=utf-8",
    )


class InputGateMiddleware:
    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        problem = self.problem(request)
        if problem is not None:
            return refusal(request, problem)
        return self.get_response(request)

    @staticmethod
    def problem(request) -> InputProblem | None:
        problem = request_input_problem(request)
        if problem is None:
            return None
        if request.method == "POST" and _view_checks_its_own(request, "checks_its_own_form_fields"):
            return request_input_problem(request, form_integers=False)
        if request.method == "GET" and _view_checks_its_own(request, "checks_its_own_query_fields"):
            return request_input_problem(request, query_integers=False)
        return problem

    async def __acall__(self, request):
        # The ASGI handler has already read the body into memory or a spooled file: no I/O to wait for.
        problem = self.problem(request)
        if problem is not None:
            return refusal(request, problem)
        return await self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY with every response that has none: pages run only the
    scripts served from static/ (no inline script or on*= handlers), so injected markup cannot run."""

    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        return self.with_policy(self.get_response(request))

    async def __acall__(self, request):
        return self.with_policy(await self.get_response(request))

    @staticmethod
    def with_policy(response):
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
