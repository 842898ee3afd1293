# test_attention again with the ISA capped at avx2: the plan then picks avx2_f32 (the engines
# above the cap refuse with the cap as their reason).
add_test(NAME test_attention_capped COMMAND test_attention)
set_tests_properties(test_attention_capped PROPERTIES ENVIRONMENT "QMM_MAX_ISA=avx2" TIMEOUT 900
                     SKIP_RETURN_CODE 77)
# test_attn_ukernels (registered with every tests/test_*.c) again with the ISA capped at avx2:
# the AVX-512 engines' ukernels and softmax ukernels are skipped, saying why; avx2_f32's run.
add_test(NAME test_attn_ukernels_capped COMMAND test_attn_ukernels)
set_tests_properties(test_attn_ukernels_capped PROPERTIES ENVIRONMENT "QMM_MAX_ISA=avx2" TIMEOUT 900
                     SKIP_RETURN_CODE 77)
