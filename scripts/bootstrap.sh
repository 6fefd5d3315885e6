#!/usr/bin/env bash
# Installs what the project needs on a fresh machine: pnpm 10 (through npm, because corepack
# cannot verify pnpm here) and the workspace's dependencies. Fast when both are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PNPM_VERSION=10.34.9
# Installed and current: done, without starting pnpm (a node program: a second of `npm start` on a
# busy machine just to print its version).
if [[ -f node_modules/.modules.yaml && ! pnpm-lock.yaml -nt node_modules/.modules.yaml ]]; then
  exit 0
fi
if ! command -v pnpm >/dev/null 2>&1 || [[ "$(pnpm --version 2>/dev/null)" != 10.* ]]; then
  echo "bootstrap: installing pnpm ${PNPM_VERSION} with npm" >&2
  npm install --global --no-audit --no-fund "pnpm@${PNPM_VERSION}" >&2
fi
if [[ ! -f node_modules/.modules.yaml || pnpm-lock.yaml -nt node_modules/.modules.yaml ]]; then
  echo "bootstrap: installing dependencies" >&2
  pnpm install --frozen-lockfile >&2
fi
