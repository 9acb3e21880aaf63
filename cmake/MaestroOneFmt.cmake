# SPDX-License-Identifier: Apache-2.0
# One fmt in a build that links a libtorch shipping its own fmt headers.
# PyTorch 2.x's include folder carries fmt (2.11: fmt 12), and it comes before
# the system's /usr/include on every command line that has torch's include
# folders, while libfmt.so is the system's (Debian 12, Ubuntu 24.04: fmt 9):
# a torch translation unit then calls fmt::v12::vformat, which no library
# defines. The rule: when torch's include folders carry another fmt than the
# system fmt target's, every target that compiles with torch's headers
# compiles fmt header-only (FMT_HEADER_ONLY=1 on the torch target), against
# the fmt that wins its include order; everything else keeps the system's
# libfmt. The two fmts live in different inline namespaces (fmt::v9,
# fmt::v12), so they never meet in one symbol. Used by MaestroTorch.cmake and
# by the check in tests/build/ (a tiny project against a fake torch include
# folder whose fmt is another version). Plain CMake; no targets of its own.

# maestro_torch_use_one_fmt(<torch target> <system fmt target>): the rule
# above. Sets MAESTRO_TORCH_FMT in the caller's scope: "system" when torch's
# include folders carry no fmt but the system's, else "header-only <version>".
function(maestro_torch_use_one_fmt torch_target fmt_target)
  get_target_property(torch_dirs ${torch_target} INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(fmt_dirs ${fmt_target} INTERFACE_INCLUDE_DIRECTORIES)
  set(system_fmt_dirs)
  foreach(dir IN LISTS fmt_dirs)
    if(EXISTS "${dir}")
      file(REAL_PATH "${dir}" real)
      list(APPEND system_fmt_dirs "${real}")
    endif()
  endforeach()
  set(result "system")
  foreach(dir IN LISTS torch_dirs)
    if(NOT EXISTS "${dir}/fmt/core.h")
      continue()
    endif()
    file(REAL_PATH "${dir}" real)
    if(real IN_LIST system_fmt_dirs)
      continue()
    endif()
    file(STRINGS "${dir}/fmt/core.h" version_line REGEX "^#[ \t]*define[ \t]+FMT_VERSION[ \t]+[0-9]+")
    if(NOT version_line AND EXISTS "${dir}/fmt/base.h")  # fmt >= 11 defines it in base.h
      file(STRINGS "${dir}/fmt/base.h" version_line REGEX "^#[ \t]*define[ \t]+FMT_VERSION[ \t]+[0-9]+")
    endif()
    string(REGEX REPLACE ".*FMT_VERSION[ \t]+([0-9]+).*" "\\1" version "${version_line}")
    if(NOT EXISTS "${dir}/fmt/format-inl.h")
      message(FATAL_ERROR
        "libtorch's include folder ${dir} carries fmt (${dir}/fmt/core.h, FMT_VERSION ${version}) without "
        "fmt/format-inl.h, so it can be used neither with the system's libfmt nor header-only. Build against "
        "a libtorch whose include folder has the whole of fmt (PyTorch's wheels do), or remove ${dir}/fmt so "
        "the system's fmt is the only one (cmake/MaestroTorch.cmake).")
    endif()
    set_property(TARGET ${torch_target} APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
    set(result "header-only ${version} from ${dir}")
    break()
  endforeach()
  set(MAESTRO_TORCH_FMT "${result}" PARENT_SCOPE)
endfunction()
