# The float engines again with the ISA capped at avx2: avx2_f32 then gets its activations from the
# AVX2 panel function (float_act_avx2.c) instead of the AVX-512 one, end to end.
add_test(NAME test_float_engines_capped COMMAND test_float_engines)
set_tests_properties(test_float_engines_capped PROPERTIES ENVIRONMENT "QMM_MAX_ISA=avx2" TIMEOUT 900
                     SKIP_RETURN_CODE 77)
