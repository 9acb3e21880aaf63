#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian package Maestro needs (build, run, test). Idempotent:
# when everything is present it only checks (well under a second) and says so.
#   scripts/setup.sh            install what is missing (root, or sudo without a password)
#   scripts/setup.sh --check    only report what is missing (exit 1 if anything is)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config make
  clang-format-14                             # scripts/format.sh; the test command checks formatting
  # libraries (see cmake/MaestroDeps.cmake)
  libtorch-dev libopenblas0-openmp           # libtorch; without OpenBLAS it runs ~17x slower
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libsqlite3-dev sqlite3 libhdf5-dev hdf5-tools
  libisal-dev                                 # CRC-32C of spool rows and checkpoints (datalayer/crc32c.h)
  libopenmpi-dev openmpi-bin libpmix-dev
  libjpeg62-turbo-dev libpng-dev              # image decoding (datasets/image_decode.h, docs/data.md)
  libsndfile1-dev libsoxr-dev libfftw3-dev    # audio decoding, resampling, log-mel (datasets/audio_features.h)
  # the local Slurm cluster (slurm/local-cluster.sh) and srun --mpi=pmix
  slurmctld slurmd slurm-client munge
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch                               # reference outputs for numerical tests
  python3-pil                                 # scripts/make_example_workload.py writes PNG and JPEG files
  python3-soundfile                           # the audio features' reference reads WAV/FLAC (tests/datasets)
  # data for the demo
  dataset-fashion-mnist
  fortunes-min                                # the demo's English text (datasets/, docs/datasets.md)
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

# Debian 13's libtorch 2.x headers, unpacked beside the system (not
# installed): ctest Build.TorchCompat2xCompiles compiles runtime/torch_compat.h's
# 2.x side against them (scripts/torch2-headers.sh; a no-op once there).
# A failed download does not stop the setup: everything else builds and
# runs, and that one test fails naming this script.
torch2_headers() {
  if ((check_only)); then
    "$here/torch2-headers.sh" --check
  else
    "$here/torch2-headers.sh" ||
      echo "setup: the libtorch 2.x headers could not be fetched (see above); ctest Build.TorchCompat2xCompiles will fail until scripts/torch2-headers.sh succeeds" >&2
  fi
}

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  torch2_headers
  exit 0
fi
if ((check_only)); then
  echo "setup: missing packages: ${missing[*]}" >&2
  torch2_headers || true
  exit 1
fi

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  cat >&2 <<MSG
setup: these Debian packages are missing and installing them needs root:
  ${missing[*]}
Run this script as root (or with sudo), or install them yourself:
  sudo apt-get install --no-install-recommends ${missing[*]}
MSG
  exit 1
fi

echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/maestro-setup.XXXXXX.log)
# An old or empty package list makes `apt-get install` fail: refresh it first.
if ! "${SUDO[@]}" apt-get update -qq >"$log" 2>&1; then
  echo "setup: apt-get update failed:" >&2; tail -20 "$log" >&2; exit 1
fi
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  echo "setup: apt-get install failed (full log: $log):" >&2; tail -30 "$log" >&2; exit 1
fi
rm -f "$log"
torch2_headers
echo "setup: done"
