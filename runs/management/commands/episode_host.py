"""Run an episode host: holds interactive episodes (play, remote sessions) for any web process."""
import logging

from django.core.management.base import BaseCommand

from runs.episodes.host import EpisodeHost


class Command(BaseCommand):
    help = "Hold interactive episodes (human play, remote sessions) and answer their requests through Redis."

    def add_arguments(self, parser):
        parser.add_argument("--threads", type=int, default=64, help="episodes stepped at once (default 64)")
        parser.add_argument("--start-threads", type=int, default=16, help="episodes started at once (default 16)")
        parser.add_argument("--pool", type=int, default=4, help="python sandboxes kept started ahead (default 4; 0: none)")

    def handle(self, *args, threads, start_threads, pool, **options):
        if threads < 1 or start_threads < 1 or pool < 0:
            self.stderr.write("--threads and --start-threads must be at least 1, --pool at least 0")
            raise SystemExit(2)
        host = EpisodeHost(threads=threads, start_threads=start_threads, pool_size=pool)
        host.install_signal_handlers()
        logging.getLogger(__name__).info("episode host %s starting", host.id)
        self.stdout.write(f"episode host {host.id} serving\n")
        self.stdout.flush()
        host.serve()
