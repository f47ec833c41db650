#!/usr/bin/env bash
# Validates the Kubernetes manifests offline (see deploy/README.md):
#
#   deploy/validate.sh [BIN_DIR]              check the dev and prod overlays
#   deploy/validate.sh --fixtures BIN_DIR     check that every planted error in
#                                             deploy/validate/fixtures/ is caught
#   deploy/validate.sh --overlay DIR [BIN_DIR]   check your own overlay(s) instead
#
# Checks per overlay: render (kubectl kustomize), schema (kubernetes-models
# validate()), typecheck (tsc excess property checks), wiring (selectors,
# Services and DNS names, ports and probes, job file and replica counts),
# policy (restricted pod security profile, resources, labels), flags (each
# container --flag appears in the binary's --helpfull; served ports do not
# listen on loopback), jobfile
# (ps_coordinator --dry_run accepts the mounted job.yaml); and yamllint on the
# sources. BIN_DIR holds server/ps_server, coordinator/ps_coordinator and
# worker/ps_worker; without it the flags and jobfile checks fail.
#
# Needs kubectl (with kustomize), node >= 18 and npm (node packages are
# installed from deploy/validate/package-lock.json with `npm ci` when
# deploy/validate/node_modules is missing), yamllint. Ends with
# "deploy validation: N passed, M failed"; exit 1 when anything failed.
set -euo pipefail

DEPLOY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { printf 'validate: %s\n' "$*" >&2; }
give_up() {
  say "error: $*"
  echo "deploy validation: 0 passed, 1 failed"
  exit 1
}

mode=()
while [[ "${1:-}" == -* ]]; do
  case "$1" in
    --fixtures) mode+=(--fixtures); shift ;;
    --overlay) [[ $# -ge 2 && -d "$2" ]] || give_up "--overlay needs a kustomization directory"
      mode+=(--dir "$2"); shift 2 ;;
    *) give_up "usage: deploy/validate.sh [--fixtures | --overlay DIR ...] [BIN_DIR]" ;;
  esac
done
bin="${1:-}"
if [[ -z "$bin" ]]; then
  say "no BIN_DIR given: the flags and jobfile checks will fail (pass the directory holding server/ and worker/ binaries)"
elif [[ ! -d "$bin" ]]; then
  say "BIN_DIR $bin is not a directory: the flags and jobfile checks will fail"
fi

for tool in kubectl node npm; do
  command -v "$tool" >/dev/null 2>&1 || give_up "$tool is not installed"
done
kubectl kustomize --help >/dev/null 2>&1 || give_up "this kubectl has no 'kustomize' subcommand"
command -v yamllint >/dev/null 2>&1 || say "yamllint is not installed (apt-get install yamllint): the lint check will fail"

if [[ ! -d "$DEPLOY/validate/node_modules" ]]; then
  say "installing node packages (npm ci in deploy/validate)"
  (cd "$DEPLOY/validate" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
    give_up "npm ci failed in deploy/validate"
fi

exec node "$DEPLOY/validate/validate.mjs" --deploy "$DEPLOY" ${bin:+--bin "$bin"} "${mode[@]}"
