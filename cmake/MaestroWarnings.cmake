# SPDX-License-Identifier: Apache-2.0
# maestro_target_defaults(<target>): the project's warning set on one of OUR
# targets. Warnings are errors when MAESTRO_WERROR is ON (the default, and CI).
# Third-party headers come in as SYSTEM includes, so their warnings stay silent.
function(maestro_target_defaults target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wnull-dereference
    -Wimplicit-fallthrough -Wformat=2)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wshadow=local)
  else()
    target_compile_options(${target} PRIVATE -Wshadow-uncaptured-local)
  endif()
  if(MAESTRO_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# maestro_library(<name> SOURCES ... DEPS ...): a module library with defaults.
function(maestro_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  maestro_target_defaults(${name})
endfunction()

# maestro_executable(<name> SOURCES ... DEPS ...)
function(maestro_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  maestro_target_defaults(${name})
endfunction()

# maestro_fuzz_subdirectory(): the module's fuzz/ folder (libFuzzer targets)
# when MAESTRO_FUZZ=ON; they need clang. Run outside CI.
function(maestro_fuzz_subdirectory)
  if(NOT MAESTRO_FUZZ)
    return()
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MAESTRO_FUZZ=ON needs clang: configure with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  add_subdirectory(fuzz)
endfunction()
