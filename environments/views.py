"""Pages for environments: list, create, the draft editor, versions, diffs, packages."""
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from runs.review import selectors as review_selectors
from studio.access import team_view

from . import package, selectors, services
from .dependencies import services as dependency_services
from .api import harbor_response, package_response
from .harbor import services as harbor_services
from .forms import EnvironmentForm, UploadForm

EDITOR_MODES = {".py": "python", ".toml": "toml", ".js": "javascript", ".json": "javascript",
                ".jsonl": "javascript", ".css": "css", ".html": "htmlmixed", ".md": "markdown"}


# A version page shows at most this much of one file (a data file can be tens of megabytes; the zip has it whole).
FILE_SHOWN_CHARS = 1_000_000


def _editor_mode(path: str) -> str:
    for ext, mode in EDITOR_MODES.items():
        if path.endswith(ext):
            return mode
    return "text/plain"


def _hx_redirect(request, url):
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return redirect(url)


@team_view("read")
def environment_list(request):
    q = request.GET.get("q", "").strip()
    envs = selectors.environment_cards(team=request.team, q=q)
    template = "environments/list.html#env-rows" if request.htmx else "environments/list.html"
    return render(request, template, {"environments": envs, "q": q, "upload_form": UploadForm()})


@team_view("author")
def environment_new(request):
    form = EnvironmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            env = services.environment_create(team=request.team, actor=request.user, **form.cleaned_data)
        except services.InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Created {env.name}. Edit its files, then commit version 1.")
            return redirect("environments:edit", team=request.team.slug, slug=env.slug)
    return render(request, "environments/new.html", {"form": form})


