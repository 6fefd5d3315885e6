#!/usr/bin/env bash
# The /docs browser test drives Debian's chromium through playwright-core (which downloads no
# browser of its own here). Installs it when missing, as root on Debian; elsewhere says what to do.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: installing Debian's chromium for the browser test" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
else
  echo "ensure-chromium: chromium is not installed; the /docs browser test will fail until it is (apt-get install chromium)" >&2
fi
