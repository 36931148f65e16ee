# eft_add_gtest(NAME <target> SOURCES <files...> LIBS <libs...> LABELS <labels...> [TIMEOUT <s>] [SERIAL])
# Builds one GoogleTest binary and registers each TEST as its own ctest entry carrying LABELS
# (unit, e2e, slurm, prometheus, gpu), so `ctest -L unit` selects them.
function(eft_add_gtest)
  cmake_parse_arguments(T "SERIAL" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  set(props LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "EFT_BUILD_DIR=${CMAKE_BINARY_DIR};EFT_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  if(T_SERIAL)
    list(APPEND props RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${T_NAME} PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
endfunction()
