# fuzz.cmake — the fuzz targets (included by CMakeLists.txt).
# Always: fuzz_replay_<target> runs LLVMFuzzerTestOneInput over the committed corpus
# fuzz/corpus/{safetensors,checkpoint}/ (fuzz_engines: fuzz/corpus/engines/) as a normal CTest test
# (under ASan/UBSan in the sanitizer build).
# With -DQMM_FUZZ=ON and clang: libFuzzer executables fuzz_<target>, with the library
# instrumented for coverage (-fsanitize=fuzzer-no-link). See docs/FUZZING.md.
option(QMM_FUZZ "Build libFuzzer targets (needs clang)" OFF)
# fuzz_engines (differential: every int8 engine against ref) replays fuzz/corpus/engines/,
# fuzz_attention (qmm_attention on exact-extent buffers, every engine against ref) fuzz/corpus/attention/.
set(QMM_FUZZ_TARGETS safetensors checkpoint engines attention)
foreach(t ${QMM_FUZZ_TARGETS})
  add_executable(fuzz_replay_${t} fuzz/replay.c fuzz/fuzz_${t}.c)
  target_link_libraries(fuzz_replay_${t} PRIVATE qmm_static)
  target_include_directories(fuzz_replay_${t} PRIVATE src/core)
  if(t STREQUAL "engines" OR t STREQUAL "attention")
    set(dirs ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${t})
  else()
    set(dirs ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/safetensors ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/checkpoint)
  endif()
  add_test(NAME fuzz_corpus_${t} COMMAND fuzz_replay_${t} ${dirs})
  set_tests_properties(fuzz_corpus_${t} PROPERTIES TIMEOUT 300)
endforeach()
# fuzz_engines again with the emulated AMX engines (-DQMM_FUZZ_AMX_EMU: amx_int8 in every regime and
# amx_bf16, owned and borrowed weights; tests/amx_emu.cmake links qmm_amx_emu into the targets
# named fuzz_*_amx_emu): its corpus replay fails when some engine, layout or regime never ran.
add_executable(fuzz_replay_engines_amx_emu fuzz/replay.c fuzz/fuzz_engines.c)
target_compile_definitions(fuzz_replay_engines_amx_emu PRIVATE QMM_FUZZ_AMX_EMU=1 QMM_REPLAY_DONE=fuzz_amx_emu_done)
target_link_libraries(fuzz_replay_engines_amx_emu PRIVATE qmm_static)
target_include_directories(fuzz_replay_engines_amx_emu PRIVATE src/base src/core)
add_test(NAME fuzz_corpus_engines_amx_emu COMMAND fuzz_replay_engines_amx_emu ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/engines)
set_tests_properties(fuzz_corpus_engines_amx_emu PROPERTIES TIMEOUT 600)
if(QMM_FUZZ)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    target_compile_options(qmm_obj PRIVATE -fsanitize=fuzzer-no-link)
    foreach(t ${QMM_FUZZ_TARGETS})
      add_executable(fuzz_${t} fuzz/fuzz_${t}.c)
      target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
      target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
      target_link_libraries(fuzz_${t} PRIVATE qmm_static)
      target_include_directories(fuzz_${t} PRIVATE src/core)
    endforeach()
    add_executable(fuzz_engines_amx_emu fuzz/fuzz_engines.c)
    target_compile_definitions(fuzz_engines_amx_emu PRIVATE QMM_FUZZ_AMX_EMU=1)
    target_compile_options(fuzz_engines_amx_emu PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_engines_amx_emu PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_engines_amx_emu PRIVATE qmm_static)
    target_include_directories(fuzz_engines_amx_emu PRIVATE src/base src/core)
  else()
    message(WARNING "QMM_FUZZ=ON needs clang (CC=clang); building only the corpus replay tests")
  endif()
endif()
