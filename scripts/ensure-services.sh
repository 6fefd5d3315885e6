#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432) and NATS with JetStream (127.0.0.1:4222) are running,
# starting whichever is down with the commands this machine kind documents. On other machines,
# where these commands do not exist, it only reports what is missing.
#
# CI calls it bare: a missing server fails the run (exit 1). `npm start` calls it with --best-effort:
# it still starts what this machine can start, but exits 0 whatever is missing, because
# scripts/start-all.ts then runs an embedded PostgreSQL (PGlite) or a local nats-server itself, or
# stops with a message that says what to do.
set -uo pipefail

best_effort=false
[[ "${1:-}" == "--best-effort" ]] && best_effort=true

# One connection attempt, given up after a second: where packets to a port are dropped rather than
# refused, bash's /dev/tcp would wait for the kernel's connect timeout (about two minutes). Where
# coreutils' timeout is missing (macOS), the attempt is unbounded, as loopback refuses at once there.
if command -v timeout >/dev/null 2>&1; then
  port_open() { timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null; }
else
  port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
fi

# How long a server just started may take to answer: CI waits for it (30 s), while npm start
# (--best-effort) has a fallback of its own and should reach it in a second or two, not a minute,
# when a server is installed but cannot run here.
wait_seconds=30
$best_effort && wait_seconds=3

# pg_ctlcluster itself waits up to 30 s for the server's socket, and pg_ctl up to 60 s more for it
# to accept connections: with --best-effort it is given wait_seconds too, then left to the fallback.
start_postgres() {
  local cluster
  cluster=$(ls /etc/postgresql | head -n1)
  if $best_effort; then
    timeout --kill-after=1 "$wait_seconds" pg_ctlcluster --skip-systemctl-redirect "$cluster" main start
  else
    pg_ctlcluster --skip-systemctl-redirect "$cluster" main start
  fi
}

wait_for() {
  local port=$1 name=$2
  for _ in $(seq 1 $((wait_seconds * 4))); do
    port_open "$port" && return 0
    sleep 0.25
  done
  echo "ensure-services: $name did not come up on 127.0.0.1:$port within ${wait_seconds} s" >&2
  return 1
}

status=0
if $best_effort && [[ "${LEDGER_EMBEDDED_POSTGRES:-}" =~ ^(true|1|yes)$ ]]; then
  : # npm start runs the embedded database whatever answers on 5432: nothing to start.
elif ! port_open 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    echo "ensure-services: starting PostgreSQL" >&2
    if start_postgres; then
      wait_for 5432 PostgreSQL || status=1
    else
      echo "ensure-services: PostgreSQL is installed but did not start within ${wait_seconds} s" >&2
      status=1
    fi
  else
    echo "ensure-services: PostgreSQL is not running on 127.0.0.1:5432; start it or set DATABASE_URL" >&2
    status=1
  fi
fi
if ! port_open 4222; then
  if [ -x /usr/sbin/nats-server ] && command -v start-stop-daemon >/dev/null 2>&1; then
    echo "ensure-services: starting NATS with JetStream" >&2
    mkdir -p /var/lib/nats-server
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
      -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
    wait_for 4222 NATS || status=1
  else
    echo "ensure-services: NATS is not running on 127.0.0.1:4222; start nats-server -js or set NATS_URL" >&2
    status=1
  fi
fi
if $best_effort; then
  [[ $status -ne 0 ]] && echo "ensure-services: npm start will bring an embedded PostgreSQL (PGlite) or a local nats-server for what is missing, or say how to get one" >&2
  exit 0
fi
exit $status
