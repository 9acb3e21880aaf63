# SPDX-License-Identifier: Apache-2.0
# ctest Build.TorchCompat2xCompiles (cmake -P): compiles
# tests/build/torch2_compat_check.cc, which includes runtime/torch_compat.h,
# and runtime/host_allocator.cc
# against the libtorch 2.x headers in HEADERS_DIR (Debian 13's libtorch-dev,
# unpacked by scripts/setup.sh through scripts/torch2-headers.sh), with the
# project's warnings as errors. Variables: MAESTRO_SOURCE_DIR, HEADERS_DIR, CXX.
foreach(var MAESTRO_SOURCE_DIR HEADERS_DIR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "torch2_compat_check.cmake: -D${var}=... is missing")
  endif()
endforeach()
set(include "${HEADERS_DIR}/usr/include")
set(api_include "${include}/torch/csrc/api/include")
if(NOT EXISTS "${api_include}/torch/version.h")
  message(FATAL_ERROR
    "torch2_compat_check: no libtorch 2.x headers in ${HEADERS_DIR} (${api_include}/torch/version.h is missing). "
    "Run scripts/setup.sh (as root): it unpacks Debian 13's libtorch-dev there through scripts/torch2-headers.sh.")
endif()
file(STRINGS "${api_include}/torch/version.h" parts REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE "[^;]*_(MAJOR|MINOR|PATCH) ([0-9]+)" "\\2" parts "${parts}")
string(REPLACE ";" "." version "libtorch ${parts}")
# torch_compat.h (through the check's .cc) and the runtime's one c10-only
# file whose overrides differ between 1.13 and 2.x (runtime/host_allocator.cc:
# c10::Allocator's allocate lost its const and gained copy_data in 2.3).
foreach(source tests/build/torch2_compat_check.cc runtime/host_allocator.cc)
  execute_process(
    COMMAND "${CXX}" -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Werror
            -I "${MAESTRO_SOURCE_DIR}" -isystem "${include}" -isystem "${api_include}"
            "${MAESTRO_SOURCE_DIR}/${source}"
    OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "torch2_compat_check: ${source} does not compile against ${version} "
                        "(${include}):\n${out}")
  endif()
  message(STATUS "torch2_compat_check: ${source} compiles against ${version}")
endforeach()
