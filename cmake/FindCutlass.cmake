# Locates the CUTLASS/CuTe headers. Order: -DFLASHCORE_CUTLASS_DIR=...,
# the FLASHCORE_CUTLASS_DIR environment variable, then the pinned PyPI package
# nvidia-cutlass (its wheel ships the headers under cutlass_library/source/include).
# CUTLASS is never copied into this repository.
if(NOT FLASHCORE_CUTLASS_DIR AND DEFINED ENV{FLASHCORE_CUTLASS_DIR})
  set(FLASHCORE_CUTLASS_DIR "$ENV{FLASHCORE_CUTLASS_DIR}")
endif()
if(NOT FLASHCORE_CUTLASS_DIR)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
    OUTPUT_VARIABLE _fc_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _fc_rc ERROR_QUIET)
  if(_fc_rc EQUAL 0)
    set(FLASHCORE_CUTLASS_DIR "${_fc_cutlass}")
  endif()
endif()
if(NOT FLASHCORE_CUTLASS_DIR OR NOT EXISTS "${FLASHCORE_CUTLASS_DIR}/cute/tensor.hpp")
  message(FATAL_ERROR
    "CUTLASS headers not found. Install the pinned package (pip install nvidia-cutlass==4.2.0.0) "
    "or pass -DFLASHCORE_CUTLASS_DIR=/path/with/cute_and_cutlass. Looked at: '${FLASHCORE_CUTLASS_DIR}'")
endif()
set(FLASHCORE_CUTLASS_INCLUDE "${FLASHCORE_CUTLASS_DIR}")
message(STATUS "flashcore: CUTLASS headers at ${FLASHCORE_CUTLASS_INCLUDE}")
