#!/bin/bash
# Assembles the pruned root file system of the pstrain runtime image; runs in
# the build stage of deploy/docker/Dockerfile (as root, after apt installed
# the runtime packages), never on the build host:
#
#   prune_rootfs.sh OUT
#
# OUT (created) receives only:
#   - /usr/local/bin: ps_coordinator, ps_server, ps_worker (and, in the GPU
#     variant, libpstrain_cuda.so) and /usr/local/cuda/lib64 when present;
#   - every shared library ldd says they load, with the symbolic links on
#     the way (Debian's alternatives for libblas/liblapack too), the dynamic
#     loader, and an ld.so.cache made for OUT (ldconfig -r);
#   - /etc: passwd and group (root, pstrain 10001, nogroup), nsswitch.conf,
#     ld.so.conf*, empty hosts/hostname/resolv.conf (the runtime mounts its
#     own), /etc/pstrain (job file, tls/);
#   - empty /tmp (1777), /proc, /sys, /dev, /var/lib/pstrain/out.
# So no shell, no package manager (apt, dpkg), no perl, no setuid or setgid
# file: the pods exec the binaries directly (deploy/k8s: command:
# [/usr/local/bin/ps_...]) and their probes are gRPC, HTTP and TCP, none an
# exec. Exits 1 naming the file when ldd cannot resolve a library.
set -euo pipefail

out="${1:?usage: prune_rootfs.sh OUT}"
die() { printf 'prune_rootfs: error: %s\n' "$*" >&2; exit 1; }
[[ ! -e "$out" ]] || die "$out exists"

# Debian 12 is merged-/usr: /bin, /lib, /lib64 and /sbin are links into /usr.
mkdir -p "$out/usr/bin" "$out/usr/sbin" "$out/usr/lib" "$out/usr/lib64" "$out/usr/local/bin"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$out/$d"; done

# copy PATH: PATH as it is (a link stays a link), then what it points to,
# step by step, each under its canonical directory.
copy() {
  local p="$1" dir target
  while :; do
    dir="$(realpath -e "$(dirname "$p")")"
    p="$dir/$(basename "$p")"
    [[ -e "$out$p" || -L "$out$p" ]] && return 0
    mkdir -p "$out$dir"
    cp -a "$p" "$out$p"
    [[ -L "$p" ]] || return 0
    target="$(readlink "$p")"
    [[ "$target" == /* ]] || target="$dir/$target"
    p="$target"
  done
}

files=(/usr/local/bin/ps_coordinator /usr/local/bin/ps_server /usr/local/bin/ps_worker)
[[ -f /usr/local/bin/libpstrain_cuda.so ]] && files+=(/usr/local/bin/libpstrain_cuda.so)
if [[ -d /usr/local/cuda/lib64 ]]; then
  mkdir -p "$out/usr/local/cuda"
  cp -a /usr/local/cuda/lib64 "$out/usr/local/cuda/lib64"
  while IFS= read -r f; do files+=("$f"); done < <(find /usr/local/cuda/lib64 -type f -name 'lib*.so*')
fi
for f in "${files[@]}"; do
  [[ -x "$f" || "$f" == *.so* ]] || die "no $f"
  copy "$f"
  # "libX.so.1 => /path (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)",
  # "linux-vdso.so.1 (0x...)", or "libX.so.1 => not found".
  ldd_out="$(ldd "$f")" || die "ldd $f failed"
  if grep -q 'not found' <<<"$ldd_out"; then
    die "ldd cannot resolve every library of $f:"$'\n'"$(grep 'not found' <<<"$ldd_out")"
  fi
  while read -r lib; do copy "$lib"; done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$ldd_out")
done

# /etc: the accounts the image uses, name resolution, the loader's cache.
mkdir -p "$out/etc/pstrain/tls" "$out/etc/ld.so.conf.d"
cat >"$out/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
pstrain:x:10001:10001:pstrain:/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$out/etc/group" <<'EOF'
root:x:0:
pstrain:x:10001:
nogroup:x:65534:
EOF
cp -a /etc/nsswitch.conf /etc/ld.so.conf "$out/etc/"
cp -a /etc/ld.so.conf.d/. "$out/etc/ld.so.conf.d/"
: >"$out/etc/hosts"
: >"$out/etc/hostname"
: >"$out/etc/resolv.conf"
cp -a /etc/pstrain/job.yaml "$out/etc/pstrain/job.yaml"
mkdir -p "$out/var/cache/ldconfig"
ldconfig -r "$out"
rm -rf "$out/var/cache"

# Mount points and the writable places (Kubernetes mounts emptyDirs there).
mkdir -p "$out/proc" "$out/sys" "$out/dev" "$out/tmp" "$out/var/lib/pstrain/out"
chmod 1777 "$out/tmp"
chown 10001:10001 "$out/var/lib/pstrain" "$out/var/lib/pstrain/out"

# What the image must never hold (deploy/test_image.sh checks the image too).
if found="$(find "$out" \( -perm -4000 -o -perm -2000 \) -print -quit)" && [[ -n "$found" ]]; then
  die "setuid/setgid file in the pruned tree: $found"
fi
for f in usr/bin/apt usr/bin/apt-get usr/bin/dpkg usr/bin/perl usr/bin/sh usr/bin/bash; do
  [[ ! -e "$out/$f" ]] || die "$f in the pruned tree"
done
printf 'prune_rootfs: %s: %s in %s files\n' "$out" "$(du -sh "$out" | cut -f1)" "$(find "$out" -type f | wc -l)"
