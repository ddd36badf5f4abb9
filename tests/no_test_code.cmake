# Fails when libkiln holds test code (issue 11, "layers that show"): the ops' test cases
# (#ifdef KILN_OPTESTS) and the test helpers (optest.c, gradcheck.c) build into
# kiln_testing only. Run with -DNM=<nm> -DLIB=<libkiln.a> -DTESTING=<libkiln_testing.a>.
execute_process(COMMAND ${NM} ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]*(optest|kiln_gradcheck|kt_make|kt_rand|kt_scalar|kiln_op_tests)[^\n]*" bad "${syms}")
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "test code in ${LIB}:\n  ${bad}")
endif()
# ... and the test programs' library does have it (else the check above proves nothing).
execute_process(COMMAND ${NM} ${TESTING} OUTPUT_VARIABLE tsyms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT tsyms MATCHES "T kiln_optest_opset" OR NOT tsyms MATCHES "T kiln_gradcheck")
  message(FATAL_ERROR "${TESTING} lacks the test helpers (kiln_optest_opset, kiln_gradcheck)")
endif()
message(STATUS "no test code in ${LIB}")
