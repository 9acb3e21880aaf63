#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# README command 1: set up, build, and run the main job on this machine.
#   scripts/demo.sh [vlm|kd|compile] [extra `maestro run` options...]
# vlm (default): the tiny VLM (ViT + decoder) trains on Fashion-MNIST captions
#   mixed with Debian text, sectioned on this machine's cores under mpirun,
#   and reports caption accuracy on the 10,000 test images (out/tiny_vlm/).
# kd: trains the tiny teacher, then distills it into the student (the
#   planner's plan), trains the same student without the teacher, and
#   distills again with the fused plan recomputing the teacher every epoch;
#   ends on the students' held-out losses and the two plans' measured
#   training times (scripts/kd_demo_summary.py; out/tiny_*).
# compile: compiles every example spec in specs/ and prints its plan (a spec
#   this build's runtime cannot hold is planned for one with CP, recomputation
#   and ZeRO-1, and says so).
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
    build/bin/maestro run specs/tiny_student.toml -o out/tiny_student "$@"
    build/bin/maestro run specs/tiny_kd.toml -o out/tiny_kd_fused_every_epoch \
      --grouping fused --no-spool-reuse "$@"
    python3 scripts/kd_demo_summary.py out/tiny_teacher out/tiny_kd out/tiny_student out/tiny_kd_fused_every_epoch
    ;;
  compile)
    # A realistic spec that needs more than this build's runtime has (it
    # says which section and why) is planned again for a runtime with CP,
    # recomputation and ZeRO-1 (docs/step_model.md, "What it changes").
    for spec in specs/*.toml; do
      echo "==== $spec"
      out="out/$(basename "$spec" .toml)"
      if ! build/bin/maestro-compile "$spec" -o "$out"; then
        echo "---- $spec: planned for a runtime with CP, recomputation and ZeRO-1 instead:"
        build/bin/maestro-compile "$spec" -o "$out" \
          --runtime-support dp,micro_batch,tp_decoder,pp_decoder,cp,recompute,zero1
      fi
    done
    ;;
  *)
    echo "usage: scripts/demo.sh [vlm|kd|compile] [maestro run options...]" >&2
    exit 2
    ;;
esac
