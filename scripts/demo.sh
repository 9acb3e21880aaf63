#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# README command 1: set up, build, and run the main job on this machine.
# Until the runtime lands (issue 7) the main job compiles every example spec
# in specs/ and prints its plan and report; outputs go to out/<spec>/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh

shopt -s nullglob
specs=(specs/*.toml)
if ((${#specs[@]} == 0)); then
  echo "demo: no example specs in specs/" >&2
  exit 1
fi
for spec in "${specs[@]}"; do
  name=$(basename "$spec" .toml)
  echo "==== $spec"
  build/bin/maestro-compile "$spec" -o "out/$name"
done
