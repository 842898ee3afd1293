# cli.cmake — CLI tests of the checkpoint commands (included by CMakeLists.txt after the
# tests/test_*.c tests exist). test_checkpoint_cli drives the built `qmm` through QMM_CLI;
# the short ones below check exit statuses of the binary alone.
if(TEST test_checkpoint_cli)
  set_tests_properties(test_checkpoint_cli PROPERTIES ENVIRONMENT "QMM_CLI=$<TARGET_FILE:qmm>")
endif()

add_test(NAME cli_inspect_missing_file COMMAND qmm inspect ${CMAKE_BINARY_DIR}/no-such-file.safetensors)
set_tests_properties(cli_inspect_missing_file PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_quantize_usage COMMAND qmm quantize --help)
add_test(NAME cli_run_usage COMMAND qmm run)
set_tests_properties(cli_run_usage PROPERTIES WILL_FAIL TRUE)
# the AMX ladder (bench/ladder.c): on an AMX machine a quick run whose rungs must compute the right
# C (exit 1 otherwise); elsewhere the line naming what is missing, exit 0 — so neither path rots
add_test(NAME bench_amx_ladder COMMAND qmm bench --amx-ladder --quick)
set_tests_properties(bench_amx_ladder PROPERTIES PASS_REGULAR_EXPRESSION "needs AMX .*amx_int8 is not available|rungs: src/engines"
                     FAIL_REGULAR_EXPRESSION "amx ladder FAILED" TIMEOUT 300)
