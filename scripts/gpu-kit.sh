#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU kit: builds and checks Maestro on a bare CUDA machine that has
# PyTorch 2.x (a CUDA libtorch inside it), CUDA, NCCL, MPI, PMIx 5 and HDF5
# but no package registry (docs/e2e.md § GPU; the facts behind it:
# shared/research/h100-measurements.md section 5).
#   scripts/gpu-kit.sh pack  [KIT]   here: apt-get download the Debian 12
#                                    packages Maestro needs beyond torch and
#                                    beyond what that machine has, with their
#                                    run-time dependencies, into KIT/debs
#                                    (under 60 MB; needs Debian's registry)
#   scripts/gpu-kit.sh build [KIT]   there: dpkg -x them into KIT/prefix,
#                                    configure against the machine's torch
#                                    and build maestro-worker, maestro-bench
#                                    and the gpu-labelled tests
#   scripts/gpu-kit.sh check [KIT]   there: ctest -L gpu, then
#                                    maestro-bench gpu --json
#   scripts/gpu-kit.sh build check   both, in one go (one device call)
#   scripts/gpu-kit.sh build campaign  there: issue #43's device script in
#                                    one call (below); every step runs
#                                    even when one before it failed, within
#                                    MAESTRO_CAMPAIGN_SECONDS of the start
# The campaign, in this order (each step's log in campaign-logs.tar.gz, a
# line per step in campaign.txt):
#   1. maestro profile --kernels --device cuda -o h200.json (the H100's grid:
#      the two files compare row by row; its issue probe gives the measured
#      training_issue_us that compiler/devices/h200.json has fitted);
#   2. maestro-bench gpu --json -- --profile h200.json: the ~1B decoder in
#      the runtime's mixed precision and in pure bf16 (MFU), ViT-B/16 at 32 x
#      224^2 and Qwen2-VL's tower at 4 x 448^2, each against the step model
#      (h100_sxm and h200.json), its phases, the optimizer alone fused and
#      as the loop, peak allocated bytes against the memory model;
#   3. ctest -L gpu (every gpu test; a skip on a machine with a GPU fails);
#   4. maestro run specs/tiny_vlm.toml --steps 200 on the GPU (the plan local
#      discovery makes; its median step against the plan's in campaign.txt,
#      scripts/step_vs_plan.py) and with --device cpu, the curves compared by
#      scripts/compare_losses.py;
#   5. the decoder again at micro-batch 8; maestro doctor; the dry run.
# Files back in $OUT: campaign.txt, h200.json, bench-gpu.json,
# bench-gpu-mb8.json, compare-losses.txt, campaign-logs.tar.gz and the
# build's log (7 of the device tool's 8).
# KIT defaults to .gpu-kit in the repository root (git-ignored: the device
# tool carries it). Environment:
#   MAESTRO_TORCH_DIR      the libtorch to build against (default: the torch
#                          of the first Python below that imports it)
#   MAESTRO_PYTHON3        a Python with torch (tried before python3 on PATH
#                          and /opt/torch/.venv/bin/python3)
#   MAESTRO_GPU_BUILD_DIR  the build folder (default build-gpu)
#   MAESTRO_JOBS           build parallelism (default: the number of cores)
#   MAESTRO_CAMPAIGN_SECONDS  the campaign's budget from its start (default
#                          540: a 600 s device call with the logs packed)
#   MAESTRO_CAMPAIGN_END   or its end, in epoch seconds (the build counted)
#   MAESTRO_WERROR         ON to make warnings errors (default OFF: the
#                          machine's g++ 13 is not the g++ 12 CI checks)
#   OUT                    when set (the device tool sets it), logs and the
#                          benchmark's JSON are copied there
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12 packages the CUDA machine lacks: TOML++ and SQLite's headers
# (the machine has libsqlite3-0 but no -dev), ISA-L (the CRC-32C of spool
# rows and checkpoints), and the demo's images (dataset-fashion-mnist: the
# VLM demo and its tests).
KIT_PACKAGES=(libtomlplusplus-dev libsqlite3-dev libisal-dev dataset-fashion-mnist)
# What any machine with a C++ toolchain has: these and their dependencies
# are left out of the kit (dpkg -x of a libc into a prefix would do harm).
KIT_BASE=(libc6-dev libstdc++6 libgcc-s1)
KIT_LIMIT_BYTES=$((60 * 1000 * 1000))

# What `build` builds: the worker and the tools the checks and the
# campaign run, and every gpu-labelled test.
BUILD_TARGETS=(maestro maestro-compile maestro-worker maestro-bench maestro-kernel-profile maestro_gpu_tests)

