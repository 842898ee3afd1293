# isa.cmake — each ISA-specific object is compiled with exactly its engine's -m flags and holds no
# instruction above them (tests/isa/check_isa.sh: compile_commands.json + objdump -d). Skipped,
# visibly, without objdump.
add_test(NAME isa_objects COMMAND sh ${CMAKE_SOURCE_DIR}/tests/isa/check_isa.sh ${CMAKE_BINARY_DIR})
set_tests_properties(isa_objects PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# the checker itself: planted instructions above an engine's ISA must be caught
add_test(NAME isa_objects_selftest
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/isa/selftest.sh ${CMAKE_BINARY_DIR} ${CMAKE_C_COMPILER})
set_tests_properties(isa_objects_selftest PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# the streaming rows kernels hold their software prefetches (tests/isa/check_prefetch.sh)
add_test(NAME isa_prefetch COMMAND sh ${CMAKE_SOURCE_DIR}/tests/isa/check_prefetch.sh ${CMAKE_BINARY_DIR})
set_tests_properties(isa_prefetch PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
