#!/usr/bin/env bash
# Builds the pstrain image from scratch and runs a 1-server, 1-worker job in
# it, fully offline except for the Debian mirror:
#
#   deploy/test_image.sh [--gpu] [BIN_DIR]   (as root; BIN_DIR defaults to .bazel/bin)
#
#   1. debootstrap a minimal Debian 12 root file system from the mirror in
#      /etc/apt/sources.list* and import it as localhost/debian:bookworm;
#   2. build deploy/docker/Dockerfile on it with buildah (both steps:
#      deploy/docker/build_image.sh): the CPU image, even when the build made
#      libpstrain_cuda.so (CI has no GPU); with --gpu the GPU variant (CUDA
#      runtime libraries and libpstrain_cuda.so added; the job still
#      computes on the CPU);
#   3. check the image: it holds no package manager (apt, dpkg), no perl, no
#      shell, no setuid or setgid file; it runs as uid 10001; the dynamic
#      loader finds every library of the binaries (and of the CUDA libraries);
#      prints its size;
#   4. run coordinator, server and worker as three containers sharing one
#      loopback (like a pod), locked down as in Kubernetes (read-only root,
#      no capabilities, no new privileges), and require every one to exit 0
#      and summary.json to report success.
#
# Everything lives in a private container store under a temporary directory
# that is removed at the end (PSTRAIN_KEEP=1 keeps it). PSTRAIN_ROOTFS_CACHE=
# FILE.tar reuses (or saves) the debootstrapped root file system.
# PSTRAIN_IMAGE_SAVE=FILE.tar saves the tested image there (podman save), for
# deploy/podrun.sh.
#
# Prints "SKIPPED: <reason>" and exits 0 when not root or when buildah,
# podman or debootstrap is missing (the caller decides); exits 1 on failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf 'test_image: [%ss] %s\n' "$SECONDS" "$*" >&2; }
fail() { printf 'test_image: FAILED: %s\n' "$*" >&2; exit 1; }
skip() { printf 'SKIPPED: %s\n' "$*"; exit 0; }

GPU=""
if [[ "${1:-}" == --gpu ]]; then
  GPU=1
  shift
fi
[[ "${1:-}" != -* ]] || fail "unknown option '$1' (usage: deploy/test_image.sh [--gpu] [BIN_DIR])"
BIN="${1:-$ROOT/.bazel/bin}"
VARIANT=cpu
[[ -z "$GPU" ]] || VARIANT=gpu

