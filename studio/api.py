"""The project's one NinjaAPI: bearer-token auth, error handlers, and each app's router."""
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError

from .errors import DomainError
from .auth import TokenAuth


api = NinjaAPI(
    title="Environment Studio API",
    version="1",
    description="Author environments, run rollouts, review trajectories. "
    "Authenticate with `Authorization: Bearer <token>` (create tokens on your team's settings page).",
    auth=TokenAuth(),
    urls_namespace="api",
)


@api.exception_handler(DomainError)
def domain_error(request, exc: DomainError):
    body = {"detail": exc.message}
    if exc.field:
        body["field"] = exc.field
    extra = getattr(exc, "api_extra", None)
    if callable(extra):
        body.update(extra())
    response = api.create_response(request, body, status=exc.status)
    retry_after_s = getattr(exc, "retry_after_s", None)
    if retry_after_s:
        response["Retry-After"] = str(max(1, round(retry_after_s)))
    return response


@api.exception_handler(Http404)
def not_found(request, exc):
    return api.create_response(request, {"detail": "Not found."}, status=404)


@api.exception_handler(ValidationError)
def validation_error(request, exc: ValidationError):
    errors = []
    for err in exc.errors:
        loc = [str(part) for part in err.get("loc", []) if part not in ("body", "payload", "query", "path")]
        errors.append({"field": ".".join(loc) or None, "message": err.get("msg", "invalid")})
    first = errors[0] if errors else {"field": None, "message": "invalid input"}
    return api.create_response(
        request,
        {"detail": f"{first['field'] or 'input'}: {first['message']}", "field": first["field"], "errors": errors},
        status=422,
    )


@api.exception_handler(AuthenticationError)
def auth_error(request, exc):
    return api.create_response(
        request, {"detail": "Missing or invalid token. Send `Authorization: Bearer <token>`."}, status=401
    )


from environments.api import router as environments_router  # noqa: E402
from runs.api import router as runs_router  # noqa: E402

api.add_router("/", environments_router)
api.add_router("/", runs_router)

from runs.review.api import router as review_router  # noqa: E402

api.add_router("/", review_router)

from runs.sessions.api import router as sessions_router  # noqa: E402

api.add_router("/", sessions_router)

from runs.protocols.api import router as protocols_router  # noqa: E402

api.add_router("/", protocols_router)
from runs.quality.api import router as quality_router  # noqa: E402

api.add_router("/", quality_router)
from runs.curriculum.api import router as curriculum_router  # noqa: E402

api.add_router("/", curriculum_router)
