# Finds the one LibTorch eft-train builds against: PyTorch 2.x from PyPI, in the project's virtual
# environment (.venv, made by scripts/install-deps.sh from scripts/python-requirements.txt), or the
# PyTorch of another Python given as -DEFT_PYTHON=/path/to/python (a GPU machine's own; docs/gpu.md).
#
# PyPI's torch for Linux is the CUDA build. Its TorchConfig wants a CUDA toolkit at configure time; the
# pip-installed toolkit (nvidia-cuda-nvcc & co.) has no unversioned library names, so
# scripts/install-python.sh lays out a toolkit-shaped folder of links, .venv/cuda, which this file points CMake at. A machine with a
# real toolkit (nvcc on PATH, /usr/local/cuda) keeps it.
#
# Sets EFT_TORCH_VERSION, EFT_TORCH_CUDA (the CUDA version torch was built with, empty for CPU builds)
# and, for CUDA builds, NCCL_INCLUDE_DIR (nvidia-nccl's headers) unless given.

set(eft_default_python "${PROJECT_SOURCE_DIR}/.venv/bin/python")
if(NOT EXISTS "${eft_default_python}")
  set(eft_default_python "python3")
endif()
set(EFT_PYTHON "${eft_default_python}" CACHE STRING "the Python whose torch package provides LibTorch")

# Asked on every configure (a second or two): the answers also steer the CUDA set-up below, and
# -DTorch_DIR=<a LibTorch's share/cmake/Torch> still takes precedence in find_package.
execute_process(
  COMMAND "${EFT_PYTHON}" -c
          "import os, torch; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(torch.version.cuda or ''); print(os.path.dirname(os.path.dirname(torch.__file__)))"
  OUTPUT_VARIABLE eft_torch_info
  ERROR_VARIABLE eft_torch_error
  RESULT_VARIABLE eft_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT eft_torch_rc EQUAL 0 AND NOT Torch_DIR)
  message(FATAL_ERROR
    "eft-train needs PyTorch 2.x: '${EFT_PYTHON}' cannot import torch (${eft_torch_error}).\n"
    "Run scripts/install-deps.sh (it makes .venv with the pinned torch), or point -DEFT_PYTHON at a "
    "Python that has torch, or -DTorch_DIR at a LibTorch's share/cmake/Torch.")
endif()
if(eft_torch_rc EQUAL 0)
  string(REPLACE "\n" ";" eft_torch_info "${eft_torch_info}")
  list(GET eft_torch_info 0 eft_torch_prefix)
  list(GET eft_torch_info 1 EFT_TORCH_VERSION)
  list(GET eft_torch_info 2 EFT_TORCH_CUDA)  # an empty line for a CPU build
  list(GET eft_torch_info 3 eft_site_packages)
  list(APPEND CMAKE_PREFIX_PATH "${eft_torch_prefix}")
  # TorchConfig looks for libc10, libtorch_cpu... on the system's paths before its own: where Debian's
  # libtorch-dev is installed it would link 1.13's libraries with 2.x's headers. Its own lib/ first.
  list(PREPEND CMAKE_LIBRARY_PATH "${eft_site_packages}/torch/lib")
  message(STATUS "eft-train: LibTorch ${EFT_TORCH_VERSION} from ${EFT_PYTHON} (CUDA: ${EFT_TORCH_CUDA})")

  if(EFT_TORCH_CUDA)
    # The toolkit: a real one when nvcc is on PATH, else the links install-python.sh made beside the
    # virtual environment's bin/.
    find_program(eft_path_nvcc nvcc)
    get_filename_component(eft_venv "${EFT_PYTHON}" DIRECTORY)
    get_filename_component(eft_venv "${eft_venv}" DIRECTORY)
    if(NOT CUDA_TOOLKIT_ROOT_DIR AND NOT eft_path_nvcc AND EXISTS "${eft_venv}/cuda/bin/nvcc")
      set(CUDA_TOOLKIT_ROOT_DIR "${eft_venv}/cuda" CACHE PATH "CUDA toolkit (pip-installed, linked)")
      set(CMAKE_CUDA_COMPILER "${CUDA_TOOLKIT_ROOT_DIR}/bin/nvcc" CACHE FILEPATH "nvcc")
    endif()
    if(NOT NCCL_INCLUDE_DIR AND EXISTS "${eft_site_packages}/nvidia/nccl/include/nccl.h")
      set(NCCL_INCLUDE_DIR "${eft_site_packages}/nvidia/nccl/include" CACHE PATH "nccl.h of the wheel's NCCL")
    endif()
  endif()
