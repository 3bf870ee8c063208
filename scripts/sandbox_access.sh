#!/usr/bin/env bash
# Sandboxes run untrusted code as unprivileged uids with Debian's python3; they need to read the
# runner, the SDK and the venv's site-packages. Make those (and the folders above them) readable by
# other users, whatever umask or parent folder the checkout came with. Changes nothing that is fine.
set -u
cd "$(dirname "$0")/.."
for p in runs/sandbox environments/sdk .venv/lib; do
  [ -e "$p" ] || continue
  find "$p" \( ! -perm -o+r -o \( -type d ! -perm -o+x \) \) -exec chmod o+rX {} + 2>/dev/null
  d="$(cd "$p" && pwd -P)"
  while [ "$d" != "/" ]; do
    d="$(dirname "$d")"
    perms=$(stat -c %A "$d")
    [ "${perms:9:1}" = "x" ] || [ "${perms:9:1}" = "t" ] || chmod o+x "$d" 2>/dev/null || echo "sandbox: cannot make $d traversable" >&2
  done
done
exit 0
