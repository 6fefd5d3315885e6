#!/usr/bin/env bash
# `pnpm bench` sends its REST load with wrk (bench/README.md), and bench/src/wrk.test.ts runs wrk
# with the bench's script. Installs Debian's wrk when missing, as root on Debian; elsewhere says
# what to install. (pgbench, the reference, comes with PostgreSQL's server.)
set -euo pipefail
command -v "${WRK:-wrk}" >/dev/null 2>&1 && exit 0
if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-bench-tools: installing Debian's wrk for pnpm bench and its test" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >&2
else
  echo "ensure-bench-tools: wrk is not installed; pnpm bench's REST cells and bench/src/wrk.test.ts will fail until it is (apt-get install wrk)" >&2
fi
