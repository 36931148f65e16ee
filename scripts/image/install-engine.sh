#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine, for `make image` (docs/docker.md).
#  - installs Debian's docker.io (the engine, 20.10 on Debian 12) and debootstrap (scripts/image/make-base.sh
#    makes the base images with it where no registry answers) when they are missing;
#  - when no engine answers (`docker info`), starts dockerd in the background with its defaults, logging to
#    $EFT_DOCKERD_LOG (/var/log/eft-dockerd.log), and waits until `docker info` answers (60 s at most).
# Idempotent: with both packages installed and an engine answering it changes nothing (and needs no root).
# A machine with its own engine (Docker Desktop, a rootless engine, DOCKER_HOST) is used as it is.
set -euo pipefail
log=${EFT_DOCKERD_LOG:-/var/log/eft-dockerd.log}
wait_s=${EFT_DOCKERD_WAIT:-60}

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "install-engine: need root or sudo for: $*" >&2; exit 1
  fi
}

missing=()
command -v docker >/dev/null || missing+=(docker.io)
if ! docker info >/dev/null 2>&1; then
  # No engine answers: this machine's own dockerd is needed (docker.io) unless one is installed.
  command -v dockerd >/dev/null || [[ " ${missing[*]} " == *" docker.io "* ]] || missing+=(docker.io)
fi
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  echo "install-engine: installing ${missing[*]} (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if docker info >/dev/null 2>&1; then
  echo "install-engine: Docker engine $(docker info --format '{{.ServerVersion}}') answers"
  exit 0
fi

# No engine answers. Start one, unless a dockerd is already running (then only wait for it).
if pgrep -x dockerd >/dev/null; then
  echo "install-engine: dockerd is running but does not answer yet; waiting"
else
  command -v dockerd >/dev/null || { echo "install-engine: no dockerd after installing docker.io" >&2; exit 1; }
  # systemd, where it runs (a normal host): let it manage the engine; otherwise (containers, CI sandboxes
  # without an init) start dockerd ourselves, detached, with the package's defaults.
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null && as_root systemctl start docker 2>/dev/null; then
    echo "install-engine: started docker.service"
  else
    echo "install-engine: starting dockerd in the background (log: $log)"
    as_root mkdir -p "$(dirname "$log")"
    # setsid + nohup: the engine outlives this script and make.
    as_root sh -c "setsid nohup dockerd >>'$log' 2>&1 </dev/null &"
  fi
fi
for ((i = 0; i < wait_s; i++)); do
  if docker info >/dev/null 2>&1; then
    echo "install-engine: Docker engine $(docker info --format '{{.ServerVersion}}') answers" \
         "(storage $(docker info --format '{{.Driver}}'), cgroup driver $(docker info --format '{{.CgroupDriver}}'))"
    exit 0
  fi
  sleep 1
done
echo "install-engine: no Docker engine answers after ${wait_s} s. \`docker info\` says:" >&2
docker info 2>&1 | tail -5 >&2 || true
[[ -r $log ]] && { echo "install-engine: last lines of $log:" >&2; tail -20 "$log" >&2; }
exit 1
