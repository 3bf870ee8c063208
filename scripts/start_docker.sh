#!/usr/bin/env bash
# Make a Docker engine available for the `docker` sandbox backend and its tests.
# Installs Debian's docker.io when dockerd is missing, starts dockerd in the background when no engine
# answers, waits up to ~30 s. Always exits 0: where no engine can start, the docker tests skip with
# the reason (this script prints it too).
set -u

log=/tmp/studio-dockerd.log

if docker info >/dev/null 2>&1; then
  echo "docker: engine already running"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "docker: dockerd missing and not root: cannot install docker.io"
    exit 0
  fi
  echo "docker: installing docker.io"
  apt-get update -qq >/dev/null 2>&1 || true
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/tmp/studio-docker-apt.log 2>&1; then
    echo "docker: apt-get install docker.io failed (see /tmp/studio-docker-apt.log)"
    exit 0
  fi
fi

if [ "$(id -u)" != 0 ]; then
  echo "docker: no engine running and not root: cannot start dockerd"
  exit 0
fi

dockerd_alive() {
  # A killed dockerd can linger as a zombie: only a running one counts.
  local pid state
  for pid in $(pgrep -x dockerd 2>/dev/null); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && return 0
  done
  return 1
}

wait_for_engine() {
  for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
      echo "docker: engine up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
      return 0
    fi
    dockerd_alive || return 1
    sleep 0.5
  done
  return 1
}

start_dockerd() {
  echo "docker: starting dockerd${*:+ $*} (log: $log)"
  # No registry is reachable: nothing is ever pulled; images are built locally (runs/sandbox/docker_image.py).
  nohup dockerd --host=unix:///var/run/docker.sock "$@" >"$log" 2>&1 </dev/null &
}

if ! dockerd_alive; then
  start_dockerd
fi
wait_for_engine && exit 0

# The sandboxes need no bridge (they run with --network none): try again without touching iptables.
if ! dockerd_alive; then
  start_dockerd --iptables=false --ip-masq=false --bridge=none
  wait_for_engine && exit 0
fi

echo "docker: the engine did not come up; last lines of $log:"
tail -n 5 "$log" 2>/dev/null | sed 's/^/  /'
exit 0
