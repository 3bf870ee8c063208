"""The per-version seed secret an environment's sandbox receives (and no agent sandbox, page or API).

The SDK's `seed_rng` mixes it into every seed, so a version's episodes repeat exactly for the same task
and seed, while an agent that knows the public formula, the seed and the task cannot recompute the
environment's hidden draws. It is derived, never stored: HMAC-SHA256 of the install secret
(studio/install_secret.py: INSTALL_SECRET or a random one in the database, never SECRET_KEY, whose
development default is public) and a digest of the version's files (the same files give the same secret
on every host and backend). Another install secret changes every version's episodes.
"""

import hashlib
import hmac


def files_digest(files: dict) -> bytes:
    """sha256 over the package's files (names and contents, length-prefixed, in name order)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        content = files[name]
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        encoded = name.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "big") + encoded + len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.digest()


def studio_seed_key() -> bytes | None:
    """The install secret where Django is configured, else None (no secret)."""
    try:
        from django.conf import settings  # noqa: PLC0415 - the sandbox package works without Django
    except ImportError:
        return None
    if not settings.configured:
        return None
    from studio.install_secret import install_secret  # noqa: PLC0415 - only where Django is configured

    return install_secret()


def version_seed_secret(files: dict, key: bytes | None = None) -> str | None:
    """The seed secret of the version with these files (None when the studio has no key)."""
    key = key if key is not None else studio_seed_key()
    if not key:
        return None
    return hmac.new(key, b"studio-sdk-seed:" + files_digest(files), hashlib.sha256).hexdigest()
