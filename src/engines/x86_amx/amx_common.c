/*
 * amx_common.c — what the two AMX engines share besides the header: the per-thread tile
 * configuration (see amx_kernel.h for the tile register plan). The blocking in force and the
 * descriptors per call class: amx_regime.c.
 *
 * The tile configuration lives in thread-local storage (never on the stack: gcc 12 has
 * eliminated the stores to a stack-local LDTILECFG operand), is loaded only when the panel
 * shape changes, and is released with TILERELEASE when a thread's work ends (amx_int8: the int8
 * driver's end hook after the thread's last task; amx_bf16: the float driver's end hook after
 * the thread's last task of a pool run), so an idle worker holds no tile state. Verified as
 * amx_kernel.h says.
 */
#include "amx_kernel.h"

#include <string.h>

#ifdef QMM_AMX_KERNELS

static _Alignas(64) _Thread_local qmm_amx_cfg t_cfg;
static _Thread_local int t_key = -1; /* r0 * 17 + r1 of the loaded config, -1: released */

void QMM_AMX_SYM(qmm_amx_tiles_config)(int r0, int r1) {
    int key = r0 * 17 + r1;
    if (key == t_key) return;
    memset(&t_cfg, 0, sizeof t_cfg);
    t_cfg.palette = 1;
    /* C00, C01, A0: r0 rows; B0, B1: 16 rows (K = 64 bytes per A row = 16 dword rows) */
    const int c_rows[8] = {r0, r0, r1, r1, r0, r1, 16, 16};
    for (int i = 0; i < 8; i++) {
        t_cfg.rows[i] = (uint8_t)c_rows[i];
        t_cfg.colsb[i] = c_rows[i] ? 64 : 0;
    }
    QMM_TILE_LOADCONFIG(&t_cfg);
    t_key = key;
}

void QMM_AMX_SYM(qmm_amx_tiles_release)(void) {
    if (t_key < 0) return;
    QMM_TILE_RELEASE();
    t_key = -1;
}

#endif /* QMM_AMX_KERNELS */
