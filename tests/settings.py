"""Settings for the test suite: the studio's own, on a development machine (DEBUG on unless the
environment says otherwise). Workers, episode hosts and servers the tests start inherit DEBUG."""
import os

os.environ.setdefault("DEBUG", "true")

from studio.settings import *  # noqa: E402,F403
