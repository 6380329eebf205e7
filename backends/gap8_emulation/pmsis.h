/* The subset of the PMSIS API (GAP8 / PULP cluster) that generated engines use: cluster DMA,
 * L3 RAM requests, team fork and barrier, core ids, the L1 placement macro. Declarations only, so the same
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

/* L3 RAM (HyperRAM) requests from the cluster: addresses are offsets in the RAM device. In the
 * emulation a device is a host buffer (the engine never looks inside). */
struct pi_device {
    uint8_t *mem;
    uint32_t size;
};

typedef struct pi_cl_ram_req_s {
    uint32_t id;
} pi_cl_ram_req_t;

/* size bytes between RAM address ram_addr and addr (L2); asynchronous until the wait */
void pi_cl_ram_read(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, pi_cl_ram_req_t *req);
void pi_cl_ram_write(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, pi_cl_ram_req_t *req);

/* size bytes in lines of length bytes: stride apart in the RAM, back to back in L2 */
void pi_cl_ram_read_2d(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, uint32_t stride,
                       uint32_t length, pi_cl_ram_req_t *req);
void pi_cl_ram_write_2d(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, uint32_t stride,
                        uint32_t length, pi_cl_ram_req_t *req);

void pi_cl_ram_read_wait(pi_cl_ram_req_t *req);
void pi_cl_ram_write_wait(pi_cl_ram_req_t *req);

#endif
