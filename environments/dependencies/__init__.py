"""Dependency environments: a version's declared Python requirements, built once per distinct set
into a cached, read-only directory that the version's sandboxes import from (docs/dependencies.md).

builder.py makes the directories (uv, no Django), plugins.py checks `gymnasium:` entrypoints inside
them, services.py ties both to versions (commit, build task, run refusal, the sandbox's import path).
"""
