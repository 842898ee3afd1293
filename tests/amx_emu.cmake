# amx_emu.cmake — the emulated build of the AMX engines, linked into tests/test_amx_emulated.
# The engine sources of src/engines/x86_amx/ are compiled a second time with -DQMM_AMX_EMULATE
# (every tile instruction → the software model of amx_emu.c, every external symbol → *_emu)
# and the AVX-512 flags of the epilogue/widening code. These copies are test-only: they are
# never in the dispatch table, and the library's real AMX engines stay as they are.
if(TARGET test_amx_emulated)
  add_library(qmm_amx_emu OBJECT
    src/engines/x86_amx/amx_int8.c
    src/engines/x86_amx/amx_ladder.c
    src/engines/x86_amx/amx_bf16.c
    src/engines/x86_amx/amx_bf16_attn.c
    src/engines/x86_amx/amx_int8_attn.c
    src/engines/x86_amx/amx_common.c
    src/engines/x86_amx/amx_regime.c
    src/engines/x86_amx/amx_emu.c)
  target_compile_definitions(qmm_amx_emu PRIVATE QMM_AMX_EMULATE=1)
  separate_arguments(QMM_AMX_EMU_FLAGS UNIX_COMMAND "${QMM_FLAGS_AVX512}")
  target_compile_options(qmm_amx_emu PRIVATE ${QMM_AMX_EMU_FLAGS})
  target_include_directories(qmm_amx_emu PRIVATE include src/base src/core)
  target_link_libraries(test_amx_emulated PRIVATE qmm_amx_emu m)
  if(TARGET test_attention) # amx_bf16's attention, emulated, beside the other attention engines
    target_link_libraries(test_attention PRIVATE qmm_amx_emu m)
    target_compile_definitions(test_attention PRIVATE QMM_TEST_AMX_EMU=1)
  endif()
  if(TARGET test_attn_ukernels) # amx_bf16's attention ukernels (.attn), emulated
    target_link_libraries(test_attn_ukernels PRIVATE qmm_amx_emu m)
    target_compile_definitions(test_attn_ukernels PRIVATE QMM_TEST_AMX_EMU=1)
  endif()
  if(TARGET test_int8_ukernels) # amx_int8's descriptor (.i8), emulated, beside the other int8 engines
    target_link_libraries(test_int8_ukernels PRIVATE qmm_amx_emu m)
    target_compile_definitions(test_int8_ukernels PRIVATE QMM_TEST_AMX_EMU=1)
  endif()
  foreach(t fuzz_replay_engines_amx_emu fuzz_engines_amx_emu) # fuzz/fuzz.cmake: fuzz_engines, emulated AMX
    if(TARGET ${t})
      target_link_libraries(${t} PRIVATE qmm_amx_emu m)
    endif()
  endforeach()
endif()
