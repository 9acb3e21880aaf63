# SPDX-License-Identifier: Apache-2.0
# The check of cmake/MaestroOneFmt.cmake (ctest Build.OneFmt*; run with
# cmake -P). It makes a fake torch include folder whose fmt is the system's
# fmt moved into another inline namespace and version (v99, FMT_VERSION
# 990000), the way PyTorch 2.11 ships fmt 12 beside Debian's fmt 9, and
# builds tests/build/fmt_shadow against it:
#   CASE=shadowed-without-rule  the build must fail to link on fmt::v99
#                               (the defect of issue #24 reproduced; if this
#                               builds, the fake folder proves nothing)
#   CASE=shadowed-with-rule     the build must succeed and the program print
#                               the runtime library's fmt output
#   CASE=torch-is-system        torch's include folder is the system fmt's
#                               own (Debian's libtorch): the rule keeps libfmt
# Variables: MAESTRO_SOURCE_DIR, WORK_DIR, FMT_INCLUDE_DIR, CXX, GENERATOR,
# MAKE_PROGRAM, CASE.
foreach(var MAESTRO_SOURCE_DIR WORK_DIR FMT_INCLUDE_DIR CXX GENERATOR CASE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "one_fmt_check.cmake: -D${var}=... is missing")
  endif()
endforeach()

set(work "${WORK_DIR}/${CASE}")
file(REMOVE_RECURSE "${work}")
set(fake_include "${work}/faketorch/include")
file(MAKE_DIRECTORY "${fake_include}/fmt")

# The fake torch's fmt: every header of the system's, in namespace fmt::v99.
file(GLOB headers "${FMT_INCLUDE_DIR}/fmt/*.h")
set(moved 0)
foreach(header IN LISTS headers)
  file(READ "${header}" text)
  string(REGEX REPLACE "inline namespace v[0-9]+ " "inline namespace v99 " renamed "${text}")
  string(REGEX REPLACE "(#[ \t]*define[ \t]+FMT_VERSION[ \t]+)[0-9]+" "\\1990000" renamed "${renamed}")
  if(NOT renamed STREQUAL text)
    math(EXPR moved "${moved} + 1")
  endif()
  get_filename_component(name "${header}" NAME)
  file(WRITE "${fake_include}/fmt/${name}" "${renamed}")
endforeach()
if(moved EQUAL 0 OR NOT EXISTS "${fake_include}/fmt/format-inl.h")
  message(FATAL_ERROR "one_fmt_check: could not make a second fmt from ${FMT_INCLUDE_DIR}/fmt "
                      "(no inline namespace or FMT_VERSION found, or no format-inl.h): the check cannot run")
endif()

set(args -S "${MAESTRO_SOURCE_DIR}/tests/build/fmt_shadow" -B "${work}/build" -G "${GENERATOR}"
         -DCMAKE_CXX_COMPILER=${CXX} -DMAESTRO_SOURCE_DIR=${MAESTRO_SOURCE_DIR})
if(MAKE_PROGRAM)
  list(APPEND args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CASE STREQUAL "shadowed-without-rule")
  list(APPEND args -DFAKE_TORCH_INCLUDE=${fake_include} -DEXPECT_FMT_VERSION=990000 -DAPPLY_RULE=OFF)
elseif(CASE STREQUAL "shadowed-with-rule")
  list(APPEND args -DFAKE_TORCH_INCLUDE=${fake_include} -DEXPECT_FMT_VERSION=990000 -DAPPLY_RULE=ON)
elseif(CASE STREQUAL "torch-is-system")
  list(APPEND args -DFAKE_TORCH_INCLUDE=${FMT_INCLUDE_DIR} -DEXPECT_FMT_VERSION=FMT_VERSION -DAPPLY_RULE=ON)
else()
  message(FATAL_ERROR "one_fmt_check: unknown CASE=${CASE}")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" ${args} OUTPUT_VARIABLE configure_out ERROR_VARIABLE configure_out
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "one_fmt_check ${CASE}: configuring the tiny project failed:\n${configure_out}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${work}/build" OUTPUT_VARIABLE build_out
                ERROR_VARIABLE build_out RESULT_VARIABLE build_rc)

if(CASE STREQUAL "shadowed-without-rule")
  if(build_rc EQUAL 0)
    message(FATAL_ERROR "one_fmt_check ${CASE}: the build linked although the runtime-like library compiled "
                        "against fmt::v99 and the program links the system's libfmt; the fake torch folder does "
                        "not reproduce the shadowing:\n${build_out}")
  endif()
  if(NOT build_out MATCHES "undefined reference to [^\n]*fmt::v99::")
    message(FATAL_ERROR "one_fmt_check ${CASE}: the build failed, but not on an undefined fmt::v99 symbol:\n"
                        "${build_out}")
  endif()
  message(STATUS "one_fmt_check ${CASE}: the link fails on fmt::v99, as PyTorch 2.11's fmt 12 did")
  return()
endif()

if(NOT build_rc EQUAL 0)
  message(FATAL_ERROR "one_fmt_check ${CASE}: the build failed with the one-fmt rule:\n${configure_out}\n${build_out}")
endif()
if(CASE STREQUAL "shadowed-with-rule")
  set(want_rule "fmt in torch code: header-only 990000 from ${fake_include}")
else()
  set(want_rule "fmt in torch code: system")
endif()
string(FIND "${configure_out}" "${want_rule}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "one_fmt_check ${CASE}: the configure step did not say '${want_rule}':\n${configure_out}")
endif()
execute_process(COMMAND "${work}/build/worker_like" OUTPUT_VARIABLE run_out ERROR_VARIABLE run_out
                RESULT_VARIABLE run_rc)
if(NOT run_rc EQUAL 0 OR NOT run_out MATCHES "step 3 loss 0\\.500")
  message(FATAL_ERROR "one_fmt_check ${CASE}: worker_like exited ${run_rc} and printed:\n${run_out}")
endif()
message(STATUS "one_fmt_check ${CASE}: ${want_rule}; worker_like printed: ${run_out}")
