#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# README command 1: set up, build, and run the main job on this machine.
#   scripts/demo.sh [vlm|kd|compile] [extra `maestro run` options...]
# vlm (default): the tiny VLM (ViT + decoder) trains on Fashion-MNIST captions
#   mixed with Debian text, sectioned on this machine's cores under mpirun,
#   and reports caption accuracy on the 10,000 test images (out/tiny_vlm/).
# kd: trains the tiny teacher, then distills it into the student (out/tiny_*).
# compile: compiles every example spec in specs/ and prints its plan.
# Run again to resume an interrupted run; add --fresh to start over.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-vlm}
shift || true

scripts/setup.sh
scripts/build.sh

case "$what" in
  vlm)
    build/bin/maestro run specs/tiny_vlm.toml -o out/tiny_vlm "$@"
    ;;
  kd)
    build/bin/maestro run specs/tiny_teacher.toml -o out/tiny_teacher "$@"
    build/bin/maestro run specs/tiny_kd.toml -o out/tiny_kd "$@"
    ;;
  compile)
    for spec in specs/*.toml; do
      echo "==== $spec"
      build/bin/maestro-compile "$spec" -o "out/$(basename "$spec" .toml)"
    done
    ;;
  *)
    echo "usage: scripts/demo.sh [vlm|kd|compile] [maestro run options...]" >&2
    exit 2
    ;;
esac
