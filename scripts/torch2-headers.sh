#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Unpacks Debian 13 (trixie)'s libtorch-dev (libtorch 2.x headers, ~2.4 MB to
# download) into a folder, for ctest Build.TorchCompat2xCompiles: CI builds
# and links against Debian 12's libtorch 1.13, and this is how it compiles the
# 2.x side of runtime/torch_compat.h. Nothing is installed into the system:
# apt-get runs with a package list of its own under the folder, from this
# machine's own Debian mirror (the one its apt sources name), and the package
# is unpacked with dpkg -x. Idempotent: a complete folder is left alone.
#   scripts/torch2-headers.sh [DIR]     default: $MAESTRO_TORCH2_HEADERS or /var/cache/maestro/libtorch-2
#   scripts/torch2-headers.sh --check [DIR]   exit 1 if DIR is not complete
# scripts/setup.sh runs it.
set -euo pipefail

check_only=0
if [[ "${1:-}" == "--check" ]]; then
  check_only=1
  shift
fi
case "${1:-}" in
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
esac
dest=${1:-${MAESTRO_TORCH2_HEADERS:-/var/cache/maestro/libtorch-2}}
if [[ -f "$dest/.complete" && -f "$dest/usr/include/torch/csrc/api/include/torch/version.h" ]]; then
  exit 0
fi
if ((check_only)); then
  echo "torch2-headers: $dest holds no unpacked libtorch 2.x headers; run scripts/torch2-headers.sh" >&2
  exit 1
fi

# This machine's Debian mirror: the URI its apt sources give the main suite.
# shellcheck disable=SC2016 # $(REPO_URI) is apt's field syntax, not the shell's
mirror=$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' 2>/dev/null |
  awk '$2 !~ /-(security|updates|backports)$/ {print $1; exit}')
if [[ -z "$mirror" ]]; then
  echo "torch2-headers: no Debian mirror in this machine's apt sources (apt-get indextargets found none);" \
    "run 'apt-get update' once, or set up /etc/apt/sources.list.d/debian.sources" >&2
  exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [[ ! -f "$keyring" ]]; then
  echo "torch2-headers: $keyring is missing; install the package debian-archive-keyring" >&2
  exit 1
fi

work=$(mktemp -d /tmp/maestro-torch2.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
echo "deb [signed-by=$keyring] $mirror trixie main" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/none"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root")
log="$work/apt.log"
if ! apt-get "${apt_opts[@]}" update >"$log" 2>&1; then
  echo "torch2-headers: apt-get update of Debian 13's package list failed:" >&2
  tail -20 "$log" >&2
  exit 1
fi
version=$(apt-cache "${apt_opts[@]}" show libtorch-dev 2>/dev/null | awk '/^Version:/ {print $2; exit}')
if [[ "$version" != 2.* ]]; then
  echo "torch2-headers: Debian 13's libtorch-dev is '${version:-absent}', not 2.x; the check needs 2.x headers" >&2
  exit 1
fi
if ! (cd "$work/deb" && apt-get "${apt_opts[@]}" download "libtorch-dev=$version" >>"$log" 2>&1); then
  echo "torch2-headers: apt-get download libtorch-dev=$version failed:" >&2
  tail -20 "$log" >&2
  exit 1
fi
# Unpacked beside, then moved in place: a concurrent run never sees half a folder.
mkdir -p "$(dirname "$dest")"
staging=$(mktemp -d "$dest.new.XXXXXX")
dpkg -x "$work"/deb/libtorch-dev_*.deb "$staging"
if [[ ! -f "$staging/usr/include/torch/csrc/api/include/torch/version.h" ]]; then
  echo "torch2-headers: libtorch-dev $version has no usr/include/torch/csrc/api/include/torch/version.h" >&2
  rm -rf "$staging"
  exit 1
fi
echo "libtorch-dev $version" >"$staging/.complete"
chmod 755 "$staging"
rm -rf "$dest"
mv "$staging" "$dest"
echo "torch2-headers: libtorch-dev $version headers in $dest"