@team_view("read")
def environment_edit(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    draft = env.draft
    paths = sorted(draft.files)
    current = request.GET.get("file") or ("env.py" if "env.py" in draft.files else (paths[0] if paths else ""))
    if current not in draft.files:
        current = paths[0] if paths else ""
    versions = selectors.without_version_content(env.versions.select_related("author")).order_by("-number")[:20]
    return render(
        request,
        "environments/edit.html",
        {
            "env": env, "draft": draft, "paths": paths, "current": current,
            "content": draft.files.get(current, ""), "mode": _editor_mode(current),
            "versions": versions, "can_author": request.membership.can("author"),
            "latest": versions[0] if versions else None,
        },
    )


@require_POST
@team_view("author")
def environment_settings(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    try:
        services.environment_update(
            environment=env, actor=request.user, name=request.POST.get("name"),
            description=request.POST.get("description"),
        )
        messages.success(request, "Saved.")
    except services.InvalidInput as exc:
        messages.error(request, exc.message)
    return redirect("environments:edit", team=request.team.slug, slug=env.slug)


@require_POST
@team_view("author")
def file_save(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    path = request.POST.get("path", "")
    content = request.POST.get("content", "")
    try:
        draft = services.draft_save_file(
            environment=env, actor=request.user, path=path, content=content,
            expected_revision=_int(request.POST.get("revision")),
        )
    except services.StaleDraft as exc:
        return render(request, "environments/_conflict.html", {"env": env, "conflict": exc}, status=409)
    except services.DomainError as exc:  # bad input, the team's storage quota (413)
        return render(request, "environments/_save_status.html", {"error": exc.message}, status=exc.status)
    return render(request, "environments/_save_status.html", {"draft": draft, "saved_path": path})


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise services.InvalidInput("The editor sent no draft revision; reload the page.", field="revision") from None


def _file_op(request, slug, op, **extra):
    env = selectors.environment_get(team=request.team, slug=slug)
    target = request.POST.get("new_path") or request.POST.get("path") or ""
    try:
        draft = op(environment=env, actor=request.user, expected_revision=_int(request.POST.get("revision")), **extra)
    except services.StaleDraft as exc:
        messages.error(request, exc.message)
        target = request.POST.get("path", "")
    except services.DomainError as exc:  # bad input, the team's storage quota
        messages.error(request, exc.message)
        target = request.POST.get("path", "")
    else:
        if op is services.draft_delete_file:
            target = ""
        messages.success(request, f"Draft updated (revision {draft.revision}).")
    url = reverse("environments:edit", kwargs={"team": request.team.slug, "slug": env.slug})
    return _hx_redirect(request, f"{url}?file={target}" if target else url)


@require_POST
@team_view("author")
def file_add(request, slug):
    return _file_op(request, slug, services.draft_add_file, path=request.POST.get("new_path", ""))


@require_POST
@team_view("author")
def file_rename(request, slug):
    return _file_op(
        request, slug, services.draft_rename_file, path=request.POST.get("path", ""),
        new_path=request.POST.get("new_path", ""),
    )


@require_POST
@team_view("author")
def file_delete(request, slug):
    return _file_op(request, slug, services.draft_delete_file, path=request.POST.get("path", ""))


@require_POST
@team_view("author")
def version_commit(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    try:
        version = services.version_commit(
            environment=env, actor=request.user, message=request.POST.get("message", ""),
            expected_revision=_int(request.POST.get("revision")),
        )
    except services.InvalidVersion as exc:
        return render(request, "environments/_commit_result.html", {"problems": exc.problems, "env": env}, status=400)
    except services.StaleDraft:
        return render(
            request, "environments/_commit_result.html",
            {"error": "The draft changed since you opened it (someone saved meanwhile). Reload to see it, then commit.", "env": env},
            status=409,
        )
    except services.DomainError as exc:  # bad input, the team's storage quota
        return render(request, "environments/_commit_result.html", {"error": exc.message, "env": env}, status=exc.status)
    messages.success(request, f"Committed {version.label}: {version.message}")
    return _hx_redirect(request, reverse("environments:version", kwargs={"team": request.team.slug, "slug": env.slug, "number": version.number}))


@team_view("read")
def version_list(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    versions = selectors.without_version_content(env.versions.select_related("author", "parent"), "", "parent").order_by("-number")
    return render(request, "environments/versions.html", {"env": env, "versions": versions})


@team_view("read")
def version_detail(request, slug, number):
    env = selectors.environment_get(team=request.team, slug=slug)
    return version_page(request, env=env, version=selectors.version_get(environment=env, number=number))


def version_page(request, *, env, version, quality_card: str = "", status: int = 200):
    """The version page; `quality_card`: the quality card already rendered (a form of the card refused
    what was typed, shown beside its field), else the page fetches the card when it loads."""
    # The page shows one file and the first tasks: the rest of a large version stays in the database.
    paths = selectors.version_paths(version)
    current = request.GET.get("file") or ("env.py" if "env.py" in paths else paths[0])
    if current not in paths:
        current = paths[0]
    task_count, tasks = selectors.version_tasks_head(version, 50)
    content, length = selectors.version_file(version, current, most_chars=FILE_SHOWN_CHARS)
    return render(
        request,
        "environments/version.html",
        {
            "env": env, "version": version, "paths": paths, "current": current,
            "content": content, "content_length": length, "content_cut": length > FILE_SHOWN_CHARS,
            "mode": _editor_mode(current),
            "others": env.versions.exclude(pk=version.pk).order_by("-number").values_list("number", flat=True),
            "can_author": request.membership.can("author"),
            "tasks": tasks, "task_count": task_count,
            "warnings": package.package_warnings(selectors.version_code_files(version)),
            "agreement": review_selectors.agreement(version=version, viewer=request.user),
            "runs": version.runs.select_related("agent").order_by("-created_at")[:10],
            "annotations": review_selectors.annotations_for(version=version).select_related("rollout").order_by("-created_at")[:20],
            "export_url": reverse("review:export_version", kwargs={"team": request.team.slug, "slug": env.slug, "number": version.number}),
            "deps": dependency_services.version_dependencies(version),
            "quality_card": quality_card,
        },
        status=status,
    )


@team_view("read")
@require_GET
def version_dependencies(request, slug, number):
    """The dependencies panel alone: what the version page polls while its set builds."""
    env = selectors.environment_get(team=request.team, slug=slug)
    version = selectors.version_get(environment=env, number=number)
    deps = dependency_services.version_dependencies(version)
    if deps is None:
        raise Http404("This version declares no dependencies.")
    return render(request, "environments/_dependencies.html", {"env": env, "version": version, "deps": deps})


@team_view("read")
def version_download(request, slug, number):
    env = selectors.environment_get(team=request.team, slug=slug)
    return package_response(selectors.version_get(environment=env, number=number))


@team_view("read")
def version_harbor(request, slug, number):
    """The version as Harbor task folders (?file=zip|tar.gz), or a page saying why it cannot be."""
    env = selectors.environment_get(team=request.team, slug=slug)
    version = selectors.version_get(environment=env, number=number)
    try:
        return harbor_response(version, file=request.GET.get("file", "zip"))
    except services.InvalidInput as exc:
        messages.error(request, exc.message)
        return redirect("environments:version", team=request.team.slug, slug=env.slug, number=version.number)


@require_POST
@team_view("author")
def draft_restore(request, slug, number):
    env = selectors.environment_get(team=request.team, slug=slug)
    version = selectors.version_get(environment=env, number=number)
    services.draft_reset_from_version(version=version, actor=request.user)
    messages.success(request, f"Draft restored from version {number}. The previous draft is still reachable through its versions.")
    return redirect("environments:edit", team=request.team.slug, slug=env.slug)


@team_view("read")
def version_diff(request, slug):
    env = selectors.environment_get(team=request.team, slug=slug)
    numbers = list(env.versions.order_by("-number").values_list("number", flat=True))
    old = request.GET.get("old") or (str(numbers[1]) if len(numbers) > 1 else (str(numbers[0]) if numbers else ""))
    new = request.GET.get("new") or (str(numbers[0]) if len(numbers) > 1 else "draft")
    files, error = [], None
    if old:
        try:
            from .api import _side

            old_label, old_files = _side(env, old, "old")
            new_label, new_files = _side(env, new, "new")
            files = services.diff_files(old_files, new_files, old_label=old_label, new_label=new_label)
        except services.InvalidInput as exc:
            error = exc.message
    else:
        error = "Commit a version first; then you can compare it with the draft."
    template = "environments/diff.html#diff-body" if request.htmx else "environments/diff.html"
    return render(request, template, {"env": env, "numbers": numbers, "old": old, "new": new, "files": files, "error": error})


@team_view("author")
def package_upload(request):
    form = UploadForm(request.POST or None, request.FILES or None)
    problems = []
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            if upload.size > services.package.MAX_ARCHIVE_BYTES:
                raise services.InvalidInput(f"{upload.name} is {upload.size / 1048576:.1f} MB, over the 20 MB limit.", field="file")
            load = harbor_services.harbor_import if form.cleaned_data.get("source") == "harbor" else services.package_import
            version = load(
                team=request.team, actor=request.user, data=upload.read(), filename=upload.name,
                message=form.cleaned_data.get("message", ""),
            )
        except services.InvalidVersion as exc:
            problems = exc.problems
        except services.DomainError as exc:  # bad input, the team's storage quota
            form.add_error("file", exc.message)
        else:
            messages.success(request, f"Imported {version.label}.")
            return redirect("environments:version", team=request.team.slug, slug=version.environment.slug, number=version.number)
    return render(request, "environments/upload.html", {"form": form, "problems": problems}, status=400 if problems or form.errors else 200)
