# SPDX-License-Identifier: Apache-2.0
# libtorch for runtime/: which one, and the rules that make any of them build.
# Included by MaestroDeps.cmake; only runtime/ and the tests and benchmarks
# that link ${TORCH_LIBRARIES} see torch's headers.
#
# Which libtorch (the first that applies):
#   1. MAESTRO_TORCH_DIR (cache variable or environment): a libtorch folder,
#      an installed PyTorch's package folder (site-packages/torch), or the
#      share/cmake/Torch folder inside either. Wrong folder: configure stops.
#   2. Torch_DIR / CMAKE_PREFIX_PATH / the system's (Debian's libtorch-dev,
#      1.13 CPU: what CI builds against).
#   3. The torch of a Python: MAESTRO_TORCH_PYTHON, else $MAESTRO_PYTHON3,
#      else python3 on PATH (`torch.utils.cmake_prefix_path`): PyTorch 2.x
#      with CUDA on a GPU machine.
# Then:
#   - a libtorch built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0) stops
#     the configure step: fmt, TOML++ and the rest use the new one;
#   - MAESTRO_TORCH_CUDA is ON when that libtorch carries CUDA (c10_cuda);
#   - one fmt (maestro_torch_use_one_fmt): PyTorch 2.x ships fmt's headers in
#     its include folder (2.11: fmt 12). They come before the system's
#     /usr/include, so a torch translation unit compiles against torch's fmt
#     while libfmt.so is the system's (Debian 12 and Ubuntu 24.04: fmt 9):
#     `undefined reference to fmt::v12::vformat`. When torch's include
#     folders carry another fmt than the system's, every target that compiles
#     with torch's headers compiles fmt header-only (FMT_HEADER_ONLY=1, set
#     on the torch target), against the fmt that wins the include order;
#     the rest of the project keeps the system's libfmt. docs/e2e.md § GPU;
#     tests/build/ checks it.

include(MaestroOneFmt)  # maestro_torch_use_one_fmt

# A folder the user named -> the folder holding TorchConfig.cmake, or "".
function(maestro_torch_config_dir out dir)
  set(found "")
  foreach(candidate "${dir}" "${dir}/share/cmake/Torch" "${dir}/Torch")
    if(EXISTS "${candidate}/TorchConfig.cmake")
      set(found "${candidate}")
      break()
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

set(MAESTRO_TORCH_DIR "$ENV{MAESTRO_TORCH_DIR}" CACHE PATH
    "libtorch to build runtime/ against: a libtorch folder or PyTorch's package folder (empty: the system's)")
set(MAESTRO_TORCH_PYTHON "" CACHE FILEPATH
    "A Python whose torch is used when MAESTRO_TORCH_DIR is empty and the system has no libtorch")

if(MAESTRO_TORCH_DIR)
  maestro_torch_config_dir(torch_config_dir "${MAESTRO_TORCH_DIR}")
  if(NOT torch_config_dir)
    message(FATAL_ERROR
      "MAESTRO_TORCH_DIR=${MAESTRO_TORCH_DIR} holds no TorchConfig.cmake (looked in it, in its "
      "share/cmake/Torch and in its Torch folder). Point it at a libtorch folder or at an installed "
      "PyTorch's package folder: python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))'")
  endif()
  find_package(Torch CONFIG REQUIRED PATHS "${torch_config_dir}" NO_DEFAULT_PATH)
  set(MAESTRO_TORCH_SOURCE "MAESTRO_TORCH_DIR")
else()
  find_package(Torch QUIET)
  set(MAESTRO_TORCH_SOURCE "the system")
  if(NOT Torch_FOUND)
    set(pythons "${MAESTRO_TORCH_PYTHON}" "$ENV{MAESTRO_PYTHON3}")
    find_program(MAESTRO_PYTHON3_ON_PATH NAMES python3)
    list(APPEND pythons "${MAESTRO_PYTHON3_ON_PATH}")
    foreach(python IN LISTS pythons)
      if(NOT python)
        continue()
      endif()
      execute_process(COMMAND "${python}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                      OUTPUT_VARIABLE prefix RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(rc EQUAL 0 AND prefix)
        maestro_torch_config_dir(torch_config_dir "${prefix}")
        if(torch_config_dir)
          find_package(Torch CONFIG REQUIRED PATHS "${torch_config_dir}" NO_DEFAULT_PATH)
          set(MAESTRO_TORCH_SOURCE "the torch of ${python}")
          break()
        endif()
      endif()
    endforeach()
  endif()
endif()
maestro_require(Torch_FOUND "libtorch (CMake package Torch)"
                "libtorch-dev libopenblas0-openmp, or set MAESTRO_TORCH_DIR to a libtorch or PyTorch folder")

if("${TORCH_CXX_FLAGS}" MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR
    "The libtorch in ${TORCH_INSTALL_PREFIX} (from ${MAESTRO_TORCH_SOURCE}) uses the old C++ ABI "
    "(TORCH_CXX_FLAGS: ${TORCH_CXX_FLAGS}); fmt, TOML++ and the other libraries here use the new one, so "
    "runtime/ cannot link against it. Use a libtorch built with _GLIBCXX_USE_CXX11_ABI=1 (PyTorch 2.7 and "
    "later, the cxx11-abi libtorch archives, or Debian's libtorch-dev) through MAESTRO_TORCH_DIR.")
endif()

set(MAESTRO_TORCH_CUDA OFF)
if(TARGET c10_cuda OR TARGET torch_cuda OR C10_CUDA_LIBRARY)
  set(MAESTRO_TORCH_CUDA ON)
endif()
maestro_torch_use_one_fmt(torch fmt::fmt)
message(STATUS "Maestro: libtorch ${Torch_VERSION} from ${MAESTRO_TORCH_SOURCE} (${TORCH_INSTALL_PREFIX}); "
               "CUDA: ${MAESTRO_TORCH_CUDA}; fmt in torch code: ${MAESTRO_TORCH_FMT}")
