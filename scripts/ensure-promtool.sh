#!/usr/bin/env bash
# deploy/alerts.test.ts runs the alert rules with promtool, which comes with Debian's prometheus
# package. Installs it when missing, as root on Debian (the package's server is not started: the
# tests only need promtool); elsewhere says what to install.
set -euo pipefail
command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1 && exit 0
if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-promtool: installing Debian's prometheus package for promtool" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
else
  echo "ensure-promtool: promtool is not installed; deploy/alerts.test.ts will fail until it is (apt-get install prometheus)" >&2
fi
