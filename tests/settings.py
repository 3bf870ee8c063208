"""Settings for the test suite: the studio's own, on a development machine (DEBUG on unless the
environment says otherwise). Workers, episode hosts and servers the tests start inherit DEBUG.

Their Redis names (channel-layer prefix, episode-host prefix, Celery queue) are this test session's
own unless the environment names them: by default the studio derives them from its database's name,
and the processes a test starts use the test database (`test_<name>`), which would part them from
the test process itself; a session of its own also keeps apart two test runs on one Redis."""
import os
import uuid

os.environ.setdefault("DEBUG", "true")
_session = f"test-{uuid.uuid4().hex[:10]}"
# A fixed install secret: seeded episodes (hidden draws) repeat from run to run of the suite, in this
# process and in every worker, host and server it starts. It is the value seed secrets were keyed with
# before the install secret existed, so recorded expectations stay as they were.
os.environ.setdefault("INSTALL_SECRET", "dev-only-insecure-key-change-me-in-production-0123456789")
for _name in ("CHANNEL_LAYER_PREFIX", "EPISODE_HOST_PREFIX", "CELERY_QUEUE"):
    os.environ.setdefault(_name, _session)

from studio.settings import *  # noqa: E402,F403
