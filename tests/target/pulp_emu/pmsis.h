/* The subset of the PMSIS API (GAP8 / PULP cluster) that generated engines use: cluster DMA,
 * team fork and barrier, core ids, the L1 placement macro. Declarations only, so the same
 * header serves the host emulation (pmsis_emu.c: pthreads for the cores, memcpy for the DMA)
 * and a target-clean cross-compile. Not the GreenWaves SDK: addresses are uintptr_t here
 * (uint32_t on the 32-bit target, wide enough for host pointers in the emulation). */
#ifndef PMSIS_H
#define PMSIS_H

#include <stdint.h>

/* Data placement: the cluster's shared L1, the SoC's L2. One address space in the emulation. */
#define PI_L1
#define PI_L2

typedef enum {
    PI_CL_DMA_DIR_LOC2EXT = 0, /* L1 -> L2 */
    PI_CL_DMA_DIR_EXT2LOC = 1  /* L2 -> L1 */
} pi_cl_dma_dir_e;

typedef struct pi_cl_dma_cmd_s {
    uint32_t id; /* the last transfer issued into this command */
} pi_cl_dma_cmd_t;

/* size contiguous bytes between ext (L2) and loc (L1); asynchronous until pi_cl_dma_cmd_wait */
void pi_cl_dma_cmd(uintptr_t ext, uintptr_t loc, uint32_t size, pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t *cmd);

/* size bytes in chunks of length bytes: stride apart in L2, back to back in L1 */
void pi_cl_dma_cmd_2d(uintptr_t ext, uintptr_t loc, uint32_t size, uint32_t stride, uint32_t length,
                      pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t *cmd);

/* Wait until the command's last transfer, and every transfer issued before it, has landed. */
void pi_cl_dma_cmd_wait(pi_cl_dma_cmd_t *cmd);

/* The calling core's index in the cluster (0 = master) and the cluster's core count. */
int pi_core_id(void);
uint32_t pi_cl_cluster_nb_cores(void);

/* Run entry(arg) on nb_cores cores (the caller is core 0); returns when all have finished. */
void pi_cl_team_fork(int nb_cores, void (*entry)(void *), void *arg);

/* Wait until every core of the current team has reached the barrier. */
void pi_cl_team_barrier(void);

#endif