endif()

# Without it Caffe2's config probes for a GPU with a test program, which fails on machines without
# one. 9.0 = H100/H200 (sm_90); more archs are a ;-list, e.g. "8.0;9.0".
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
find_package(Torch REQUIRED)
# PyTorch's libtorch.so carries and exports its own copy of parts of libstdc++ (std::filesystem among
# them, from the toolchain the wheel was built with). Ahead of the system's libstdc++ in a program's
# load order it would serve the program's own calls too, and its remove_all jumps through a weak symbol
# that this libstdc++ does not define: a crash at the first recursive delete. Every program and
# library defined from here on names libstdc++ first, so std:: stays with the system's library.
add_link_options("LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")

foreach(eft_lib IN LISTS TORCH_LIBRARY c10_LIBRARY torch_cpu_LIBRARY)
  get_filename_component(eft_lib_dir "${eft_lib}" DIRECTORY)
  if(NOT eft_lib_dir STREQUAL "${TORCH_INSTALL_PREFIX}/lib")
    message(FATAL_ERROR "LibTorch ${TORCH_INSTALL_PREFIX} would link ${eft_lib}, another LibTorch's library "
                        "(a cached result of an earlier configure?): remove the build folder and configure again")
  endif()
endforeach()

# One precompiled header of LibTorch's ATen for every target that links it. ATen.h alone is most of a
# translation unit's compile time (~10 of 15 s); the header is compiled once (~30 s, ~600 MB) and
# each target reuses it. Targets whose flags make it unusable (-fPIC modules) do not get it.
file(WRITE ${CMAKE_BINARY_DIR}/eft_torch_pch.cc "// the precompiled LibTorch header's own translation unit\n")
add_library(eft_torch_pch STATIC ${CMAKE_BINARY_DIR}/eft_torch_pch.cc)
target_link_libraries(eft_torch_pch PUBLIC ${TORCH_LIBRARIES})
target_precompile_headers(eft_torch_pch PRIVATE <ATen/ATen.h> <torch/csrc/autograd/custom_function.h>)

# Whether `target` links `wanted` (e.g. torch: the target anywhere in its link closure).
function(eft_links target wanted result)
  set(stack ${target})
  set(seen "")
  while(stack)
    list(POP_BACK stack t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    if(t STREQUAL wanted)
      set(${result} TRUE PARENT_SCOPE)
      return()
    endif()
    get_target_property(type ${t} TYPE)
    set(deps "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${t} LINK_LIBRARIES)
      if(direct)
        list(APPEND deps ${direct})
      endif()
    endif()
    get_target_property(interface ${t} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND deps ${interface})
    endif()
    foreach(d IN LISTS deps)
      if(TARGET ${d})
        list(APPEND stack ${d})
      endif()
    endforeach()
  endwhile()
  set(${result} FALSE PARENT_SCOPE)
endfunction()

# Gives every static library and executable defined under `dir` that links LibTorch the shared
# precompiled header. Called once all targets exist (the end of the top-level CMakeLists.txt).
function(eft_reuse_torch_pch_below dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t STREQUAL "eft_torch_pch" OR NOT type MATCHES "^(STATIC_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    get_target_property(sources ${t} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.(cc|cpp)$")
    if(NOT sources)
      continue()
    endif()
    eft_links(${t} torch links)
    # clang refuses a precompiled header made without -pthread in a target compiled with it (gcc
    # does not mind): in a clang build (the sanitizers') those targets compile ATen themselves.
    if(links AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      eft_links(${t} Threads::Threads threads)
      if(threads)
        set(links FALSE)
      endif()
    endif()
    if(links)
      target_precompile_headers(${t} REUSE_FROM eft_torch_pch)
      target_compile_options(${t} PRIVATE -fpch-preprocess)  # so ccache can cache what uses it
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS subdirs)
    eft_reuse_torch_pch_below(${d})
  endforeach()
endfunction()
