"""The environment package format: validation problems point at file and line; archives are safe."""

import base64
import io
import pickle
import stat
import struct
import tarfile
import zipfile

import pytest

from environments.package import (
    MAX_ARCHIVE_BYTES,
    InvalidPackage,
    PackageProblem,
    DEFAULT_CONCURRENT_SESSIONS,
    build_zip,
    concurrent_sessions_of,
    content_hash,
    parse_manifest,
    parse_tasks,
    read_archive,
    validate_package,
)

MANIFEST = """\
name = "Demo"
kind = "python"
entrypoint = "env:DemoEnv"
"""
ENV_PY = """\
from studio_sdk import Environment


class DemoEnv(Environment):
    def reset(self, task, seed):
        return 0

    def step(self, action):
        return 0, 0.0, True, False, {}
"""
TASKS = '{"id": "t1", "difficulty": 1}\n{"id": "t2"}\n'


def package(**overrides):
    files = {"environment.toml": MANIFEST, "env.py": ENV_PY, "tasks.jsonl": TASKS}
    for path, text in overrides.items():
        path = path.replace("__", "/").replace("_dot_", ".")
        if text is None:
            files.pop(path, None)
        else:
            files[path] = text
    return files


def where(problems):
    return [(problem.file, problem.line) for problem in problems]


def only_problem(files):
    problems = validate_package(files)
    assert len(problems) == 1, problems
    return problems[0]


# --- validation -------------------------------------------------------------------------------


def test_a_complete_package_has_no_problems():
    assert validate_package(package()) == []


def test_problem_reads_as_file_line_reason():
    assert str(PackageProblem("tasks.jsonl", 3, "duplicate task id 't1'")) == "tasks.jsonl line 3: duplicate task id 't1'"
    assert str(PackageProblem("env.py", None, "missing")) == "env.py: missing"
    error = InvalidPackage("tasks.jsonl", 3, "duplicate task id 't1'")
    assert str(error) == "tasks.jsonl line 3: duplicate task id 't1'"
    assert (error.file, error.line, error.reason) == ("tasks.jsonl", 3, "duplicate task id 't1'")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.problems) == (str(error), error.problems)


def test_missing_manifest_is_reported():
    problem = only_problem(package(environment_dot_toml=None))
    assert (problem.file, problem.line) == ("environment.toml", None)


def test_toml_syntax_error_reports_its_line():
    problem = only_problem(package(environment_dot_toml=MANIFEST + "max_steps = \n"))
    assert (problem.file, problem.line) == ("environment.toml", 4)
    assert "invalid TOML" in problem.reason


def test_missing_required_keys_are_each_reported():
    problems = validate_package(package(environment_dot_toml='max_steps = 5\n'))
    reasons = " ".join(problem.reason for problem in problems)
    assert all(problem.file == "environment.toml" for problem in problems)
    assert "'name'" in reasons and "'kind'" in reasons and "'entrypoint'" in reasons


def test_unknown_kind_points_at_its_line():
    problem = only_problem(package(environment_dot_toml=MANIFEST.replace('"python"', '"shell"')))
    assert (problem.file, problem.line) == ("environment.toml", 2)
    assert "'shell'" in problem.reason


def test_malformed_entrypoint_is_refused():
    problem = only_problem(package(environment_dot_toml=MANIFEST.replace("env:DemoEnv", "env.DemoEnv")))
    assert (problem.file, problem.line) == ("environment.toml", 3)


@pytest.mark.parametrize("value", ["0", "-3", "true", "2.5", '"10"'])
def test_max_steps_must_be_a_positive_integer(value):
    problem = only_problem(package(environment_dot_toml=MANIFEST + f"max_steps = {value}\n"))
    assert (problem.file, problem.line) == ("environment.toml", 4)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("step_timeout_s = 0", "step_timeout_s"),
        ("episode_timeout_s = -1.5", "episode_timeout_s"),
        ("verify_timeout_s = \"30\"", "verify_timeout_s"),
        ("memory_mb = 32", "memory_mb"),
        ("memory_mb = 9000", "memory_mb"),
        ("memory_mb = 512.5", "memory_mb"),
    ],
)
def test_limits_out_of_range_point_at_their_line(line, fragment):
    text = MANIFEST + "\n[limits]\nstep_timeout_s = 5\n" + line + "\n"
    if line.startswith("step_timeout_s"):
        text = MANIFEST + "\n[limits]\n" + line + "\n"
    problem = only_problem(package(environment_dot_toml=text))
    assert problem.file == "environment.toml"
    assert problem.line == len(text.splitlines())
    assert fragment in problem.reason


