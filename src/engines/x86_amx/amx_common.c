/*
 * amx_common.c — what the two AMX engines share besides the header: the blocking in force
 * (amx_blocking.h; QMM_AMX_BLOCKING read once per process) and the per-thread tile configuration
 * (see amx_kernel.h for the tile register plan).
 *
 * The tile configuration lives in thread-local storage (never on the stack: gcc 12 has
 * eliminated the stores to a stack-local LDTILECFG operand), is loaded only when the panel
 * shape changes, and is released with TILERELEASE when a thread's work ends (amx_int8: the int8
 * driver's end hook after the thread's last task; amx_bf16: the float driver's end hook after
 * the thread's last task of a pool run), so an idle worker holds no tile state. Verified as
 * amx_kernel.h says.
 */
#include "amx_kernel.h"

#include <stdlib.h>
#include <string.h>

#ifdef QMM_AMX_EMULATE
qmm_amx_blocking qmm_amx_blocking_emu = {QMM_AMX_KC, QMM_AMX_NC, QMM_AMX_MC, QMM_AMX_SMALL_M, QMM_AMX_PANEL_A_BYTES,
                                         QMM_AMX_INT8_MIN_M, QMM_AMX_INT8_BORROWED_MIN_M};
int qmm_amx_last_regime_emu = -1;

qmm_amx_blocking QMM_AMX_SYM(qmm_amx_blocking_now)(void) { return qmm_amx_blocking_emu; }
#else
static qmm_amx_blocking g_blocking;
static atomic_int g_blocking_state; /* 0 unread, 1 being read, 2 ready */

qmm_amx_blocking QMM_AMX_SYM(qmm_amx_blocking_now)(void) {
    if (atomic_load_explicit(&g_blocking_state, memory_order_acquire) == 2) return g_blocking;
    int expect = 0;
    if (atomic_compare_exchange_strong(&g_blocking_state, &expect, 1)) {
        qmm_amx_blocking b = qmm_amx_blocking_default();
        (void)qmm_amx_blocking_parse(getenv("QMM_AMX_BLOCKING"), &b); /* invalid: the defaults stay */
        g_blocking = b;
        atomic_store_explicit(&g_blocking_state, 2, memory_order_release);
        return b;
    }
    while (atomic_load_explicit(&g_blocking_state, memory_order_acquire) != 2) {
    }
    return g_blocking;
}
#endif

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
