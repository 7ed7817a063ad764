# CMake generated Testfile for 
# Source directory: /work/wt/actors/tests
# Build directory: /work/wt/actors/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[test_mailbox]=] "/work/wt/actors/build/tests/test_mailbox")
set_tests_properties([=[test_mailbox]=] PROPERTIES  ENVIRONMENT "MEMRA_MODEL=/root/.cache/memra/SmolLM2-135M-Instruct.Q4_1.gguf;MEMRA_SRC_DIR=/work/wt/actors;MEMRA_BIN_DIR=/work/wt/actors/build;MEMRA_BACKEND=cpu" LABELS "unit" SKIP_RETURN_CODE "77" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/wt/actors/tests/CMakeLists.txt;31;add_test;/work/wt/actors/tests/CMakeLists.txt;0;")
add_test([=[stress_mailbox]=] "/work/wt/actors/build/tests/stress_mailbox")
set_tests_properties([=[stress_mailbox]=] PROPERTIES  ENVIRONMENT "MEMRA_MODEL=/root/.cache/memra/SmolLM2-135M-Instruct.Q4_1.gguf;MEMRA_SRC_DIR=/work/wt/actors;MEMRA_BIN_DIR=/work/wt/actors/build;MEMRA_BACKEND=cpu" LABELS "stress" SKIP_RETURN_CODE "77" TIMEOUT "600" _BACKTRACE_TRIPLES "/work/wt/actors/tests/CMakeLists.txt;31;add_test;/work/wt/actors/tests/CMakeLists.txt;0;")