die() {
  echo "gpu-kit: $*" >&2
  exit 1
}

usage() {
  awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"
}

# Packages in the dependency closure of the arguments (Depends and
# Pre-Depends only), one per line, virtual ones ("<libc-dev>") left out.
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" 2>/dev/null | awk '/^[^ <]/ {print $1}' | sort -u
}

# Copies a file to $OUT when the device tool gave one.
to_out() {
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp "$1" "$OUT/"
  fi
}

cmd_pack() {
  local kit=$1
  command -v apt-get >/dev/null || die "pack runs on a Debian 12 machine with apt-get (this one has none)"
  local wanted
  wanted=$(closure "${KIT_PACKAGES[@]}")
  if [[ -z "$wanted" ]]; then
    die "apt-cache knows none of ${KIT_PACKAGES[*]}: run 'apt-get update' first"
  fi
  local packages=()
  mapfile -t packages < <(comm -23 <(echo "$wanted") <(closure "${KIT_BASE[@]}"))
  rm -rf "$kit/debs"
  mkdir -p "$kit/debs"
  local log="$kit/pack.log"
  echo "gpu-kit: downloading ${#packages[@]} packages: ${packages[*]}"
  if ! (cd "$kit/debs" && apt-get -o APT::Sandbox::User=root download "${packages[@]}" >"$log" 2>&1); then
    tail -20 "$log" >&2
    die "apt-get download failed (log: $log); 'apt-get update' first if the package lists are old"
  fi
  local bytes
  bytes=$(du -cb "$kit"/debs/*.deb | tail -1 | cut -f1)
  {
    echo "# Maestro GPU kit: Debian 12 packages, unpacked by 'scripts/gpu-kit.sh build'"
    for deb in "$kit"/debs/*.deb; do
      # shellcheck disable=SC2016 # dpkg's ${Field} syntax, not the shell's
      dpkg-deb --showformat='${Package}=${Version}\n' -W "$deb"
    done
  } >"$kit/MANIFEST"
  if ((bytes > KIT_LIMIT_BYTES)); then
    die "the kit is $bytes bytes, over the limit of $KIT_LIMIT_BYTES: the device tool carries 64 MiB in all"
  fi
  echo "gpu-kit: $kit: $(grep -vc '^#' "$kit/MANIFEST") packages, $((bytes / 1000)) kB (MANIFEST lists them)"
}

# The first Python that imports torch.
find_torch_python() {
  local python
  for python in "${MAESTRO_PYTHON3:-}" python3 /opt/torch/.venv/bin/python3; do
    [[ -n "$python" ]] || continue
    if "$python" -c 'import torch' >/dev/null 2>&1; then
      command -v "$python"
      return 0
    fi
  done
  return 1
}

# A tool on PATH, else beside the torch Python (the venv's cmake and ninja).
find_tool() {
  local name=$1 python=$2
  if command -v "$name" >/dev/null; then
    command -v "$name"
  elif [[ -n "$python" && -x "$(dirname "$python")/$name" ]]; then
    echo "$(dirname "$python")/$name"
  else
    return 1
  fi
}

cmd_build() {
  local kit=$1
  [[ -d "$kit/debs" ]] || die "no $kit/debs: run 'scripts/gpu-kit.sh pack' on the development machine first and carry $kit"
  local build
  build=$(realpath -m "${MAESTRO_GPU_BUILD_DIR:-build-gpu}")
  local prefix="$kit/prefix"
  rm -rf "$prefix"
  mkdir -p "$prefix"
  local deb
  for deb in "$kit"/debs/*.deb; do
    dpkg -x "$deb" "$prefix"
  done

  local python="" torch_dir=${MAESTRO_TORCH_DIR:-}
  python=$(find_torch_python || true)
  if [[ -z "$torch_dir" ]]; then
    [[ -n "$python" ]] || die "no Python here imports torch: set MAESTRO_TORCH_DIR to a libtorch folder or MAESTRO_PYTHON3 to a Python with torch"
    torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  fi
  local cmake ninja
  cmake=$(find_tool cmake "$python") || die "no cmake on PATH or beside $python"
  ninja=$(find_tool ninja "$python") || die "no ninja on PATH or beside $python"
  local jobs=${MAESTRO_JOBS:-$(nproc)}
  local log="$build/gpu-kit-build.log"
  mkdir -p "$build"
  echo "gpu-kit: configuring $build against the torch in $torch_dir (prefix $prefix)"
  local start=$SECONDS rc=0
  {
    "$cmake" -S . -B "$build" -G Ninja -DCMAKE_MAKE_PROGRAM="$ninja" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_PREFIX_PATH="$prefix/usr" -DMAESTRO_TORCH_DIR="$torch_dir" -DMAESTRO_WITH_CUDA=ON \
      -DMAESTRO_WERROR="${MAESTRO_WERROR:-OFF}" &&
      "$ninja" -C "$build" -j "$jobs" "${BUILD_TARGETS[@]}"
  } >"$log" 2>&1 || rc=$?
  if ((rc != 0)) && grep -qE 'section_speed\.cc:[0-9]+:[0-9]+: error' "$log"; then
    # The device-memory statistics are the one call into a libtorch API
    # newer than 2.9 (runtime/section_speed.cc): build without them rather
    # than lose the device session.
    echo "gpu-kit: the build failed in section_speed.cc; again with -DMAESTRO_NO_DEVICE_STATS" | tee -a "$log"
    rc=0
    {
      "$cmake" -S . -B "$build" -DCMAKE_CXX_FLAGS=-DMAESTRO_NO_DEVICE_STATS &&
        "$ninja" -C "$build" -j "$jobs" "${BUILD_TARGETS[@]}"
    } >>"$log" 2>&1 || rc=$?
  fi
  to_out "$log"
  if ((rc != 0)); then
    tail -40 "$log" >&2
    die "the build failed after $((SECONDS - start)) s (log: $log)"
  fi
  grep -E '^-- Maestro:' "$log" || true
  echo "gpu-kit: built in $((SECONDS - start)) s, $(grep -c 'warning:' "$log" || true) compiler warnings (log: $log)"
}

cmd_check() {
  local kit=$1
  local build
  build=$(realpath -m "${MAESTRO_GPU_BUILD_DIR:-build-gpu}")
  [[ -x "$build/bin/maestro-bench" ]] || die "no $build/bin/maestro-bench: run 'scripts/gpu-kit.sh build' first"
  export MAESTRO_FASHION_MNIST_DIR="$kit/prefix/usr/share/datasets/fashion-mnist"
  local ctest
  ctest=$(find_tool ctest "$(find_torch_python || true)") || die "no ctest on PATH or beside the torch Python"
  local log="$build/gpu-kit-check.log" json="$build/bench-gpu.json"
  local rc=0
  {
    nvidia-smi -L 2>&1 || echo "nvidia-smi: not found"
    (cd "$build" && "$ctest" -L gpu --output-on-failure --timeout 600)
  } >"$log" 2>&1 || rc=$?
  to_out "$log"
  grep -E 'tests passed|tests failed|Skipped|\*\*\*Failed|Passed|GPU ' "$log" || true
  local bench_rc=0
  "$build/bin/maestro-bench" gpu --json >"$json" 2>"$build/bench-gpu.log" || bench_rc=$?
  to_out "$json"
  to_out "$build/bench-gpu.log"
  echo "gpu-kit: maestro-bench gpu --json (exit $bench_rc): $(cat "$json")"
  ((rc == 0)) || die "ctest -L gpu failed (log: $log)"
  # On a machine with a GPU a skipped gpu test is a failure of the kit.
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && grep -q '(Skipped)' "$log"; then
    die "gpu tests skipped on a machine with a GPU (log: $log): $(grep -c '(Skipped)' "$log") of them"
  fi
  ((bench_rc == 0)) || die "maestro-bench gpu failed (log: $build/bench-gpu.log)"
}

# Issue #43's device script (the header lists the steps): every step runs
# (a failure is written down, not fatal) as long as the budget lasts, and
# the results come back through $OUT. Exits 1 when any step failed.
# shellcheck disable=SC2016 # the bash -c scripts expand their own arguments
cmd_campaign() {
  local kit=$1
  local build
  build=$(realpath -m "${MAESTRO_GPU_BUILD_DIR:-build-gpu}")
  [[ -x "$build/bin/maestro" ]] || die "no $build/bin/maestro: run 'scripts/gpu-kit.sh build' first"
  if [[ -d "$kit/prefix/usr/share/datasets/fashion-mnist" ]]; then
    export MAESTRO_FASHION_MNIST_DIR="$kit/prefix/usr/share/datasets/fashion-mnist"
  fi
  local out=${OUT:-$build/campaign-out}
  local work="$build/campaign"
  rm -rf "$work"
  mkdir -p "$work" "$out"
  local summary="$out/campaign.txt" budget=${MAESTRO_CAMPAIGN_SECONDS:-540} failed=0
  # MAESTRO_CAMPAIGN_END (epoch seconds) bounds the campaign by the call's
  # end instead, the build before it counted.
  [[ -n "${MAESTRO_CAMPAIGN_END:-}" ]] && budget=$((MAESTRO_CAMPAIGN_END - $(date +%s)))
  local start=$SECONDS bin="$build/bin"
  local ctest
  ctest=$(find_tool ctest "$(find_torch_python || true)") || die "no ctest on PATH or beside the torch Python"
  export PATH="$bin:$PATH"
  {
    echo "# Maestro device campaign, $(date -u +%FT%TZ), commit ${MAESTRO_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  } >"$summary"
  # step NAME LIMIT_S COMMAND...: runs COMMAND with its output in
  # $work/NAME.log under `timeout`, unless the budget is spent.
  step() {
    local name=$1 limit=$2
    shift 2
    local left=$((budget - (SECONDS - start)))
    if ((left < 20)); then
      echo "$name: skipped (budget spent)" >>"$summary"
      failed=1
      return
    fi
    ((limit > left)) && limit=$left
    local t=$SECONDS rc=0
    timeout --kill-after=10 "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
    if ((rc == 0)); then
      echo "$name: ok ($((SECONDS - t)) s)" >>"$summary"
    else
      echo "$name: FAILED, exit $rc ($((SECONDS - t)) s of $limit)" >>"$summary"
      tail -5 "$work/$name.log" | sed 's/^/    /' >>"$summary"
      failed=1
    fi
  }
  step profile-kernels 150 maestro profile --kernels --device cuda -o "$out/h200.json"
  local profile_arg=()
  [[ -s "$out/h200.json" ]] && profile_arg=(--profile "$out/h200.json")
  step bench-gpu 150 bash -c '"$0" gpu --json -- "${@:2}" >"$1"' "$bin/maestro-bench" "$out/bench-gpu.json" "${profile_arg[@]}"
  step ctest-gpu 200 bash -c 'cd "$0" && "$1" -L gpu --output-on-failure --timeout 180' "$build" "$ctest"
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && grep -q '(Skipped)' "$work/ctest-gpu.log" 2>/dev/null; then
    echo "ctest-gpu: FAILED, $(grep -c '(Skipped)' "$work/ctest-gpu.log") gpu test(s) skipped on a machine with a GPU" >>"$summary"
    failed=1
  fi
  grep -E 'tests passed|tests failed' "$work/ctest-gpu.log" >>"$summary" 2>/dev/null || true
  step tiny-vlm-gpu 120 maestro run specs/tiny_vlm.toml --steps 200 --no-eval --fresh -o "$work/tiny_vlm_gpu"
  # Its median step against the plan's (the step model's issue cost, checked).
  python3 scripts/step_vs_plan.py --label tiny-vlm-gpu "$work/tiny_vlm_gpu" >>"$summary" 2>&1 ||
    echo "tiny-vlm-gpu: no step against the plan (scripts/step_vs_plan.py)" >>"$summary"
  step tiny-vlm-cpu 120 maestro run specs/tiny_vlm.toml --steps 200 --no-eval --fresh --device cpu -o "$work/tiny_vlm_cpu"
  step compare-losses 30 bash -c 'python3 scripts/compare_losses.py --window-tolerance 0.10 "$0" "$1" | tee "$2"' \
    "$work/tiny_vlm_gpu/run/metrics.jsonl" "$work/tiny_vlm_cpu/run/metrics.jsonl" "$out/compare-losses.txt"
  step bench-gpu-mb8 90 bash -c '"$0" gpu --json -- --cases decoder --micro-batch 8 "${@:2}" >"$1"' \
    "$bin/maestro-bench" "$out/bench-gpu-mb8.json" "${profile_arg[@]}"
  step doctor 30 maestro doctor
  step dry-run 30 maestro run specs/tiny_vlm.toml --dry-run -o "$work/dry_run"
  echo "campaign: $((SECONDS - start)) s" >>"$summary"
  # The plans, reports and metrics of the runs, and every log, in one file.
  tar -czf "$out/campaign-logs.tar.gz" -C "$work" --exclude='*/checkpoints' --exclude='*/spool' \
    --exclude='*.sqlite' --exclude='*.h5' . 2>/dev/null || true
  cat "$summary"
  ((failed == 0)) || die "a campaign step failed (campaign.txt)"
}

verbs=()
kit=.gpu-kit
for arg in "$@"; do
  case "$arg" in
    pack | build | check | campaign) verbs+=("$arg") ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option '$arg'" ;;
    *) kit=$arg ;;
  esac
done
((${#verbs[@]} > 0)) || { usage >&2; exit 2; }
kit=$(realpath -m "$kit")
for verb in "${verbs[@]}"; do
  "cmd_$verb" "$kit"
done
