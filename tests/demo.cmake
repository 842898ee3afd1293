# The main job (`qmm demo`) as a test: tiny block, table + JSON structure, engines, accuracy.
add_executable(cli_demo tests/cli_demo.c)
target_link_libraries(cli_demo PRIVATE qmm_testutil PkgConfig::JSONC)
add_test(NAME cli_demo COMMAND cli_demo $<TARGET_FILE:qmm>)
set_tests_properties(cli_demo PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
