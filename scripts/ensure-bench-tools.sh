#!/usr/bin/env bash
# `pnpm bench` sends its REST load with wrk and part of its RPC load with h2load (bench/README.md),
# and bench/src/wrk.test.ts runs wrk with the bench's script. Installs Debian's wrk and
# nghttp2-client (h2load) when missing, as root on Debian; elsewhere says what to install.
# (pgbench, the reference, comes with PostgreSQL's server.)
set -euo pipefail
missing=()
command -v "${WRK:-wrk}" >/dev/null 2>&1 || missing+=(wrk)
command -v h2load >/dev/null 2>&1 || missing+=(nghttp2-client)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-bench-tools: installing Debian's ${missing[*]} for pnpm bench and its tests" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
else
  echo "ensure-bench-tools: ${missing[*]} not installed; pnpm bench's REST (wrk) and h2load cells and bench/src/wrk.test.ts will fail until they are (apt-get install ${missing[*]})" >&2
fi
