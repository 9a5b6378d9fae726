# test-time.cmake — how long a test may run. Every test states its TIMEOUT as the time it needs,
# with a margin, in a plain build on an idle machine; this file multiplies it by the one factor
# computed here, and hands the same factor to the test as GPUPOOL_TEST_TIME_SCALE, so that the
# programs' own waits for something to happen (tests/e2e/e2e.h: e2e_time_scale) stretch with it.
# Never a shorter limit than the one written: a slow build or a busy machine must not fail a test
# for being slow, and a test's own claims about time hold for a plain build on an idle machine.
#
#   GP_TEST_TIME_SCALE = the build's factor x the machine's factor
#     the build: 1 plain, 3 with ASan+UBSan, 6 with TSan (how much longer each sanitizer makes
#                the slowest e2e and unit tests: docs/RELIABILITY.md, "CI time")
#     valgrind_* tests (label valgrind): 10 instead of the build's factor
#     the machine: the environment's GPUPOOL_TEST_TIME_SCALE at configure time (a positive whole
#                  number, default 1), for a machine slower or busier than that one
#
# A directory with tests calls gp_test_directory() once before its first test: its tests are
# scaled when the directory has been read (their properties can be set only from there).

set(GP_TEST_BUILD_SCALE 1)
if(GPUPOOL_SANITIZE MATCHES "thread")
  set(GP_TEST_BUILD_SCALE 6)
elseif(GPUPOOL_SANITIZE MATCHES "address")
  set(GP_TEST_BUILD_SCALE 3)
endif()
set(GP_TEST_VALGRIND_SCALE 10)
set(GP_TEST_MACHINE_SCALE 1)
if(DEFINED ENV{GPUPOOL_TEST_TIME_SCALE} AND NOT "$ENV{GPUPOOL_TEST_TIME_SCALE}" STREQUAL "")
  set(GP_TEST_MACHINE_SCALE "$ENV{GPUPOOL_TEST_TIME_SCALE}")
  if(NOT GP_TEST_MACHINE_SCALE MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "GPUPOOL_TEST_TIME_SCALE must be a positive whole number (a factor on "
                        "every test's time limit), not '${GP_TEST_MACHINE_SCALE}'")
  endif()
endif()
math(EXPR GP_TEST_TIME_SCALE "${GP_TEST_BUILD_SCALE} * ${GP_TEST_MACHINE_SCALE}")
math(EXPR GP_TEST_VALGRIND_TIME_SCALE "${GP_TEST_VALGRIND_SCALE} * ${GP_TEST_MACHINE_SCALE}")
message(STATUS "test time scale: ${GP_TEST_TIME_SCALE} (build ${GP_TEST_BUILD_SCALE}, "
               "machine ${GP_TEST_MACHINE_SCALE}: GPUPOOL_TEST_TIME_SCALE); valgrind tests ${GP_TEST_VALGRIND_TIME_SCALE}")

# A test written without a TIMEOUT gets this one (s, before scaling), not ctest's 1500 s default.
set(GP_TEST_DEFAULT_TIMEOUT 60)

function(gp_test_scale_directory)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    get_test_property(${t} TIMEOUT timeout)
    if(NOT timeout)
      set(timeout ${GP_TEST_DEFAULT_TIMEOUT})
    endif()
    get_test_property(${t} LABELS labels)
    set(scale ${GP_TEST_TIME_SCALE})
    if(labels AND "valgrind" IN_LIST labels)
      set(scale ${GP_TEST_VALGRIND_TIME_SCALE})
    endif()
    math(EXPR timeout "${timeout} * ${scale}")
    set_tests_properties(${t} PROPERTIES TIMEOUT ${timeout})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "GPUPOOL_TEST_TIME_SCALE=${scale}")
  endforeach()
endfunction()

macro(gp_test_directory)
  cmake_language(DEFER CALL gp_test_scale_directory)
endmacro()
