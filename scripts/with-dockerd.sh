#!/usr/bin/env bash
# A Docker engine for rcb-env, for one command or for a whole session.
#
#   scripts/with-dockerd.sh CMD [ARG...]   run CMD with an engine reachable through DOCKER_HOST
#   scripts/with-dockerd.sh start          start a private engine that outlives this command
#   scripts/with-dockerd.sh status         say which engine answers
#   scripts/with-dockerd.sh stop           stop the engine `start` started (by its pid)
#
# An engine that already answers (`docker info`) is used as it is. Otherwise, as root with dockerd
# installed (scripts/install.sh installs docker.io), a private engine is started: no bridge, no
# iptables or forwarding changes (the machine's firewall is not ours), images kept in
# $RCB_DOCKER_DATA (default /var/lib/rcb-env/docker) so they are built once.
#
# For one command, socket, pidfile and state live in a temporary folder and the engine is stopped
# by its pid afterwards. `start` keeps them in $RCB_DOCKERD_RUN (default /run/rcb-env-dockerd):
# later commands (this script's, and rcb-env's own Docker client when DOCKER_HOST is not set and
# the system socket is absent) find the engine there, until `stop`.
set -euo pipefail

data=${RCB_DOCKER_DATA:-/var/lib/rcb-env/docker}
session=${RCB_DOCKERD_RUN:-/run/rcb-env-dockerd}

answers() { DOCKER_HOST="unix://$1/docker.sock" docker info >/dev/null 2>&1; }

# One engine per data root: two on the same root break each other (the second's containerd
# never starts). The engine holds "$data.lock" (an flock on fd 9, inherited) while it runs; a
# command that would start a second one waits for the first to end, up to $RCB_DOCKERD_WAIT_S
# (default an hour), saying so. Several commands share one engine with `start`.
take_data_root() {
  mkdir -p "$(dirname "$data")"
  exec 9>"$data.lock"
  flock -n 9 && return 0
  echo "[with-dockerd] another command's private engine uses $data; waiting for it to end" \
    "(run '$0 start' once to share one engine between commands)" >&2
  flock -w "${RCB_DOCKERD_WAIT_S:-3600}" 9 && return 0
  echo "[with-dockerd] $data is still in use after ${RCB_DOCKERD_WAIT_S:-3600} s; giving up" >&2
  return 1
}

# Start dockerd with its state in $1 (the data root's lock taken); the caller waits for it.
launch() {
  local run=$1
  mkdir -p "$data" "$run"
  setsid dockerd --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --data-root "$data" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
    -H "unix://$run/docker.sock" >"$run/dockerd.log" 2>&1 </dev/null &
  echo $! >"$run/launched.pid"
}

wait_for() {
  local run=$1 daemon
  daemon=$(cat "$run/launched.pid")
  for _ in $(seq 150); do
    answers "$run" && return 0
    kill -0 "$daemon" 2>/dev/null || { cat "$run/dockerd.log" >&2; echo "[with-dockerd] dockerd died" >&2; return 1; }
    sleep 0.2
  done
  tail -20 "$run/dockerd.log" >&2
  echo "[with-dockerd] dockerd did not answer" >&2
  return 1
}

halt() {
  local run=$1 pid
  pid=$(cat "$run/dockerd.pid" 2>/dev/null || cat "$run/launched.pid" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$run"
}

can_start() { [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1; }

case "${1:-}" in
  start)
    if [ -n "${DOCKER_HOST:-}" ] && docker info >/dev/null 2>&1; then
      echo "[with-dockerd] an engine already answers at $DOCKER_HOST" >&2
      exit 0
    fi
    if answers "$session"; then
      echo "[with-dockerd] already started: export DOCKER_HOST=unix://$session/docker.sock" >&2
      exit 0
    fi
    can_start || { echo "[with-dockerd] starting an engine needs root and dockerd" >&2; exit 1; }
    take_data_root || exit 1
    halt "$session"
    launch "$session"
    wait_for "$session" || { halt "$session"; exit 1; }
    echo "[with-dockerd] started (pid $(cat "$session/dockerd.pid")); stop it with: $0 stop" >&2
    echo "export DOCKER_HOST=unix://$session/docker.sock"
    exit 0
    ;;
  stop)
    if [ -d "$session" ]; then
      halt "$session"
      echo "[with-dockerd] stopped" >&2
    else
      echo "[with-dockerd] no engine was started with '$0 start'" >&2
    fi
    exit 0
    ;;
  status)
    if docker info >/dev/null 2>&1; then
      echo "engine answers at ${DOCKER_HOST:-the system socket}"
    elif answers "$session"; then
      echo "engine answers at unix://$session/docker.sock (started with '$0 start')"
    else
      echo "no engine answers"
      exit 1
    fi
    exit 0
    ;;
  "")
    echo "usage: $0 CMD [ARG...] | start | status | stop" >&2
    exit 2
    ;;
esac

if docker info >/dev/null 2>&1; then
  exec "$@"
fi
if [ -z "${DOCKER_HOST:-}" ] && answers "$session"; then
  export DOCKER_HOST="unix://$session/docker.sock"
  exec "$@"
fi
if ! can_start; then
  echo "[with-dockerd] no Docker engine and none can be started here; docker tests will skip" >&2
  exec "$@"
fi

take_data_root || exit 1
run=$(mktemp -d /tmp/rcb-dockerd.XXXXXX)
trap 'halt "$run"' EXIT
launch "$run"
wait_for "$run"
export DOCKER_HOST="unix://$run/docker.sock"
echo "[with-dockerd] private engine at $DOCKER_HOST (pid $(cat "$run/dockerd.pid"))" >&2
"$@" 9>&-
