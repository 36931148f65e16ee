# eft_add_gtest(NAME <target> SOURCES <files...> LIBS <libs...> LABELS <labels...> [TIMEOUT <s>])
# Builds one GoogleTest binary and registers each TEST as its own ctest entry carrying LABELS
# (unit, e2e, slurm, prometheus, gpu), so `ctest -L unit` selects them. They run side by side under
# `ctest -j`: each e2e cluster has its own directory, ports and MASTER_PORT range (tests/e2e/cluster.cc).
# Tests that must run alone (they time recovery) are plain add_test entries with RUN_SERIAL.
# One ENVIRONMENT entry only: gtest_discover_tests writes a list-valued property unescaped, so a
# second entry would become a property name (tests that need the source tree get it as a compile
# definition, EFT_SOURCE_DIR_DEFAULT).
function(eft_add_gtest)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  set(props LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "EFT_BUILD_DIR=${CMAKE_BINARY_DIR}")
  gtest_discover_tests(${T_NAME} PROPERTIES ${props} DISCOVERY_TIMEOUT 60)
endfunction()
