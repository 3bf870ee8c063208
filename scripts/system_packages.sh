#!/usr/bin/env bash
# Installs the Debian packages the studio and its tests need when one is missing: Chromium (browser
# environments and browser tests), bubblewrap (sandbox file-system view), libseccomp (the sandboxes'
# system-call filter), make, docker-compose (the test
# that `docker compose config` accepts docker-compose.yml, when Docker's compose plugin is absent). Root only; a non-root
# user is told what to install.
set -euo pipefail
need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/bwrap ] || need_apt+=(bubblewrap)
compgen -G '/usr/lib/*/libseccomp.so.2' >/dev/null || compgen -G '/lib/*/libseccomp.so.2' >/dev/null || need_apt+=(libseccomp2)
command -v make >/dev/null || need_apt+=(make)
command -v docker-compose >/dev/null || { command -v docker >/dev/null && docker compose version >/dev/null 2>&1; } || need_apt+=(docker-compose)
[ ${#need_apt[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need_apt[*]} (run: sudo apt-get install ${need_apt[*]})" >&2
  exit 1
fi
echo "installing ${need_apt[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
