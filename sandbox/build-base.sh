#!/usr/bin/env bash
# Build a minimal Debian base image with python3 and venv from Debian's own packages, for
# machines whose Docker engine cannot pull from an image registry (pip inside `docker build` is
# avoided as well: wheels are downloaded on the host and installed offline).
#
#   sandbox/build-base.sh [IMAGE_NAME]        default rcb-env/debian-python:bookworm
#
# Needs root, mmdebstrap and a reachable Debian mirror; the tarball is cached in
# $RCB_ENV_HOME/cache (default /opt/rcb-env/cache).
set -euo pipefail
name=${1:-rcb-env/debian-python:bookworm}
if docker image inspect "$name" >/dev/null 2>&1; then
  echo "[build-base] $name exists"
  exit 0
fi
cache=${RCB_ENV_HOME:-/opt/rcb-env}/cache
mkdir -p "$cache"
tar="$cache/debian-bookworm-python.tar"
if [ ! -s "$tar" ]; then
  echo "[build-base] mmdebstrap bookworm (about a minute)"
  mmdebstrap --quiet --variant=apt --include=python3,python3-venv --format=tar bookworm "$tar.partial"
  mv "$tar.partial" "$tar"
fi
docker import --change 'CMD ["/bin/bash"]' "$tar" "$name" >/dev/null
echo "[build-base] imported $name"
