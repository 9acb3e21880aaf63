#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures (once) and builds Maestro incrementally.
#   scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
# Environment: MAESTRO_SANITIZE=1 builds with ASan+UBSan (default dir build-asan);
# MAESTRO_JOBS overrides the parallelism (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

default_dir=build
extra=()
if [[ "${MAESTRO_SANITIZE:-0}" == 1 ]]; then
  default_dir=build-asan
  extra+=(-DMAESTRO_SANITIZE=ON)
fi
dir=${1:-$default_dir}
shift || true
jobs=${MAESTRO_JOBS:-$(nproc)}
# ccache: hash paths relative to the tree so a fresh clone reuses the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

if [[ ! -f "$dir/build.ninja" ]]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" "$@"
elif (($# > 0 || ${#extra[@]} > 0)); then
  cmake "$dir" "${extra[@]}" "$@" >/dev/null
fi
ninja -C "$dir" -j "$jobs"
