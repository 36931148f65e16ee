#!/usr/bin/env bash
# Makes the two base images the Dockerfile starts from, debian:bookworm (build stage) and
# debian:bookworm-slim (runtime stage), where no container registry answers (docs/docker.md,
# "Building it here"):
#  - an image already present under that name is kept as it is (idempotent);
#  - otherwise `docker pull NAME` is tried (EFT_PULL_TIMEOUT seconds, 60 by default): where a registry
#    answers, the Dockerfile builds on Docker Hub's images, as it does anywhere else;
#  - where it does not, the image is made here the way Docker Hub's Debian images are made
#    (debuerreotype: `debootstrap --variant=minbase`): debootstrap from the Debian mirror apt already
#    uses on this machine (or EFT_DEBIAN_MIRROR), apt pointed at bookworm, bookworm-updates and
#    bookworm-security like Docker Hub's image, apt's caches and lists emptied, then `docker import` under
#    the same name with CMD ["bash"]. The slim image is the same tree with Docker Hub's slim rules
#    (no /usr/share/doc except copyright files, no man/info pages, no locales; dpkg told to keep it so).
# So the same `FROM debian:bookworm` works here and where a registry answers. The images made here are
# labelled org.opencontainers.image.source=eft-make-base (see `docker image inspect`); delete them
# (`docker image rm debian:bookworm debian:bookworm-slim`) to make them again, e.g. for newer packages.
# Needs root (debootstrap), about 40 s and 300 MB of scratch space in ${TMPDIR:-/tmp}.
set -euo pipefail
suite=bookworm
images=("debian:$suite" "debian:$suite-slim")
pull_timeout=${EFT_PULL_TIMEOUT:-60}

need=()
for image in "${images[@]}"; do
  if docker image inspect "$image" >/dev/null 2>&1; then
    echo "make-base: $image is present ($(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.source"}}' "$image" | sed 's/^$/pulled/'))"
  elif timeout "$pull_timeout" docker pull -q "$image" >/dev/null 2>"${TMPDIR:-/tmp}/eft-pull.err"; then
    echo "make-base: pulled $image from the registry"
  else
    echo "make-base: cannot pull $image: $(tail -1 "${TMPDIR:-/tmp}/eft-pull.err" | cut -c1-160)"
    need+=("$image")
  fi
done
rm -f "${TMPDIR:-/tmp}/eft-pull.err"
((${#need[@]})) || exit 0

# The mirror apt uses here: EFT_DEBIAN_MIRROR, else the first URIs of a deb822 source with Suites bookworm
# (Debian 12's /etc/apt/sources.list.d/debian.sources), else the first `deb URI bookworm` line.
mirror=${EFT_DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(awk -v s="$suite" '
    /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
    $1 == "URIs:" { uri = $2 }
    $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == s) ok = 1 }
    END { if (uri != "" && ok) print uri }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
fi
if [[ -z $mirror ]]; then
  mirror=$(awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
security=${EFT_DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}
command -v debootstrap >/dev/null || { echo "make-base: debootstrap is missing (scripts/image/install-engine.sh installs it)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "make-base: debootstrap needs root" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/eft-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
echo "make-base: debootstrap --variant=minbase $suite from $mirror (~40 s)"
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  echo "make-base: debootstrap failed; last lines of its log:" >&2
  tail -20 "$work/debootstrap.log" >&2
  [[ -r $root/debootstrap/debootstrap.log ]] && tail -20 "$root/debootstrap/debootstrap.log" >&2
  exit 1
fi

# apt as in Docker Hub's image: the three suites in deb822 form, no caches kept after installs,
# no translations, compressed indexes.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
echo 'Acquire::GzipIndexes "true";' >"$root/etc/apt/apt.conf.d/docker-gzip-indexes"
echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/var/log/*.log "$root"/var/log/apt/* "$root/debootstrap"
: >"$root/etc/resolv.conf"   # the engine mounts its own
: >"$root/etc/hostname"

import() {   # DIR NAME
  tar --numeric-owner -C "$1" -c . |
    docker import \
      --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL org.opencontainers.image.source=eft-make-base org.opencontainers.image.description=\"debootstrap --variant=minbase $suite from $mirror\"" \
      -m "scripts/image/make-base.sh: debootstrap --variant=minbase $suite $mirror" - "$2" >/dev/null
  echo "make-base: imported $2 ($(docker image inspect -f '{{.Size}}' "$2" | awk '{printf "%.0f MB", $1 / 1e6}'))"
}
if [[ " ${need[*]} " == *" debian:$suite "* ]]; then
  import "$root" "debian:$suite"
fi
if [[ " ${need[*]} " == *" debian:$suite-slim "* ]]; then
  # Docker Hub's slim rules (debuerreotype-slimify): dpkg keeps these paths out of later installs too.
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'CONF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
CONF
  find "$root/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{groff,info,linda,lintian/overrides,man}/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  import "$root" "debian:$suite-slim"
fi
