# The int8 engines again with the ISA capped at avx_vnni: the pre-pass then runs its AVX2 row
# kernel (prepass_avx2.c) instead of the AVX-512 one, and the 256-bit engines (avx_vnni,
# avx2_int8) must still give the reference's bits end to end; the engines above the cap are
# skipped visibly.
add_test(NAME test_int8_engines_capped COMMAND test_int8_engines)
set_tests_properties(test_int8_engines_capped PROPERTIES ENVIRONMENT "QMM_MAX_ISA=avx_vnni" TIMEOUT 900
                     SKIP_RETURN_CODE 77)
