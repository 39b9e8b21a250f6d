#!/usr/bin/env bash
# Run a command with a Docker engine reachable through DOCKER_HOST.
#
# An engine that already answers (`docker info`) is used as it is. Otherwise, as root with dockerd
# installed (scripts/install.sh installs docker.io), a private engine is started for the duration
# of the command: no bridge, no iptables or forwarding changes (the machine's firewall is not
# ours), images kept in $RCB_DOCKER_DATA (default /var/lib/rcb-env/docker) so they are built
# once, and socket, pidfile and state in a temporary folder. It is stopped by its pid afterwards.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exec "$@"
fi
if [ "$(id -u)" != 0 ] || ! command -v dockerd >/dev/null 2>&1; then
  echo "[with-dockerd] no Docker engine and none can be started here; docker tests will skip" >&2
  exec "$@"
fi

data=${RCB_DOCKER_DATA:-/var/lib/rcb-env/docker}
run=$(mktemp -d /tmp/rcb-dockerd.XXXXXX)
mkdir -p "$data"
dockerd --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
  --data-root "$data" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
  -H "unix://$run/docker.sock" >"$run/dockerd.log" 2>&1 &
daemon=$!
stop() {
  local pid
  pid=$(cat "$run/dockerd.pid" 2>/dev/null || echo "$daemon")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -rf "$run"
}
trap stop EXIT
export DOCKER_HOST="unix://$run/docker.sock"
for _ in $(seq 150); do
  docker info >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { cat "$run/dockerd.log" >&2; echo "[with-dockerd] dockerd died" >&2; exit 1; }
  sleep 0.2
done
docker info >/dev/null 2>&1 || { tail -20 "$run/dockerd.log" >&2; echo "[with-dockerd] dockerd did not answer" >&2; exit 1; }
echo "[with-dockerd] private engine at $DOCKER_HOST (pid $daemon)" >&2
"$@"
