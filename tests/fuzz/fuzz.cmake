# Included by tests/CMakeLists.txt: builds tests/fuzz (a clang project) as an ExternalProject
# into build/tests/fuzz/, and registers the 60-second fuzz run `make test` makes. Without clang
# the test is reported as skipped (exit 77), not failed.
option(FRUGAL_FUZZ "build the libFuzzer harness (needs clang) and its ctest run" ON)
if(NOT FRUGAL_FUZZ)
  return()
endif()
find_program(FG_CLANG clang)
find_program(FG_CLANGXX clang++)
set(FG_FUZZ_DIR ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
set(FG_FUZZ_SECONDS 60 CACHE STRING "seconds the ctest fuzz run lasts")
if(FG_CLANG AND FG_CLANGXX)
  include(ExternalProject)
  # BUILD_ALWAYS: the inner build is incremental, and must see edits to src/.
  ExternalProject_Add(fuzz_harness
    SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz
    BINARY_DIR ${FG_FUZZ_DIR}
    CMAKE_ARGS -DCMAKE_C_COMPILER=${FG_CLANG} -DCMAKE_CXX_COMPILER=${FG_CLANGXX}
      -DCMAKE_BUILD_TYPE=RelWithDebInfo
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON)
  add_test(NAME fuzz COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${FG_FUZZ_DIR}/fuzz_ops
    ${FG_FUZZ_SECONDS} ${FG_FUZZ_DIR}/work)
else()
  add_test(NAME fuzz COMMAND sh -c "echo 'fuzz: clang not found (apt-get install clang): skipped'; exit 77")
endif()
set_tests_properties(fuzz PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
