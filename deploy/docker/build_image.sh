#!/usr/bin/env bash
# Builds the pstrain runtime image (deploy/docker/Dockerfile) from a
# debootstrapped Debian 12 with buildah; used by ./psctl image and
# deploy/test_image.sh:
#
#   deploy/docker/build_image.sh [--gpu] --tag TAG --work DIR [--store "OPTS"] BIN_DIR
#
#   1. debootstrap --variant=minbase bookworm from the mirror in
#      /etc/apt/sources.list* (or reuse PSTRAIN_ROOTFS_CACHE=FILE.tar, which
#      it writes when missing) and import it as localhost/debian:bookworm;
#   2. deploy/docker/prepare_context.sh BIN_DIR DIR/context: the CPU image
#      leaves libpstrain_cuda.so out; --gpu ships it with the CUDA libraries
#      it links (found with ldd on this host; an error when BIN_DIR has no
#      libpstrain_cuda.so or its libcudart is not found);
#   3. buildah bud (chroot isolation, host network, no pull) -> TAG.
#
# --store "OPTS": podman/buildah storage options (--root R --runroot R
# --storage-driver D) for a private store; default: the host's store. DIR is
# a work directory that must exist (the caller removes it). As root. Exits 1
# with the reason on failure (the last lines of the failing step's log).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf 'build_image: [%ss] %s\n' "$SECONDS" "$*" >&2; }
fail() { printf 'build_image: FAILED: %s\n' "$*" >&2; exit 1; }

gpu=0 tag="" work="" store=""
while (($#)); do
  case "$1" in
    --gpu) gpu=1; shift ;;
    --tag) [[ $# -ge 2 ]] || fail "--tag needs a value"; tag="$2"; shift 2 ;;
    --work) [[ $# -ge 2 ]] || fail "--work needs a directory"; work="$2"; shift 2 ;;
    --store) [[ $# -ge 2 ]] || fail "--store needs options"; store="$2"; shift 2 ;;
    -*) fail "unknown option '$1'" ;;
    *) break ;;
  esac
done
(($# == 1)) || fail "usage: build_image.sh [--gpu] --tag TAG --work DIR [--store OPTS] BIN_DIR"
BIN="$1"
[[ -n "$tag" ]] || fail "--tag is required"
[[ -d "$work" ]] || fail "--work: no directory '$work'"
# shellcheck disable=SC2206  # storage options: paths without spaces
STORE=($store)
PODMAN=(podman "${STORE[@]}" --cgroup-manager cgroupfs --events-backend file)
BUILDAH=(buildah "${STORE[@]}")

# The first Debian archive (suite bookworm, path .../debian or
# .../debian-security) configured in /etc/apt/sources.list and
# /etc/apt/sources.list.d/ (one-line and deb822 formats).
debian_uri() {  # SUITE PATH_SUFFIX
  local suite="$1" suffix="$2" f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    if [[ "$f" == *.sources ]]; then
      awk -v suite="$suite" -v suffix="$suffix" '
        function flush() {
          if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " "))
            for (i = 1; i <= n; i++) if (u[i] ~ ("/" suffix "/?$")) { print u[i]; exit }
          types = ""; suites = ""; n = 0
        }
        /^[ \t]*$/ { flush(); next }
        /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
        /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
        /^URIs:/ { sub(/^URIs:[ \t]*/, ""); n = split($0, u, /[ \t]+/) }
        END { flush() }' "$f"
    else
      sed -E 's/\[[^]]*\]//' "$f" | awk -v suite="$suite" -v suffix="$suffix" '
        $1 == "deb" && $3 == suite && $2 ~ ("/" suffix "/?$") { print $2; exit }'
    fi
  done | head -n 1
}

# --- 1. Base image: debootstrap -> localhost/debian:bookworm -------------------
ROOTFS="$work/rootfs"
if [[ -n "${PSTRAIN_ROOTFS_CACHE:-}" && -s "$PSTRAIN_ROOTFS_CACHE" ]]; then
  log "base: reusing $PSTRAIN_ROOTFS_CACHE"
  rootfs_tar="$PSTRAIN_ROOTFS_CACHE"
else
  MIRROR="$(debian_uri bookworm debian)"
  [[ -n "$MIRROR" ]] || MIRROR="http://deb.debian.org/debian"
  SECURITY="$(debian_uri bookworm-security debian-security)"
  [[ -n "$SECURITY" ]] || SECURITY="http://deb.debian.org/debian-security"
  log "base: debootstrap --variant=minbase bookworm from $MIRROR (takes a minute or two)"
  if ! debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    fail "debootstrap failed (log above)"
  fi
  # The build stage gets its packages from the same mirrors as this host.
  cat >"$ROOTFS/etc/apt/sources.list" <<EOS
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY bookworm-security main
EOS
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log
  rootfs_tar="$work/rootfs.tar"
  tar --numeric-owner -C "$ROOTFS" -cf "$rootfs_tar" .
  rm -rf --one-file-system "$ROOTFS"
  if [[ -n "${PSTRAIN_ROOTFS_CACHE:-}" ]]; then
    mkdir -p "$(dirname "$PSTRAIN_ROOTFS_CACHE")"
    cp "$rootfs_tar" "$PSTRAIN_ROOTFS_CACHE.tmp.$$" && mv "$PSTRAIN_ROOTFS_CACHE.tmp.$$" "$PSTRAIN_ROOTFS_CACHE" &&
      log "base: saved $PSTRAIN_ROOTFS_CACHE"
  fi
fi
"${PODMAN[@]}" import "$rootfs_tar" localhost/debian:bookworm >"$work/import.log" 2>&1 ||
  { cat "$work/import.log" >&2; fail "podman import of the root file system failed"; }

# --- 2. Build context ----------------------------------------------------------
CTX="$work/context"
build_args=()
if ((gpu)); then
  plugin="$BIN/worker/libpstrain_cuda.so"
  [[ -f "$plugin" ]] || fail "--gpu: no $plugin (build with CUDA: the toolkit under /usr/local/cuda, no --config=nocuda)"
  cudart="$(ldd "$plugin" | awk '$1 ~ /^libcudart\.so/ {print $3}')"
  [[ -n "$cudart" && -f "$cudart" ]] || fail "--gpu: $plugin links libcudart, but ldd does not find it on this host"
  "$ROOT/deploy/docker/prepare_context.sh" "$BIN" "$CTX" --cuda "$(dirname "$cudart")" >&2
  build_args=(--build-arg CUDA_LIBS=cuda/lib64)
else
  "$ROOT/deploy/docker/prepare_context.sh" "$BIN" "$CTX" >&2
fi

# --- 3. Build ------------------------------------------------------------------
log "build: deploy/docker/Dockerfile ($( ((gpu)) && echo gpu || echo cpu)) -> $tag"
# chroot isolation and the host network: no runtime, cgroup or CNI setup
# needed, so the build works inside VMs and CI containers too.
if ! "${BUILDAH[@]}" bud --isolation chroot --network host --pull=never \
  --build-arg BASE_IMAGE=localhost/debian:bookworm "${build_args[@]}" \
  -f "$ROOT/deploy/docker/Dockerfile" -t "$tag" "$CTX" >"$work/build.log" 2>&1; then
  tail -n 30 "$work/build.log" >&2
  fail "buildah bud failed (log above)"
fi
grep '^prune_rootfs:' "$work/build.log" | sed 's/^/build_image:   /' >&2 || true
log "built $tag: $("${PODMAN[@]}" image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1 / 1e6}')"