# --- Preconditions ----------------------------------------------------------
[[ $(id -u) -eq 0 ]] || skip "not root (debootstrap and buildah need root; run as root)"
missing=()
for tool in buildah podman debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
((${#missing[@]} == 0)) ||
  skip "missing ${missing[*]} (apt-get install -y buildah podman debootstrap runc)"
for b in coordinator/ps_coordinator server/ps_server worker/ps_worker; do
  [[ -x "$BIN/$b" ]] || fail "no executable $BIN/$b: build first (./psctl build) or pass BIN_DIR"
done

# --- Work directory and private container store ------------------------------
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/pstrain-image.XXXXXX")"
TAG="localhost/pstrain:test"
[[ -z "$GPU" ]] || TAG="localhost/pstrain-gpu:test"
PFX="pstrain-test-$$"
# overlay when the kernel mounts it here (every container then shares the
# image's layers); vfs otherwise, which copies the whole image (about 1 GB with
# the CUDA libraries) for each of the dozen containers below: minutes.
DRIVER=vfs
if grep -qw overlay /proc/filesystems; then
  mkdir -p "$WORK/ovl/lower" "$WORK/ovl/upper" "$WORK/ovl/work" "$WORK/ovl/merged"
  if mount -t overlay overlay -o "lowerdir=$WORK/ovl/lower,upperdir=$WORK/ovl/upper,workdir=$WORK/ovl/work" \
    "$WORK/ovl/merged" 2>/dev/null; then
    umount "$WORK/ovl/merged"
    DRIVER=overlay
  fi
  rm -rf "$WORK/ovl"
fi
STORE=(--root "$WORK/storage" --runroot "$WORK/run" --storage-driver "$DRIVER")
PODMAN=(podman "${STORE[@]}" --cgroup-manager cgroupfs --events-backend file)
RUN_OPTS=()  # runtime options that work on this host (probed below)

cleanup() {
  local rc=$?
  "${PODMAN[@]}" rm -f "$PFX-worker" "$PFX-server" "$PFX-coordinator" "$PFX-fs" >/dev/null 2>&1 || true
  if [[ "${PSTRAIN_KEEP:-0}" == 1 ]]; then
    log "kept $WORK (podman ${STORE[*]} images)"
  else
    # vfs layers are plain directories; unmount anything left under WORK first.
    awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "FAILED: unexpected error at line $LINENO (exit $?)"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

log "work directory $WORK (storage driver $DRIVER); variant $VARIANT"

# --- 1, 2. Base image and build (deploy/docker/build_image.sh) --------------------
CTX="$WORK/context"
"$ROOT/deploy/docker/build_image.sh" ${GPU:+--gpu} --tag "$TAG" --work "$WORK" --store "${STORE[*]}" "$BIN" ||
  fail "building the image failed (deploy/docker/build_image.sh, above)"
"${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | sed 's/^/test_image:   /' >&2

# --- 3. Check the image -----------------------------------------------------------
# Find run options this host accepts: some sandboxes refuse podman's default
# rlimits (no CAP_SYS_RESOURCE) or crun's cgroup setup.
hard_nofile="$(ulimit -Hn)"
[[ "$hard_nofile" == unlimited || "$hard_nofile" -gt 65536 ]] && hard_nofile=65536
candidates=("" "--ulimit nofile=$hard_nofile:$hard_nofile --ulimit nproc=16384:16384")
runtimes=("")
command -v runc >/dev/null 2>&1 && runtimes+=("--runtime=runc")
command -v crun >/dev/null 2>&1 && runtimes+=("--runtime=crun")
found=0
for rt in "${runtimes[@]}"; do
  for lim in "${candidates[@]}"; do
    # shellcheck disable=SC2206
    opts=($rt $lim)
    if "${PODMAN[@]}" run --rm --network none "${opts[@]}" "$TAG" /lib64/ld-linux-x86-64.so.2 --version >"$WORK/probe.log" 2>&1; then
      RUN_OPTS=("${opts[@]}")
      found=1
      break 2
    fi
  done
done
((found)) || { cat "$WORK/probe.log" >&2; fail "podman cannot run a container on this host (last error above; apt-get install runc may help)"; }
log "run: podman run options: ${RUN_OPTS[*]:-(defaults)}"

run_in_image() {  # IMAGE COMMAND...
  local image="$1"
  shift
  "${PODMAN[@]}" run --rm --network none "${RUN_OPTS[@]}" "$image" "$@"
}
user="$("${PODMAN[@]}" image inspect -f '{{.Config.User}}' "$TAG")"
[[ "$user" == 10001:10001 ]] || fail "the image runs as '$user', want 10001:10001"

# What the image holds: its file system as podman exports it.
"${PODMAN[@]}" create --name "$PFX-fs" "$TAG" /none >/dev/null
"${PODMAN[@]}" export "$PFX-fs" | tar -tvf - >"$WORK/files.txt"
"${PODMAN[@]}" rm -f "$PFX-fs" >/dev/null
# "MODE OWNER SIZE DATE TIME NAME[ -> TARGET]"; NAME without a leading ./ or /.
awk '{ n = $6; sub(/^\.?\//, "", n); print n }' "$WORK/files.txt" >"$WORK/names.txt"
banned="$(grep -E '^(usr/)?(s?bin)/(apt|apt-get|apt-config|dpkg|dpkg-[a-z-]+|perl|perl5[.0-9]*|sh|bash|dash)$|^var/lib/dpkg(/|$)|^(usr/)?lib/apt(/|$)|^usr/(share|lib/x86_64-linux-gnu)/perl5?(/|$)' \
  "$WORK/names.txt" | head -n 20 || true)"
[[ -z "$banned" ]] || fail "the image holds a package manager, perl or a shell:"$'\n'"$banned"
setid="$(awk 'substr($1, 4, 1) ~ /[sS]/ || substr($1, 7, 1) ~ /[sS]/' "$WORK/files.txt" | head -n 20)"
[[ -z "$setid" ]] || fail "the image holds setuid/setgid files:"$'\n'"$setid"
size="$("${PODMAN[@]}" image inspect -f '{{.Size}}' "$TAG")"
log "image: $TAG ($VARIANT) is $(awk -v s="$size" 'BEGIN {printf "%.1f MB", s / 1e6}'), $(grep -c '^-' "$WORK/files.txt") files; no apt, dpkg, perl, shell or setuid/setgid file"

# The dynamic loader of the image lists what each file loads (ldd is a shell
# script, and the image has no shell).
check_libs() {  # IMAGE FILES...
  local image="$1" f listing missing_libs=""
  shift
  for f in "$@"; do
    listing="$(run_in_image "$image" /lib64/ld-linux-x86-64.so.2 --list "$f" 2>&1)" ||
      missing_libs+="$f: $(tr '\n' ' ' <<<"$listing")"$'\n'
    missing_libs+="$(sed -n "s|^|$f: |; /not found/p" <<<"$listing")"
  done
  [[ -z "$missing_libs" ]] || fail "libraries missing in $image:"$'\n'"$missing_libs"
}
libs=()
[[ "$VARIANT" == gpu ]] && mapfile -t libs < <(cd "$CTX/cuda/lib64" && find . -maxdepth 1 -type f -name 'lib*.so*' | sed 's|^\./|/usr/local/cuda/lib64/|' && echo /usr/local/bin/libpstrain_cuda.so)
check_libs "$TAG" /usr/local/bin/ps_coordinator /usr/local/bin/ps_server /usr/local/bin/ps_worker "${libs[@]}"
log "image: runs as uid 10001; the loader finds every library of the three binaries${libs[*]:+ and the CUDA libraries}"

# --- 4. Run a 1-server, 1-worker job ----------------------------------------------
# Flags of the Kubernetes contract are passed when the binary has them (the
# k8s manifests are checked strictly by deploy/validate.sh); a missing one is
# reported here and left out.
declare -A FLAGS
for b in ps_coordinator ps_server ps_worker; do
  # --helpfull exits 1 (Abseil); only its output matters.
  FLAGS[$b]=" $({ run_in_image "$TAG" "/usr/local/bin/$b" --helpfull 2>&1 || true; } |
    sed -n 's/^ *--\([A-Za-z0-9_]*\) .*/\1/p' | tr '\n' ' ')"
  [[ "${FLAGS[$b]}" == *" config "* || "${FLAGS[$b]}" == *" coordinator "* ]] ||
    fail "$b --helpfull in the image lists no flags"
done
has() { [[ "${FLAGS[$1]}" == *" $2 "* ]]; }
optional() {  # BINARY FLAG [VALUE]: prints --FLAG[=VALUE] when BINARY has it
  if has "$1" "$2"; then
    printf -- '--%s%s\n' "$2" "${3:+=$3}"
  else
    log "note: $1 has no --$2 yet (deploy contract); left out"
  fi
}

JOB="$WORK/job.yaml"
cat >"$JOB" <<'EOF'
job:
  name: image-test
  workers: 1
  servers: 1
training:
  mode: sync
  optimizer: sgd
  base_lr: 0.1
  local_batch: 16
  steps: 5
model:
  type: mlp
  input_dim: 8
  hidden: [16]
  num_classes: 3
data:
  source: synthetic
  num_features: 8
  num_classes: 3
  test_examples: 64
network:
  startup_timeout_s: 60
EOF
OUT="$WORK/out"
mkdir -p "$OUT"
chown 10001:10001 "$OUT"
chmod 0644 "$JOB"
# The job token, mounted like the Kubernetes Secret (every process needs it).
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$WORK/token"
chmod 0644 "$WORK/token"
# Like the pods: read-only root, writable /tmp, no capabilities, no new
# privileges, the job file mounted read-only at /etc/pstrain/job.yaml.
# shellcheck disable=SC2054  # commas inside option values
LOCKED=(--read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL --security-opt no-new-privileges
  --user 10001:10001 -v "$JOB:/etc/pstrain/job.yaml:ro" -v "$WORK/token:/etc/pstrain/token:ro")

mapfile -t coord_flags < <(optional ps_coordinator metrics_port 9090; optional ps_coordinator keep_serving_after_job)
mapfile -t server_flags < <(optional ps_server config /etc/pstrain/job.yaml; optional ps_server metrics_port 9091)
# No GPU here: the worker computes on the CPU even in the GPU variant.
mapfile -t worker_flags < <(optional ps_worker config /etc/pstrain/job.yaml; optional ps_worker metrics_port 9092;
  optional ps_worker rank_from_env JOB_COMPLETION_INDEX; optional ps_worker device cpu)

log "job: coordinator, 1 server, 1 worker sharing one loopback"
# The coordinator's container owns the network namespace (loopback only); the
# others join it, as containers of one pod do.
"${PODMAN[@]}" run -d --name "$PFX-coordinator" --network none "${RUN_OPTS[@]}" "${LOCKED[@]}" \
  -v "$OUT:/var/lib/pstrain/out" "$TAG" /usr/local/bin/ps_coordinator \
  --config=/etc/pstrain/job.yaml --bind=127.0.0.1 --port=50051 --out=/var/lib/pstrain/out \
  --quiet --token_file=/etc/pstrain/token "${coord_flags[@]}" >/dev/null
"${PODMAN[@]}" run -d --name "$PFX-server" --network "container:$PFX-coordinator" "${RUN_OPTS[@]}" \
  "${LOCKED[@]}" "$TAG" /usr/local/bin/ps_server --coordinator=127.0.0.1:50051 --bind=127.0.0.1 \
  --port=50061 --advertise_host=127.0.0.1 --token_file=/etc/pstrain/token "${server_flags[@]}" >/dev/null
worker_rc=0
timeout 300 "${PODMAN[@]}" run --name "$PFX-worker" --network "container:$PFX-coordinator" \
  "${RUN_OPTS[@]}" "${LOCKED[@]}" -e JOB_COMPLETION_INDEX=0 "$TAG" /usr/local/bin/ps_worker \
  --coordinator=127.0.0.1:50051 --token_file=/etc/pstrain/token "${worker_flags[@]}" \
  >"$WORK/worker.log" 2>&1 || worker_rc=$?

wait_exit() {  # CONTAINER SECONDS: prints the exit code, or "running"
  local i state
  for ((i = 0; ; i++)); do
    state="$("${PODMAN[@]}" inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$1")"
    [[ "$state" == exited* ]] && { echo "${state#exited }"; return; }
    ((i < $2 * 2)) || break
    sleep 0.5
  done
  echo running
}
server_rc="$(wait_exit "$PFX-server" 60)"
metrics_ok=""
if has ps_coordinator metrics_port && [[ "$(wait_exit "$PFX-coordinator" 0)" == running ]]; then
  # /metrics from this host's bash in the pod's network namespace (over
  # /dev/tcp): the image has no shell and no curl.
  coord_pid="$("${PODMAN[@]}" inspect -f '{{.State.Pid}}' "$PFX-coordinator")"
  if nsenter -t "$coord_pid" -n bash -c \
    'exec 3<>/dev/tcp/127.0.0.1/9090 && printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' \
    >"$WORK/metrics.txt" 2>&1 && head -n 1 "$WORK/metrics.txt" | grep -q ' 200'; then
    metrics_ok="yes"
  else
    metrics_ok="no"
  fi
fi
if has ps_coordinator keep_serving_after_job; then
  "${PODMAN[@]}" stop -t 10 "$PFX-coordinator" >/dev/null 2>&1 || true
fi
coord_rc="$(wait_exit "$PFX-coordinator" 30)"

show_logs() {
  local c
  for c in coordinator server; do
    printf -- '--- %s log (last 15 lines)\n' "$c" >&2
    "${PODMAN[@]}" logs --tail 15 "$PFX-$c" >&2 2>&1 || true
  done
  printf -- '--- worker log (last 15 lines)\n' >&2
  tail -n 15 "$WORK/worker.log" >&2
}
problems=()
[[ "$worker_rc" == 0 ]] || problems+=("worker exited $worker_rc")
[[ "$server_rc" == 0 ]] || problems+=("server exit: $server_rc")
# With --keep_serving_after_job the coordinator is stopped by SIGTERM above.
[[ "$coord_rc" == 0 ]] || problems+=("coordinator exit: $coord_rc")
[[ "$metrics_ok" != no ]] || problems+=("coordinator /metrics did not answer 200")
if [[ ! -s "$OUT/summary.json" ]]; then
  problems+=("no summary.json")
elif ! grep -Eq '"failed": *false' "$OUT/summary.json"; then
  problems+=("summary.json reports a failure")
fi
if ((${#problems[@]})); then
  show_logs
  fail "$(IFS=';'; echo "${problems[*]}")"
fi
log "summary.json:"
sed 's/^/  /' "$OUT/summary.json" >&2
if [[ -n "${PSTRAIN_IMAGE_SAVE:-}" ]]; then
  "${PODMAN[@]}" save -o "$PSTRAIN_IMAGE_SAVE" "$TAG" >/dev/null 2>"$WORK/save.log" ||
    { cat "$WORK/save.log" >&2; fail "podman save to $PSTRAIN_IMAGE_SAVE failed"; }
  log "saved $TAG to $PSTRAIN_IMAGE_SAVE"
fi
echo "test_image: OK: image $TAG ($VARIANT, $(awk -v s="$size" 'BEGIN {printf "%.1f MB", s / 1e6}'), pruned) built from debootstrap; 1-server 1-worker job exited 0${metrics_ok:+ (coordinator /metrics: $metrics_ok)}"
