#!/usr/bin/env bash
# Installs the system programs rayscale's tests use, when they are missing (Debian/Ubuntu,
# as root or with passwordless sudo); fails loudly naming what it could not install.
# - procps: the live tests and `rayscale down` signal processes with kill(1) and read ps;
# - curl: the boot scripts fetch instance metadata with it (the cloud end-to-end tests);
# - openssh-server/-client, netcat-openbsd, rsync: the on-premise test and the AWS
#   `rayscale up` test start their own sshd on loopback (Ray's node updater, and `up`
#   copying file mounts to the head, SSH in through `nc` and copy with rsync).
set -euo pipefail
missing=()
{ command -v kill >/dev/null && command -v ps >/dev/null; } || missing+=(procps)
command -v curl >/dev/null || missing+=(curl)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
{ command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; } || missing+=(openssh-client)
command -v nc >/dev/null || missing+=(netcat-openbsd)
command -v rsync >/dev/null || missing+=(rsync)
# The Python side lives in a venv (scripts/setup-python.sh).
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup-system: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "FATAL: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
command -v apt-get >/dev/null || { echo "FATAL: no apt-get; install these yourself: ${missing[*]}" >&2; exit 1; }
"${sudo[@]}" apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >&2 \
  || { echo "FATAL: cannot install ${missing[*]}" >&2; exit 1; }
