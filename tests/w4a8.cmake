# w4a8.cmake — test_w4a8 also runs amx_int8 on W4A8 weights through the tile emulator: it links
# the emulated build of the AMX engines (amx_emu.cmake).
if(TARGET test_w4a8 AND TARGET qmm_amx_emu)
  target_link_libraries(test_w4a8 PRIVATE qmm_amx_emu m)
endif()
