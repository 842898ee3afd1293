/*
 * tests/simde/rename.h — forced into every file of the test-only SIMDe build (tests/simde.cmake):
 * each external symbol of the AVX-512 and AVX-VNNI attention files gets the suffix _simde, so the
 * emulated copies link beside the library's own (which a test still runs where the CPU has them).
 * A symbol added to those files must be added here (the link then fails on a duplicate otherwise).
 */
#ifndef QMM_SIMDE_RENAME_H
#define QMM_SIMDE_RENAME_H
/* src/core/avx512/attention_avx512.c: the frame's AVX-512 softmax ukernels */
#define qmm_attn_softmax_f32__avx512 qmm_attn_softmax_f32__avx512_simde
#define qmm_attn_softmax_bf16__avx512 qmm_attn_softmax_bf16__avx512_simde
#define qmm_attn_softmax_u8__avx512 qmm_attn_softmax_u8__avx512_simde
/* src/engines/x86_avx512/avx512_f32_attn.c */
#define qmm_avx512_f32_attn qmm_avx512_f32_attn_simde
#define qmm_avx512_f32_attn_admit qmm_avx512_f32_attn_admit_simde
#define qmm_f32_attn_pack_kv__avx512f qmm_f32_attn_pack_kv__avx512f_simde
#define qmm_f32_attn_pack_q__avx512f qmm_f32_attn_pack_q__avx512f_simde
#define qmm_f32_attn_qk_ukernel_6x64__avx512f qmm_f32_attn_qk_ukernel_6x64__avx512f_simde
#define qmm_f32_attn_pv_ukernel_6x64__avx512f qmm_f32_attn_pv_ukernel_6x64__avx512f_simde
/* src/engines/x86_avx512/avx512_bf16_attn.c */
#define qmm_avx512_bf16_attn qmm_avx512_bf16_attn_simde
#define qmm_avx512_bf16_attn_admit qmm_avx512_bf16_attn_admit_simde
#define qmm_bf16_attn_pack_kv__avx512bf16 qmm_bf16_attn_pack_kv__avx512bf16_simde
#define qmm_bf16_attn_pack_q__avx512bf16 qmm_bf16_attn_pack_q__avx512bf16_simde
#define qmm_bf16_attn_qk_ukernel_6x64__avx512bf16 qmm_bf16_attn_qk_ukernel_6x64__avx512bf16_simde
#define qmm_bf16_attn_pv_ukernel_6x64__avx512bf16 qmm_bf16_attn_pv_ukernel_6x64__avx512bf16_simde
/* src/engines/x86_avx512/avx512_vnni_attn.c */
#define qmm_avx512_vnni_attn qmm_avx512_vnni_attn_simde
#define qmm_avx512_vnni_attn_admit qmm_avx512_vnni_attn_admit_simde
#define qmm_qs8_attn_pack_kv__avx512vnni qmm_qs8_attn_pack_kv__avx512vnni_simde
#define qmm_qs8_attn_pack_q__avx512vnni qmm_qs8_attn_pack_q__avx512vnni_simde
#define qmm_qs8_attn_qk_ukernel_6x64c4__avx512vnni qmm_qs8_attn_qk_ukernel_6x64c4__avx512vnni_simde
#define qmm_qu8_qs8_attn_pv_ukernel_6x64c4__avx512vnni qmm_qu8_qs8_attn_pv_ukernel_6x64c4__avx512vnni_simde
/* src/engines/x86_avx2/avx_vnni_attn.c (its softmax is the AVX2 frame's: the library's own) */
#define qmm_avx_vnni_attn qmm_avx_vnni_attn_simde
#define qmm_avx_vnni_attn_admit qmm_avx_vnni_attn_admit_simde
#define qmm_qs8_attn_pack_kv__avxvnni qmm_qs8_attn_pack_kv__avxvnni_simde
#define qmm_qs8_attn_pack_q__avxvnni qmm_qs8_attn_pack_q__avxvnni_simde
#define qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni qmm_qs8_attn_qk_ukernel_6x32c4__avxvnni_simde
#define qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni qmm_qu8_qs8_attn_pv_ukernel_6x16c4__avxvnni_simde
#endif
