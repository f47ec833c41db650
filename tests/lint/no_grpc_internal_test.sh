#!/bin/bash
# No .cc/.h of ours (outside third_party/) uses grpc::internal, gRPC's
# private API that any gRPC release may change: raw calls go through
# grpc::GenericStub (common/sync_generic_call.h, the ring transport) and
# the generated WithRawCallbackMethod_* handlers.
#
# The source tree is found from the runfile of psctl (as e2e_test does);
# the test is tagged "external" so that Bazel never answers it from a cache
# while sources it does not declare have changed.
set -uo pipefail

src="$(dirname "$(readlink -f "$TEST_SRCDIR/pstrain/psctl")")"

# Prints every use under $1 (file:line:text); status 0 when there is none.
uses() {
  local hits
  hits="$(grep -rn --include='*.cc' --include='*.h' \
            --exclude-dir=third_party --exclude-dir=.bazel \
            --exclude-dir='bazel-*' --exclude-dir=.git \
            -e 'grpc::internal' "$1")"
  [[ -z "$hits" ]] && return 0
  printf '%s\n' "$hits"
  return 1
}

# The check finds a planted use (so a pass below means something) and
# leaves third_party/ alone.
plant="$TEST_TMPDIR/plant"
mkdir -p "$plant/worker" "$plant/third_party/x"
echo 'grpc::internal::RpcMethod m;' > "$plant/third_party/x/ok.h"
if ! uses "$plant" >/dev/null; then
  echo "FAIL: the check reports third_party/"; exit 1
fi
echo 'const grpc::internal::RpcMethod* m;' > "$plant/worker/bad.cc"
if uses "$plant" >/dev/null; then
  echo "FAIL: the check misses a planted use"; exit 1
fi

# The tree is the real one, not an empty folder.
for f in server/ps_service.cc worker/ps/ps_client.cc \
         worker/allreduce/grpc_transport.cc; do
  [[ -f "$src/$f" ]] || { echo "FAIL: no $f under $src"; exit 1; }
done

if ! out="$(uses "$src")"; then
  echo "FAIL: grpc::internal (gRPC's private API) is used outside third_party/:"
  echo "$out"
  exit 1
fi
echo "PASS: no grpc::internal in the .cc/.h files under $src"
