# Finds Apache Arrow C++ and Parquet for eft-train's Parquet and Arrow datasets (docs/data.md): the
# libraries and headers of the pinned pyarrow wheel in the Python that provides LibTorch (EFT_PYTHON,
# cmake/EftTorch.cmake), as LibTorch comes from PyTorch's wheel. Arrow C++ is not a Debian 12
# package; the wheel is the Arrow project's own build, released with it, and the tests' reference
# (datasets, pyarrow) reads with the very same libraries.
#
# EFT_WITH_ARROW: AUTO (the default) builds with Arrow when that Python has pyarrow, ON requires it,
# OFF leaves it out. Without it eft-train still reads JSONL and says how to get Parquet when given
# one. Defines the imported targets eft::arrow and eft::parquet and EFT_HAVE_ARROW.

set(EFT_WITH_ARROW AUTO CACHE STRING "Parquet/Arrow datasets through pyarrow's Arrow C++ (AUTO, ON, OFF)")
set_property(CACHE EFT_WITH_ARROW PROPERTY STRINGS AUTO ON OFF)
set(EFT_HAVE_ARROW FALSE)

if(NOT EFT_WITH_ARROW STREQUAL "OFF")
  execute_process(
    COMMAND "${EFT_PYTHON}" -c
            "import os, pyarrow; d = os.path.dirname(pyarrow.__file__); print(pyarrow.__version__); print(d); print(pyarrow.get_include())"
    OUTPUT_VARIABLE eft_arrow_info
    ERROR_VARIABLE eft_arrow_error
    RESULT_VARIABLE eft_arrow_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(eft_arrow_rc EQUAL 0)
    string(REPLACE "\n" ";" eft_arrow_info "${eft_arrow_info}")
    list(GET eft_arrow_info 0 EFT_ARROW_VERSION)
    list(GET eft_arrow_info 1 eft_arrow_dir)
    list(GET eft_arrow_info 2 eft_arrow_include)
    # The wheel has only the versioned names (libarrow.so.2500), which the linker does not look for.
    file(GLOB eft_arrow_lib "${eft_arrow_dir}/libarrow.so.[0-9]*")
    file(GLOB eft_parquet_lib "${eft_arrow_dir}/libparquet.so.[0-9]*")
    list(FILTER eft_arrow_lib EXCLUDE REGEX "\\.so\\.[0-9]+\\.")
    list(FILTER eft_parquet_lib EXCLUDE REGEX "\\.so\\.[0-9]+\\.")
  endif()
  if(eft_arrow_rc EQUAL 0 AND eft_arrow_lib AND eft_parquet_lib AND EXISTS "${eft_arrow_include}/parquet/arrow/reader.h")
    add_library(eft::arrow SHARED IMPORTED)
    set_target_properties(eft::arrow PROPERTIES IMPORTED_LOCATION "${eft_arrow_lib}"
                          INTERFACE_INCLUDE_DIRECTORIES "${eft_arrow_include}"
                          INTERFACE_COMPILE_DEFINITIONS "EFT_HAVE_ARROW=1")
    add_library(eft::parquet SHARED IMPORTED)
    set_target_properties(eft::parquet PROPERTIES IMPORTED_LOCATION "${eft_parquet_lib}"
                          INTERFACE_LINK_LIBRARIES eft::arrow)
    set(EFT_HAVE_ARROW TRUE)
    message(STATUS "eft-train: Arrow C++ and Parquet ${EFT_ARROW_VERSION} from ${eft_arrow_dir}")
  elseif(EFT_WITH_ARROW STREQUAL "ON")
    message(FATAL_ERROR "EFT_WITH_ARROW=ON but '${EFT_PYTHON}' has no usable pyarrow (${eft_arrow_error}): "
                        "pip install the pyarrow that scripts/python-requirements.txt pins")
  else()
    message(STATUS "eft-train: without Parquet/Arrow datasets ('${EFT_PYTHON}' has no pyarrow)")
  endif()
endif()