def test_limits_must_be_a_table():
    problem = only_problem(package(environment_dot_toml=MANIFEST + "limits = 5\n"))
    assert (problem.file, problem.line) == ("environment.toml", 4)


def test_hidden_task_fields_must_be_a_list_of_strings():
    problem = only_problem(package(environment_dot_toml=MANIFEST + 'hidden_task_fields = "answer"\n'))
    assert (problem.file, problem.line) == ("environment.toml", 4)


@pytest.mark.parametrize("declaration", ['stochastic = "t1"\n', 'stochastic = [1]\n', '[quality.stochastic]\nt1 = 1.5\n'])
def test_stochastic_tasks_must_be_ids_or_pass_rate_floors(declaration):
    table = "" if declaration.startswith("[") else "[quality]\n"
    problem = only_problem(package(environment_dot_toml=MANIFEST + table + declaration))
    assert problem.file == "environment.toml" and "quality.stochastic must list task ids" in problem.reason


def test_stochastic_tasks_as_a_list_or_floors_are_accepted():
    for declaration in ('[quality]\nstochastic = ["t1"]\n', '[quality.stochastic]\nt1 = 0.5\n'):
        assert validate_package(package(environment_dot_toml=MANIFEST + declaration)) == []


def test_entrypoint_module_must_exist():
    problem = only_problem(package(env_dot_py=None))
    assert (problem.file, problem.line) == ("environment.toml", 3)
    assert "env.py" in problem.reason


def test_entrypoint_class_must_be_defined_at_top_level():
    source = "def make():\n    class DemoEnv:\n        pass\n"
    problem = only_problem(package(env_dot_py=source))
    assert (problem.file, problem.line) == ("env.py", None)
    assert "DemoEnv" in problem.reason


def test_entrypoint_in_a_dotted_module_is_found():
    files = package(environment_dot_toml=MANIFEST.replace("env:DemoEnv", "game.world:DemoEnv"), env_dot_py=None)
    files["game/world.py"] = ENV_PY
    assert validate_package(files) == []


def test_syntax_error_in_entrypoint_reports_file_and_line_once():
    problem = only_problem(package(env_dot_py=ENV_PY + "\ndef broken(:\n    pass\n"))
    assert (problem.file, problem.line) == ("env.py", 11)
    assert "syntax error" in problem.reason


def test_every_python_file_must_compile():
    problem = only_problem(package(helpers__scoring_dot_py="x = 1\nif x\n"))
    assert (problem.file, problem.line) == ("helpers/scoring.py", 2)


