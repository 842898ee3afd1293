# simde.cmake — the AVX-512 and AVX-VNNI attention engines compiled a second time for AVX2 with
# SIMDe's portable intrinsics (libsimde-dev; tests/simde/immintrin.h, every external symbol
# suffixed _simde by tests/simde/rename.h), linked into test_attn_ukernels and test_attention,
# which then check those kernels on any CPU against the same references and bounds as the real
# ones (bit for bit where the tests are: integer sums, f32 operations are the same IEEE
# operations). Test-only, like amx_emu.cmake: never in the dispatch table. Without SIMDe the
# tests say so and skip.
include(CheckIncludeFile)
check_include_file(simde/x86/avx512.h QMM_HAVE_SIMDE)
if(QMM_HAVE_SIMDE AND TARGET test_attn_ukernels AND TARGET test_attention)
  # one generated file per source, #including it: the sources' own COMPILE_FLAGS (the AVX-512
  # flags, a property of the file in every target) stay off this copy
  set(simde_src "")
  foreach(f src/core/avx512/attention_avx512.c src/engines/x86_avx512/avx512_f32_attn.c
            src/engines/x86_avx512/avx512_bf16_attn.c src/engines/x86_avx512/avx512_vnni_attn.c
            src/engines/x86_avx2/avx_vnni_attn.c)
    get_filename_component(n ${f} NAME)
    set(w ${CMAKE_CURRENT_BINARY_DIR}/simde/${n})
    file(WRITE ${w}.new "#include \"${CMAKE_CURRENT_SOURCE_DIR}/${f}\"\n")
    configure_file(${w}.new ${w} COPYONLY)
    list(APPEND simde_src ${w})
  endforeach()
  add_library(qmm_simde_attn OBJECT ${simde_src})
  target_compile_definitions(qmm_simde_attn PRIVATE QMM_SIMDE=1 __AVXVNNI__=1)
  # SIMDe's headers are not warning-free under the project's flags: this copy only runs tests
  # (the library's own objects of the same files keep every warning); and its integer lanes wrap
  # as the instructions' do (signed arithmetic in C), which UBSan would report: the copy keeps
  # ASan, not UBSan
  target_compile_options(qmm_simde_attn PRIVATE -mavx2 -mfma -mf16c -w -Wno-psabi -fno-sanitize=undefined
                         -include ${CMAKE_CURRENT_SOURCE_DIR}/tests/simde/rename.h)
  target_include_directories(qmm_simde_attn BEFORE PRIVATE tests/simde)
  target_include_directories(qmm_simde_attn PRIVATE include src/base src/core src/dispatch
                             src/engines/x86_avx512 src/engines/x86_avx2)
  foreach(t test_attn_ukernels test_attention)
    target_link_libraries(${t} PRIVATE qmm_simde_attn m)
    target_compile_definitions(${t} PRIVATE QMM_TEST_SIMDE=1)
  endforeach()
endif()
