#!/usr/bin/env bash
# Runs the rendered Kubernetes manifests for real, without a cluster: each
# pod of each Job under podman in a private network, converted the way
# Kubernetes runs it (deploy/validate/podrun.mjs says how), and checks the
# outcome (deploy/README.md, "Running the manifests without a cluster"):
#
#   deploy/podrun.sh [BIN_DIR [IMAGE_ARCHIVE]]   (as root)
#
# IMAGE_ARCHIVE: the image as `podman save` wrote it (./psctl test passes the
# one deploy/test_image.sh built); without it, deploy/test_image.sh builds
# and saves one first (PSTRAIN_ROOTFS_CACHE applies). Scenarios: sync and
# async with 2 servers x 4 workers, allreduce with 4 workers (each must
# complete: every Job Complete, every pod exit 0, the coordinator's
# termination message the summary), a run whose worker is killed mid-job
# (every Job Failed, no pod exits 0), a server pod killed under
# on_failure: restart (re-created by its Job; the final checkpoint equals
# sync's byte for byte) and mutual TLS from a generated CA and certificate
# (the Secret pstrain-tls). PSTRAIN_PODRUN_ONLY=sync,failed runs
# some. Prints "SKIPPED: <reason>" and exits 0 when not root or without
# podman, kubectl or node; ends with "podrun: N passed, M failed".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'podrun: [%ss] %s\n' "$SECONDS" "$*" >&2; }
fail() { printf 'podrun: FAILED: %s\n' "$*" >&2; echo "podrun: 0 passed, 1 failed"; exit 1; }
skip() { printf 'SKIPPED: %s\n' "$*"; exit 0; }

BIN="${1:-$ROOT/.bazel/bin}"
ARCHIVE="${2:-}"
[[ $(id -u) -eq 0 ]] || skip "not root (podman networks and containers need root; run as root)"
for tool in podman kubectl node; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
[[ -d "$ROOT/deploy/validate/node_modules" ]] ||
  (cd "$ROOT/deploy/validate" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
  fail "npm ci failed in deploy/validate"

WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/pstrain-podrun.XXXXXX")"
NET="pstrain-podrun-$$"
DRIVER=vfs
grep -qw overlay /proc/filesystems && DRIVER=overlay
STORE=(--root "$WORK/storage" --runroot "$WORK/run" --storage-driver "$DRIVER")
PODMAN=(podman "${STORE[@]}" --cgroup-manager cgroupfs --events-backend file)
cleanup() {
  local rc=$?
  "${PODMAN[@]}" ps -aq 2>/dev/null | xargs -r "${PODMAN[@]}" rm -f >/dev/null 2>&1 || true
  "${PODMAN[@]}" network rm -f "$NET" >/dev/null 2>&1 || true
  if [[ "${PSTRAIN_KEEP:-0}" == 1 ]]; then
    log "kept $WORK"
  else
    awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -z "$ARCHIVE" ]]; then
  ARCHIVE="$WORK/image.tar"
  log "no image archive given: building one with deploy/test_image.sh"
  last="$(PSTRAIN_IMAGE_SAVE="$ARCHIVE" "$ROOT/deploy/test_image.sh" "$BIN" | tail -n 1)" ||
    fail "deploy/test_image.sh failed"
  [[ "$last" != SKIPPED:* ]] || skip "image: ${last#SKIPPED: }"
fi
[[ -s "$ARCHIVE" ]] || fail "image archive $ARCHIVE is missing or empty"
loaded="$("${PODMAN[@]}" load -i "$ARCHIVE" 2>&1)" || fail "podman load $ARCHIVE: $loaded"
IMAGE="$(sed -n 's/^Loaded image[^:]*: *//p' <<<"$loaded" | head -n 1)"
[[ -n "$IMAGE" ]] || fail "podman load printed no image name: $loaded"
log "image $IMAGE (storage driver $DRIVER)"

# Run options this host accepts (as deploy/test_image.sh probes them): runc
# refuses podman's default rlimits above the hard limit.
# The probe runs the image's dynamic loader: the image has no shell, no `true`.
hard_nofile="$(ulimit -Hn)"
[[ "$hard_nofile" == unlimited || "$hard_nofile" -gt 65536 ]] && hard_nofile=65536
RUN_OPTS=""
for rt in "" "--runtime=runc" "--runtime=crun"; do
  for lim in "" "--ulimit nofile=$hard_nofile:$hard_nofile --ulimit nproc=16384:16384"; do
    # shellcheck disable=SC2086
    if "${PODMAN[@]}" run --rm --network none $rt $lim "$IMAGE" /lib64/ld-linux-x86-64.so.2 --version >/dev/null 2>&1; then
      RUN_OPTS="$rt $lim"
      break 2
    fi
  done
done
# shellcheck disable=SC2086  # RUN_OPTS is a list of options
"${PODMAN[@]}" run --rm --network none $RUN_OPTS "$IMAGE" /lib64/ld-linux-x86-64.so.2 --version >/dev/null 2>&1 ||
  fail "podman cannot run a container on this host"

# A private bridge network; a /24 picked from the pid, so that concurrent runs
# do not collide.
octet=$((100 + $$ % 150))
"${PODMAN[@]}" network create --subnet "10.231.$octet.0/24" "$NET" >/dev/null ||
  fail "podman network create $NET failed"
log "network $NET (10.231.$octet.0/24); run options: ${RUN_OPTS:-(defaults)}"

PODMAN_STR="${PODMAN[*]}"
node "$ROOT/deploy/validate/podrun.mjs" --deploy "$ROOT/deploy" --image "$IMAGE" \
  --podman "$PODMAN_STR" --run-opts "$RUN_OPTS" --network "$NET" --net "10.231.$octet" \
  --work "$WORK" ${PSTRAIN_PODRUN_ONLY:+--only "$PSTRAIN_PODRUN_ONLY"}