def test_validation_never_runs_package_code(tmp_path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\n" + ENV_PY
    assert validate_package(package(env_dot_py=source)) == []
    assert not marker.exists()


def test_registered_gymnasium_entrypoint_needs_no_env_py():
    manifest = MANIFEST.replace("env:DemoEnv", "gymnasium:FrozenLake-v1")
    assert validate_package(package(environment_dot_toml=manifest, env_dot_py=None)) == []


def test_unknown_gymnasium_id_is_reported():
    manifest = MANIFEST.replace("env:DemoEnv", "gymnasium:NoSuchLake-v9")
    problem = only_problem(package(environment_dot_toml=manifest, env_dot_py=None))
    assert (problem.file, problem.line) == ("environment.toml", 3)
    assert "NoSuchLake-v9" in problem.reason


def test_missing_tasks_file_is_reported():
    problem = only_problem(package(tasks_dot_jsonl=None))
    assert (problem.file, problem.line) == ("tasks.jsonl", None)


def test_empty_tasks_file_is_reported():
    problem = only_problem(package(tasks_dot_jsonl="\n\n"))
    assert (problem.file, problem.line) == ("tasks.jsonl", None)


def test_task_problems_report_their_line_counting_blank_lines():
    tasks = "\n".join(
        [
            '{"id": "t1"}',
            "",
            '{"id": "t2", "difficulty": "hard"}',
            "not json",
            '["t3"]',
            '{"difficulty": 1}',
            '{"id": 7}',
            '{"id": "t1"}',
            '{"id": "t9", "difficulty": true}',
        ]
    )
    problems = validate_package(package(tasks_dot_jsonl=tasks))
    assert where(problems) == [("tasks.jsonl", line) for line in (3, 4, 5, 6, 7, 8, 9)]
    assert str(problems[5]) == "tasks.jsonl line 8: duplicate task id 't1' (first on line 1)"


def test_browser_kind_needs_a_site_folder():
    manifest = MANIFEST.replace('"python"', '"browser"')
    problem = only_problem(package(environment_dot_toml=manifest))
    assert problem.file == "site/"
    assert validate_package(package(environment_dot_toml=manifest, site__index_dot_html="<h1>shop</h1>")) == []


def test_unsafe_paths_in_a_package_are_reported():
    files = package()
    files["../escape.py"] = "x = 1\n"
    files["/abs.txt"] = "x"
    assert {problem.file for problem in validate_package(files)} == {"../escape.py", "/abs.txt"}


def test_all_problems_are_returned_not_just_the_first():
    files = {
        "environment.toml": 'name = "x"\nkind = "python"\nentrypoint = "env:Missing"\n[limits]\nmemory_mb = 1\n',
        "env.py": "class Other:\n    pass\n",
        "util.py": "def (:\n",
        "tasks.jsonl": '{"id": "a"}\n{"id": "a"}\n',
    }
    assert sorted(where(validate_package(files)), key=str) == sorted(
        [("environment.toml", 5), ("env.py", None), ("util.py", 1), ("tasks.jsonl", 2)], key=str
    )


@pytest.mark.parametrize("value", ["0", "4097", "2.5", '"8"', "true"])
def test_concurrent_sessions_out_of_range_points_at_its_line(value):
    text = MANIFEST + f"concurrent_sessions = {value}\n[limits]\nmemory_mb = 128\n"
    problem = only_problem(package(environment_dot_toml=text))
    assert (problem.file, problem.line) == ("environment.toml", 4)
    assert "'concurrent_sessions' must be an integer from 1 to 4096" in problem.reason


def test_concurrent_sessions_under_limits_is_refused_with_where_it_belongs():
    text = MANIFEST + "[limits]\nmemory_mb = 128\nconcurrent_sessions = 64\n"
    problem = only_problem(package(environment_dot_toml=text))
    assert (problem.file, problem.line) == ("environment.toml", 6)
    assert "top level" in problem.reason


def test_concurrent_sessions_is_for_python_environments():
    text = MANIFEST.replace('"python"', '"browser"') + "concurrent_sessions = 8\n"
    problems = validate_package(package(environment_dot_toml=text, site__index_dot_html="<p>hi</p>"))
    assert [(p.file, p.line) for p in problems] == [("environment.toml", 4)]
    assert "browser environment has one sandbox per episode" in problems[0].reason


def test_concurrent_sessions_defaults_to_one_sandbox_per_episode():
    assert parse_manifest(package())["concurrent_sessions"] == DEFAULT_CONCURRENT_SESSIONS == 1
    shared = parse_manifest(package(environment_dot_toml=MANIFEST + "concurrent_sessions = 4096\n"))
    assert shared["concurrent_sessions"] == 4096
    # A manifest stored before the key existed.
    assert concurrent_sessions_of({"name": "old"}) == 1 and concurrent_sessions_of(shared) == 4096


def test_parse_manifest_fills_defaults():
    manifest = parse_manifest(package())
    assert manifest["name"] == "Demo"
    assert manifest["max_steps"] == 200
    assert manifest["limits"] == {"step_timeout_s": 10, "episode_timeout_s": 300, "verify_timeout_s": 30, "memory_mb": 512, "observation_mb": 8}
    assert manifest["success"] == {}
    assert manifest["hidden_task_fields"] == ["answer", "solution"]


def test_parse_manifest_keeps_given_values():
    text = MANIFEST + 'max_steps = 7\nhidden_task_fields = ["secret"]\n[limits]\nmemory_mb = 128\n'
    manifest = parse_manifest(package(environment_dot_toml=text))
    assert manifest["max_steps"] == 7
    assert manifest["hidden_task_fields"] == ["secret"]
    assert manifest["limits"]["memory_mb"] == 128
    assert manifest["limits"]["step_timeout_s"] == 10


def test_parse_manifest_raises_invalid_package():
    with pytest.raises(InvalidPackage) as caught:
        parse_manifest(package(environment_dot_toml=MANIFEST + "max_steps = 0\n"))
    assert (caught.value.file, caught.value.line) == ("environment.toml", 4)


def test_parse_tasks_returns_tasks_in_order_and_raises_on_problems():
    assert [task["id"] for task in parse_tasks(package())] == ["t1", "t2"]
    with pytest.raises(InvalidPackage) as caught:
        parse_tasks(package(tasks_dot_jsonl='{"id": "t1"}\n{"id": "t1"}\n'))
    assert str(caught.value) == "tasks.jsonl line 2: duplicate task id 't1' (first on line 1)"


# --- content hash -----------------------------------------------------------------------------


def test_content_hash_ignores_insertion_order():
    files = package()
    reordered = dict(reversed(list(files.items())))
    assert content_hash(files) == content_hash(reordered)
    assert len(content_hash(files)) == 64


def test_content_hash_changes_with_content_and_paths():
    files = package()
    assert content_hash(files) != content_hash({**files, "env.py": ENV_PY + "\n"})
    renamed = {("game.py" if path == "env.py" else path): text for path, text in files.items()}
    assert content_hash(files) != content_hash(renamed)


def test_content_hash_boundaries_cannot_shift():
    assert content_hash({"ab": "c"}) != content_hash({"a": "bc"})
    assert content_hash({"a": "b", "c": "d"}) != content_hash({"a": "bc", "": "d"})


# --- archives ---------------------------------------------------------------------------------


def make_zip(entries):
    """entries: (name, bytes) or (ZipInfo, bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries:
            archive.writestr(name, content)
    return buffer.getvalue()


def make_tar(entries, mode="w:gz"):
    """entries: (TarInfo, bytes | None)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for info, content in entries:
            if content is not None:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
            else:
                archive.addfile(info)
    return buffer.getvalue()


def tar_file(name, content):
    return tarfile.TarInfo(name), content


def refused(data, filename="package.zip"):
    with pytest.raises(InvalidPackage) as caught:
        read_archive(data, filename)
    return caught.value


def test_zip_round_trip_is_exact_and_deterministic():
    files = package(site__logo_dot_png="base64:" + base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode())
    data = build_zip(files, "demo")
    assert build_zip(dict(reversed(list(files.items()))), "demo") == data
    assert read_archive(data, "demo.zip") == files
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == sorted(f"demo/{path}" for path in files)
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_tar_gz_is_read_and_its_single_folder_stripped():
    data = make_tar([tar_file(f"demo/{path}", text.encode()) for path, text in package().items()])
    assert read_archive(data, "demo.tar.gz") == package()


def test_format_is_detected_by_content_not_name():
    data = make_tar([tar_file(path, text.encode()) for path, text in package().items()])
    assert read_archive(data, "package.zip") == package()
    assert read_archive(build_zip(package(), "x"), "package.tgz") == package()


def test_plain_tar_is_accepted():
    data = make_tar([tar_file(path, text.encode()) for path, text in package().items()], mode="w")
    assert read_archive(data, "package.tar") == package()


def test_nested_folder_is_stripped_only_when_everything_shares_it():
    nested = make_zip([("outer/environment.toml", b"a"), ("outer/site/index.html", b"b")])
    assert read_archive(nested, "p.zip") == {"environment.toml": "a", "site/index.html": "b"}
    flat = make_zip([("environment.toml", b"a"), ("site/index.html", b"b")])
    assert read_archive(flat, "p.zip") == {"environment.toml": "a", "site/index.html": "b"}


def test_directories_and_junk_are_skipped():
    data = make_zip(
        [
            ("pkg/", b""),
            ("pkg/env.py", b"x = 1\n"),
            ("pkg/.DS_Store", b"\x00\x01\xff"),
            ("pkg/__pycache__/env.cpython-311.pyc", b"\xff\xfe"),
            ("__MACOSX/pkg/._env.py", b"\xff\xff"),
        ]
    )
    assert read_archive(data, "pkg.zip") == {"env.py": "x = 1\n"}


@pytest.mark.parametrize("name", ["../evil.py", "pkg/../../evil.py", "pkg/..\\..\\evil.py"])
def test_path_traversal_in_zip_is_refused(name):
    error = refused(make_zip([("pkg/env.py", b"x"), (name, b"x")]))
    assert error.file == name
    assert error.line is None
    assert "traversal" in error.reason


def test_path_traversal_in_tar_is_refused():
    error = refused(make_tar([tar_file("../../etc/cron.d/evil", b"x")]), "p.tar.gz")
    assert error.file == "../../etc/cron.d/evil"


@pytest.mark.parametrize("name", ["/etc/passwd", "C:/Windows/evil.py", "c:evil.py", "\\server\\share\\evil.py"])
def test_absolute_paths_are_refused(name):
    error = refused(make_zip([(name, b"x")]))
    assert error.file == name
    assert "absolute" in error.reason


def test_absolute_path_in_tar_is_refused():
    info = tarfile.TarInfo("/etc/passwd")
    error = refused(make_tar([(info, b"root")]), "p.tgz")
    assert error.file == "/etc/passwd"


def test_symlink_in_zip_is_refused():
    info = zipfile.ZipInfo("pkg/secrets")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    error = refused(make_zip([("pkg/env.py", b"x"), (info, b"/etc/shadow")]))
    assert error.file == "pkg/secrets"
    assert "link" in error.reason


@pytest.mark.parametrize(
    "kind",
    [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE],
)
def test_links_and_special_files_in_tar_are_refused(kind):
    info = tarfile.TarInfo("pkg/odd")
    info.type = kind
    info.linkname = "/etc/shadow"
    error = refused(make_tar([tar_file("pkg/env.py", b"x"), (info, None)]), "p.tar.gz")
    assert error.file == "pkg/odd"


def test_archive_over_the_size_limit_is_refused_before_reading():
    error = refused(b"PK\x03\x04" + b"\x00" * MAX_ARCHIVE_BYTES, "huge.zip")
    assert (error.file, error.line) == ("huge.zip", None)
    assert "20 MB" in error.reason


def test_zip_expanding_past_the_limit_is_refused():
    data = make_zip([("pkg/a.txt", b"\x00" * (MAX_ARCHIVE_BYTES // 2 + 1)), ("pkg/b.txt", b"\x00" * (MAX_ARCHIVE_BYTES // 2))])
    assert len(data) < 1024 * 1024
    error = refused(data)
    assert error.file == "pkg/b.txt"
    assert "uncompressed" in error.reason


def test_tar_gz_expanding_past_the_limit_is_refused():
    data = make_tar([tar_file("pkg/zeros.txt", b"\x00" * (MAX_ARCHIVE_BYTES + 1))])
    error = refused(data, "p.tar.gz")
    assert error.file == "pkg/zeros.txt"


def _lie_about_sizes(data: bytes, claimed: int) -> bytes:
    """Rewrite every declared uncompressed size in a one-member zip to `claimed`."""
    patched = bytearray(data)
    local = patched.find(b"PK\x03\x04")
    struct.pack_into("<I", patched, local + 22, claimed)
    central = patched.find(b"PK\x01\x02")
    struct.pack_into("<I", patched, central + 24, claimed)
    return bytes(patched)


def test_zip_bomb_with_lying_sizes_is_refused():
    honest = make_zip([("pkg/bomb.txt", b"\x00" * (MAX_ARCHIVE_BYTES + 1))])
    lying = _lie_about_sizes(honest, 10)
    with zipfile.ZipFile(io.BytesIO(lying)) as archive:
        assert archive.infolist()[0].file_size == 10
    error = refused(lying)
    assert error.file in ("package.zip", "pkg/bomb.txt")


def test_non_utf8_text_is_refused_with_its_path():
    error = refused(make_zip([("pkg/env.py", b"x = 1\n"), ("pkg/notes.txt", "caf\u00e9".encode("latin-1"))]))
    assert (error.file, error.line) == ("notes.txt", None)
    assert "UTF-8" in error.reason


def test_binary_files_outside_site_images_are_refused():
    error = refused(make_zip([("logo.png", b"\x89PNG\xff"), ("env.py", b"x")]))
    assert error.file == "logo.png"


def test_site_images_are_kept_as_base64():
    image = b"GIF89a\x01\x00\x01\x00\x80\xff\x00"
    entries = [("environment.toml", b""), ("site/img/dot.gif", image), ("site/index.html", b"<img>")]
    files = read_archive(make_zip(entries), "p.zip")
    assert files["site/img/dot.gif"] == "base64:" + base64.b64encode(image).decode()
    assert files["site/index.html"] == "<img>"


def test_not_an_archive_is_refused():
    error = refused(b"just some text, not an archive", "notes.zip")
    assert (error.file, error.line) == ("notes.zip", None)


def test_corrupt_zip_is_refused():
    error = refused(build_zip(package(), "x")[:200])
    assert error.file == "package.zip"


def test_empty_archives_are_refused():
    assert refused(make_zip([])).file == "package.zip"
    assert refused(make_zip([("pkg/", b""), ("pkg/sub/", b"")])).file == "package.zip"


def test_too_many_files_are_refused():
    data = make_zip([(f"pkg/f{index}.txt", b"") for index in range(2001)])
    error = refused(data)
    assert "2000" in error.reason


def test_duplicate_members_are_refused():
    with pytest.warns(UserWarning):
        data = make_zip([("env.py", b"a"), ("env.py", b"b")])
    assert refused(data).file == "env.py"


def test_a_task_split_other_than_train_or_eval_is_reported_on_its_line():
    tasks = '{"id": "t1", "split": "train"}\n{"id": "t2", "split": "eval"}\n{"id": "t3", "split": "validation"}\n'
    problem = only_problem(package(tasks_dot_jsonl=tasks))
    assert (problem.file, problem.line) == ("tasks.jsonl", 3)
    assert "'split' must be \"train\" or \"eval\"" in str(problem) and "validation" in str(problem)
