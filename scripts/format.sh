#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Keeps the C++ sources formatted with the repository's .clang-format.
#   scripts/format.sh            rewrite every tracked C++ file in place
#   scripts/format.sh --check    list the files that differ; exit 1 if any does
# Uses Debian's clang-format 14 (package clang-format-14; CLANG_FORMAT overrides),
# the version the tree is kept clean under: other versions format differently.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  -h|--help) sed -n '3,7p' "$0"; exit 0 ;;
  "") ;;
  *) echo "format.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

cf=${CLANG_FORMAT:-}
if [[ -z "$cf" ]]; then
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
  done
fi
if [[ -z "$cf" ]]; then
  echo "format.sh: clang-format-14 not found (scripts/setup.sh installs it)" >&2
  exit 2
fi
if ! "$cf" --version | grep -q 'version 14\.'; then
  echo "format.sh: $("$cf" --version) is not clang-format 14; the tree is kept clean under 14 (set CLANG_FORMAT)" >&2
  exit 2
fi

# Tracked and untracked-but-not-ignored C++ files, NUL-separated.
mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard -- '*.cc' '*.h' '*.cpp' '*.hpp')
existing=()
for f in "${files[@]}"; do [[ -f "$f" ]] && existing+=("$f"); done
if ((${#existing[@]} == 0)); then exit 0; fi

if ((check == 0)); then
  printf '%s\0' "${existing[@]}" | xargs -0 -n 32 -P "$(nproc)" "$cf" -i --style=file
  exit 0
fi

bad=()
for f in "${existing[@]}"; do
  if ! "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]} > 0)); then
  echo "format: ${#bad[@]} file(s) differ from .clang-format:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "format: run scripts/format.sh to fix them" >&2
  exit 1
fi
echo "format: ${#existing[@]} files clean"
