#!/usr/bin/env bash
# netshape.sh: shaped links for one job on one machine. Every process gets its
# own network namespace, joined by a veth pair to a bridge in a namespace of
# its own; both ends of each pair are limited by a tc token bucket (tbf) to
# G Gbit/s, so each process's link is a real bottleneck in both directions.
# Traffic never leaves the namespaces created here (the bridge has no uplink)
# and the addresses are private to them (10.213.0.0/24).
#
#   netshape.sh check                     exit 0 if usable; else prints why
#   netshape.sh setup ID GBIT NAME...     one namespace per NAME; prints
#                                         "NAME ADDRESS" lines
#   netshape.sh exec ID NAME CMD [ARG...] runs CMD in NAME's namespace (exec:
#                                         CMD keeps this process's id)
#   netshape.sh teardown ID               deletes every namespace of ID
#
# Needs root and iproute2 (ip, tc). Used by `psctl run --shape-gbit G`.
set -euo pipefail
# ip and tc live in /usr/sbin, outside some restricted PATHs (Bazel tests).
PATH="$PATH:/usr/sbin:/sbin"

SUBNET="10.213.0"
FIRST_HOST=10  # NAME k gets 10.213.0.(10 + k)

die() { printf 'netshape: %s\n' "$*" >&2; exit 1; }
ns_of() { printf 'psnet-%s-%s' "$1" "$2"; }
check_id() { [[ "$1" =~ ^[A-Za-z0-9]{1,16}$ ]] || die "bad id '$1' (1-16 letters or digits)"; }
check_name() { [[ "$1" =~ ^[a-z0-9][a-z0-9-]{0,23}$ ]] || die "bad name '$1'"; }

# Why shaping cannot run here (one line), or nothing.
why_unusable() {
  [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces and tc)"; return; }
  local t
  for t in ip tc; do
    command -v "$t" >/dev/null || { echo "needs '$t' (Debian package iproute2)"; return; }
  done
  local probe="psnet-probe$$" err
  if ! err="$(ip netns add "$probe" 2>&1)"; then
    echo "cannot create a network namespace: ${err##*$'\n'}"; return
  fi
  if ! err="$({ ip -n "$probe" link add p0 type veth peer name p1 &&
    tc -n "$probe" qdisc add dev p0 root tbf rate 1gbit burst 64kb latency 50ms; } 2>&1)"; then
    ip netns del "$probe" 2>/dev/null || true
    echo "cannot create a shaped veth link (veth, tc tbf): ${err##*$'\n'}"; return
  fi
  ip netns del "$probe" 2>/dev/null || true
}

cmd_check() {
  local why
  why="$(why_unusable)"
  [[ -z "$why" ]] || { echo "$why"; exit 1; }
}

cmd_teardown() {
  local id="$1" ns
  check_id "$id"
  local cmds=""
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    if [[ "$ns" == "psnet-$id-"* ]]; then cmds+="netns del $ns"$'\n'; fi
  done
  # -force: past a namespace that is already gone, on to the next.
  [[ -z "$cmds" ]] || ip -force -batch - <<<"$cmds" 2>/dev/null || true
}

# The tbf line for GBIT: the bucket holds 1 ms of traffic (at least 64 KiB,
# so one GSO segment always fits) and the queue 50 ms.
tbf_args() {
  awk -v g="$1" 'BEGIN { b = int(g * 1e9 / 8 / 1000); if (b < 65536) b = 65536;
    printf "root tbf rate %sgbit burst %d latency 50ms\n", g, b }'
}

# Every namespace, link, address and queue is made by a few `ip -batch` and
# `tc -batch` calls (two per process plus three), not one process per
# command: at about 0.1 s a process on a busy 2-core machine, that is what a
# set-up costs (13 namespaces: 2.5 s instead of 10.7 s at load 5).
cmd_setup() {
  local id="$1" gbit="$2"
  shift 2
  check_id "$id"
  if ! [[ "$gbit" =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v g="$gbit" 'BEGIN { exit !(g > 0) }'; then
    die "bad rate '$gbit' (Gbit/s, > 0)"
  fi
  (($# >= 1 && $# <= 240)) || die "between 1 and 240 names, got $#"
  local name
  for name in "$@"; do check_name "$name"; done
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces and tc)"
  local t
  for t in ip tc; do command -v "$t" >/dev/null || die "needs '$t' (Debian package iproute2)"; done
  # A failure half-way leaves nothing behind, and says why (the probe).
  trap 'setup_failed "$id"' ERR
  local br tbf root_cmds br_cmds br_tc k=0 ns addr
  br="$(ns_of "$id" br)"
  tbf="$(tbf_args "$gbit")"
  root_cmds="netns add $br"$'\n'
  br_cmds="link set lo up"$'\n'"link add br0 type bridge"$'\n'"link set br0 up"$'\n'
  br_tc=""
  for name in "$@"; do
    ns="$(ns_of "$id" "$name")"
    root_cmds+="netns add $ns"$'\n'
    root_cmds+="link add eth0 netns $ns type veth peer name v$k netns $br"$'\n'
    br_cmds+="link set v$k master br0"$'\n'"link set v$k up"$'\n'
    br_tc+="qdisc add dev v$k $tbf"$'\n'  # to the process
    k=$((k + 1))
  done
  ip -batch - <<<"$root_cmds"
  ip -n "$br" -batch - <<<"$br_cmds"
  tc -n "$br" -batch - <<<"$br_tc"
  k=0
  for name in "$@"; do
    ns="$(ns_of "$id" "$name")"
    addr="$SUBNET.$((FIRST_HOST + k))"
    ip -n "$ns" -batch - <<<"link set lo up"$'\n'"addr add $addr/24 dev eth0"$'\n'"link set eth0 up"
    tc -n "$ns" qdisc add dev eth0 $tbf  # from the process
    k=$((k + 1))
  done
  trap - ERR
  k=0
  for name in "$@"; do
    printf '%s %s.%s\n' "$name" "$SUBNET" "$((FIRST_HOST + k))"
    k=$((k + 1))
  done
}

# ERR trap of cmd_setup: removes what was made, then says why if the machine
# cannot shape at all (else ip's or tc's own message above says it).
setup_failed() {
  trap - ERR
  cmd_teardown "$1"
  local why
  why="$(why_unusable)"
  [[ -z "$why" ]] || die "$why"
  die "could not set up the shaped links"
}

cmd_exec() {
  local id="$1" name="$2"
  shift 2
  check_id "$id"
  check_name "$name"
  (($#)) || die "exec needs a command"
  exec ip netns exec "$(ns_of "$id" "$name")" "$@"
}

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

case "${1:-}" in
  check) cmd_check ;;
  setup) (($# >= 4)) || { usage >&2; exit 2; }; shift; cmd_setup "$@" ;;
  exec) (($# >= 4)) || { usage >&2; exit 2; }; shift; cmd_exec "$@" ;;
  teardown) (($# == 2)) || { usage >&2; exit 2; }; cmd_teardown "$2" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
