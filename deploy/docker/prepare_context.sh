#!/usr/bin/env bash
# Prepares the image build context for deploy/docker/Dockerfile.
#
#   deploy/docker/prepare_context.sh BIN_DIR CONTEXT_DIR [--cuda CUDA_LIB_DIR] [--config FILE]
#
# Writes bin/ (the binaries), job.yaml, runtime-packages (the Debian packages
# providing the libraries they load, from ldd and dpkg on this host), cuda/
# and prune_rootfs.sh (the Dockerfile's build stage runs it).
#
# BIN_DIR holds the built binaries (server/ps_server, coordinator/ps_coordinator,
# worker/ps_worker: bazel-bin or .bazel/bin). CONTEXT_DIR is created (it must
# not exist or be empty). ps_worker links no CUDA library: a CUDA build puts
# them behind worker/libpstrain_cuda.so, which ps_worker loads on demand.
# --cuda ships that object in bin/ and copies libcudart, libcublas and
# libcublasLt (and any other library of that directory it links) into
# cuda/lib64 for the GPU variant (--build-arg CUDA_LIBS=cuda/lib64); without
# --cuda the object is left out and the image is the CPU image (workers with
# device auto compute on the CPU, device cuda fails saying the object is
# missing). The default job file is configs/default.yaml.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
die() { printf 'prepare_context: error: %s\n' "$*" >&2; exit 2; }

(($# >= 2)) || die "usage: prepare_context.sh BIN_DIR CONTEXT_DIR [--cuda DIR] [--config FILE]"
bin="$1" ctx="$2"
shift 2
cuda="" config="$ROOT/configs/default.yaml"
while (($#)); do
  case "$1" in
    --cuda) [[ $# -ge 2 ]] || die "--cuda needs a directory"; cuda="$2"; shift 2 ;;
    --config) [[ $# -ge 2 ]] || die "--config needs a file"; config="$2"; shift 2 ;;
    *) die "unknown option '$1'" ;;
  esac
done

binaries=(coordinator/ps_coordinator server/ps_server worker/ps_worker)
for b in "${binaries[@]}"; do
  [[ -x "$bin/$b" ]] || die "no executable $bin/$b (build first: bazel build //server:ps_server //coordinator:ps_coordinator //worker:ps_worker)"
done
[[ -f "$config" ]] || die "no job file $config"
if [[ -e "$ctx" && -n "$(ls -A "$ctx")" ]]; then die "$ctx exists and is not empty"; fi

# CUDA libraries the worker links (libcudart.so.13 => /usr/local/cuda/...):
# none itself; the CUDA backend libpstrain_cuda.so beside it links them.
cuda_re='$1 ~ /^lib(cuda|cublas|cudnn|nccl|nvrtc|cufft|curand|cusparse|cusolver)/ {print $1 " " $3}'
mapfile -t worker_cuda < <(ldd "$bin/worker/ps_worker" | awk "$cuda_re")
if ((${#worker_cuda[@]})); then
  die "$bin/worker/ps_worker links the CUDA runtime itself (${worker_cuda[*]%% *}); a current build puts it in worker/libpstrain_cuda.so"
fi
plugin="$bin/worker/libpstrain_cuda.so"
linked_cuda=()
if [[ -n "$cuda" && -f "$plugin" ]]; then
  mapfile -t linked_cuda < <(ldd "$plugin" | awk "$cuda_re")
elif [[ -f "$plugin" ]]; then
  printf 'prepare_context: note: leaving out %s (no --cuda): the CPU image\n' "$plugin" >&2
  plugin=""
else
  plugin=""
fi

# The Debian packages that provide every other library the binaries load
# (the Dockerfile installs exactly these, and apt their dependencies).
# One dpkg-query for every candidate path of every library (a query per
# path reads dpkg's whole database each time: minutes on a loaded machine).
mapfile -t loaded < <({ for b in "${binaries[@]}"; do ldd "$bin/$b"; done; [[ -z "$plugin" ]] || ldd "$plugin"; } |
  awk '{print $1, ($2 == "=>" ? $3 : $1)}' | sort -u)
wanted=() candidates=()
for entry in "${loaded[@]}"; do
  lib="${entry%% *}" path="${entry#* }"
  case "$lib" in linux-vdso.so.*|ld-linux*) continue ;; esac
  [[ "$path" == /* ]] || die "ldd cannot resolve $lib on this host"
  if printf '%s\n' "${linked_cuda[@]}" | grep -q "^$lib "; then continue; fi
  wanted+=("$entry")
  candidates+=("$path" "$(readlink -f "$path")" "/usr$path" "${path#/usr}")
done
# "pkg[:arch][, pkg2...]: /path" for each path dpkg knows (diversions aside).
declare -A owner=()
if ((${#candidates[@]})); then
  while IFS= read -r line; do
    [[ "$line" == diversion* || "$line" != *": /"* ]] && continue
    pkg="${line%%: /*}" pkg="${pkg%%,*}" pkg="${pkg%%:*}"
    owner["/${line#*: /}"]="$pkg"
  done < <(dpkg-query -S "${candidates[@]}" 2>/dev/null || true)
fi
packages=()
for entry in "${wanted[@]}"; do
  lib="${entry%% *}" path="${entry#* }" pkg=""
  for candidate in "$path" "$(readlink -f "$path")" "/usr$path" "${path#/usr}"; do
    pkg="${owner[$candidate]:-}"
    [[ -z "$pkg" ]] || break
  done
  [[ -n "$pkg" ]] || die "$path ($lib) comes from no Debian package: the image cannot provide it"
  packages+=("$pkg")
done

mkdir -p "$ctx/bin" "$ctx/cuda/none"
for b in "${binaries[@]}"; do
  install -m 0755 "$bin/$b" "$ctx/bin/$(basename "$b")"
done
# Next to ps_worker, where it looks for the CUDA backend.
[[ -z "$plugin" ]] || install -m 0755 "$plugin" "$ctx/bin/libpstrain_cuda.so"
install -m 0644 "$config" "$ctx/job.yaml"
install -m 0755 "$ROOT/deploy/docker/prune_rootfs.sh" "$ctx/prune_rootfs.sh"
printf '%s\n' "${packages[@]}" | sort -u >"$ctx/runtime-packages"

if [[ -n "$cuda" ]]; then
  [[ -d "$cuda" ]] || die "--cuda: no directory $cuda"
  ((${#linked_cuda[@]})) || printf 'prepare_context: note: no libpstrain_cuda.so (a CPU build); the GPU variant will not use the GPU\n' >&2
  mkdir -p "$ctx/cuda/lib64"
  wanted=(libcudart.so libcublas.so libcublasLt.so)
  for entry in "${linked_cuda[@]}"; do
    wanted+=("${entry%%.so*}.so")
  done
  for name in $(printf '%s\n' "${wanted[@]}" | sort -u); do
    # The library and its version links (libX.so.13 -> libX.so.13.0.1); the
    # unversioned development link is left out.
    found=0
    for f in "$cuda/$name".*; do
      [[ -e "$f" ]] || continue
      cp -a "$f" "$ctx/cuda/lib64/"
      found=1
    done
    ((found)) || die "--cuda: no $name.* in $cuda"
  done
fi

printf 'prepare_context: %s ready; runtime packages: %s\n' "$ctx" "$(tr '\n' ' ' <"$ctx/runtime-packages")"
(cd "$ctx" && find . \( -type f -o -type l \) | sort | sed 's/^/  /')
