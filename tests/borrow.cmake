# borrow.cmake — test_borrow also runs amx_int8 on borrowed weights through the tile emulator:
# it links the emulated build of the AMX engines (amx_emu.cmake).
if(TARGET test_borrow AND TARGET qmm_amx_emu)
  target_link_libraries(test_borrow PRIVATE qmm_amx_emu m)
endif()
