# SPDX-License-Identifier: Apache-2.0
# Every third-party dependency of Maestro, found once, as imported targets.
# A missing one stops the configure step with the Debian package that has it;
# scripts/setup.sh installs them all.

function(maestro_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "Maestro needs ${what}. Install it with: sudo apt-get install ${package}"
                        " (or run scripts/setup.sh, which installs everything).")
  endif()
endfunction()

find_package(PkgConfig QUIET)
maestro_require(PkgConfig_FOUND "pkg-config" "pkg-config")

find_package(fmt CONFIG QUIET)
maestro_require(fmt_FOUND "{fmt}" "libfmt-dev")
find_package(nlohmann_json 3.10 CONFIG QUIET)
maestro_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")
find_package(CLI11 CONFIG QUIET)
maestro_require(CLI11_FOUND "CLI11" "libcli11-dev")
find_package(tomlplusplus CONFIG QUIET)
maestro_require(tomlplusplus_FOUND "TOML++" "libtomlplusplus-dev")

find_package(SQLite3 QUIET)
maestro_require(SQLite3_FOUND "SQLite 3" "libsqlite3-dev")
find_package(HDF5 QUIET COMPONENTS C CXX)
maestro_require(HDF5_FOUND "HDF5 (C and C++)" "libhdf5-dev")
if(NOT TARGET maestro::hdf5)
  add_library(maestro::hdf5 INTERFACE IMPORTED)
  target_include_directories(maestro::hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
  target_compile_definitions(maestro::hdf5 INTERFACE ${HDF5_DEFINITIONS})
  target_link_libraries(maestro::hdf5 INTERFACE ${HDF5_LIBRARIES} ${HDF5_CXX_LIBRARIES})
endif()

find_package(MPI QUIET COMPONENTS C)
maestro_require(MPI_C_FOUND "Open MPI" "libopenmpi-dev openmpi-bin")
find_program(MAESTRO_MPIRUN NAMES mpirun mpiexec)
maestro_require(MAESTRO_MPIRUN "mpirun" "openmpi-bin")
# The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
add_library(maestro::mpi INTERFACE IMPORTED)
target_link_libraries(maestro::mpi INTERFACE MPI::MPI_C)
target_compile_definitions(maestro::mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

# Image decoding for vision towers (datasets/image_decode.h).
find_package(JPEG QUIET)
maestro_require(JPEG_FOUND "libjpeg-turbo (JPEG decoding)" "libjpeg62-turbo-dev")
find_package(PNG QUIET)
maestro_require(PNG_FOUND "libpng (PNG decoding)" "libpng-dev")

# Audio files for audio encoders (datasets/audio_features.h): decoding
# (libsndfile), resampling (libsoxr) and the log-mel STFT (FFTW3, double).
pkg_check_modules(SNDFILE QUIET IMPORTED_TARGET sndfile)
maestro_require(SNDFILE_FOUND "libsndfile (audio decoding)" "libsndfile1-dev")
add_library(maestro::sndfile ALIAS PkgConfig::SNDFILE)
pkg_check_modules(SOXR QUIET IMPORTED_TARGET soxr)
maestro_require(SOXR_FOUND "libsoxr (audio resampling)" "libsoxr-dev")
add_library(maestro::soxr ALIAS PkgConfig::SOXR)
pkg_check_modules(FFTW3 QUIET IMPORTED_TARGET fftw3)
maestro_require(FFTW3_FOUND "FFTW3 (the log-mel spectrogram's FFT)" "libfftw3-dev")
add_library(maestro::fftw3 ALIAS PkgConfig::FFTW3)

# CRC-32C of spool rows and checkpoint blobs (datalayer/crc32c.h): Intel's
# ISA-L picks the CPU's fastest kernel (PCLMUL/AVX-512 folding) at run time.
# Found by path, not pkg-config, so that a prefix (CMAKE_PREFIX_PATH: the GPU
# kit's unpacked packages, scripts/gpu-kit.sh) is searched as /usr is.
find_path(ISAL_INCLUDE_DIR isa-l/crc.h)
find_library(ISAL_LIBRARY isal)
set(ISAL_FOUND FALSE)
if(ISAL_INCLUDE_DIR AND ISAL_LIBRARY)
  set(ISAL_FOUND TRUE)
endif()
maestro_require(ISAL_FOUND "ISA-L (CRC-32C)" "libisal-dev")
add_library(maestro::isal UNKNOWN IMPORTED)
set_target_properties(maestro::isal PROPERTIES IMPORTED_LOCATION "${ISAL_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${ISAL_INCLUDE_DIR}")

pkg_check_modules(PMIX QUIET IMPORTED_TARGET pmix)
maestro_require(PMIX_FOUND "PMIx" "libpmix-dev")
add_library(maestro::pmix ALIAS PkgConfig::PMIX)

# libtorch: only runtime/ links it (one TU costs ~16 s and ~1.2 GB to compile).
# Which one (MAESTRO_TORCH_DIR, the system's, a Python's torch), its C++ ABI,
# its CUDA and the one fmt its code uses: cmake/MaestroTorch.cmake.
include(MaestroTorch)

# CUDA + NCCL: optional. AUTO builds the NCCL backend when both are found:
# the system's (/usr/include, /usr/local/cuda) or the one a pip-installed
# PyTorch carries beside it (site-packages/nvidia/nccl: only libnccl.so.2).
set(MAESTRO_HAVE_NCCL OFF)
if(NOT MAESTRO_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(torch_nccl "${TORCH_INSTALL_PREFIX}/../nvidia/nccl")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include "${torch_nccl}/include")
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 "${torch_nccl}/lib")
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(MAESTRO_HAVE_NCCL ON)
    add_library(maestro::nccl INTERFACE IMPORTED)
    target_include_directories(maestro::nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(maestro::nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  elseif(MAESTRO_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MAESTRO_WITH_CUDA=ON but the CUDA toolkit or NCCL was not found "
                        "(looked in /usr/local/cuda). Install CUDA + NCCL or configure with -DMAESTRO_WITH_CUDA=OFF.")
  endif()
endif()
message(STATUS "Maestro: NCCL/CUDA backend: ${MAESTRO_HAVE_NCCL}")

if(MAESTRO_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    find_package(GTest QUIET)
  endif()
  maestro_require(GTest_FOUND "GoogleTest" "libgtest-dev libgmock-dev")
endif()
if(MAESTRO_BENCH)
  find_package(benchmark CONFIG QUIET)
  maestro_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")
endif()
find_package(Threads REQUIRED)
