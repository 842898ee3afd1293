# w4a8.cmake — test_w4a8 also runs amx_int8 on W4A8 weights through the tile emulator: it links
# the emulated build of the AMX engines (amx_emu.cmake). Two more runs of it: test_w4a8_no_vbmi
# with the AVX512-VBMI lookups off (QMM_W4A8_VBMI=0: on a CPU with VBMI, the other 6-bit path),
# test_w4a8_capped at QMM_MAX_ISA=avx2 (the AVX2 decoder under every engine of that level).
if(TARGET test_w4a8 AND TARGET qmm_amx_emu)
  target_link_libraries(test_w4a8 PRIVATE qmm_amx_emu m)
endif()
if(TARGET test_w4a8)
  add_test(NAME test_w4a8_no_vbmi COMMAND test_w4a8)
  set_tests_properties(test_w4a8_no_vbmi PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 ENVIRONMENT "QMM_W4A8_VBMI=0")
  add_test(NAME test_w4a8_capped COMMAND test_w4a8)
  set_tests_properties(test_w4a8_capped PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 ENVIRONMENT "QMM_MAX_ISA=avx2")
endif()
# The W4A8 kernel tester again with the ISA capped at avx_vnni, as test_int8_engines_capped: the
# 256-bit engines' kernels run, the engines above the cap are skipped visibly.
if(TARGET test_w4a8_ukernels)
  add_test(NAME test_w4a8_ukernels_capped COMMAND test_w4a8_ukernels)
  set_tests_properties(test_w4a8_ukernels_capped PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                       ENVIRONMENT "QMM_MAX_ISA=avx_vnni")
endif()
