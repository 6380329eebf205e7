/* Host emulation of the PMSIS subset in pmsis.h, for testing generated GAP8 engines.
 *
 * Cores: pi_cl_team_fork runs entry on nb_cores threads (the caller is core 0, the others
 * are pthreads joined before it returns); pi_cl_team_barrier is a pthread barrier.
 * DMA: a transfer is only queued when issued; it is performed (memcpy) when a wait reaches
 * it, in issue order, as the cluster DMA completes them. A schedule that reads a tile
 * before waiting for it therefore reads stale bytes and fails the bit-exact comparison,
 * and ThreadSanitizer sees every copy on the thread that waited for it. */
#define _POSIX_C_SOURCE 200809L

#include "pmsis.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLUSTER_CORES 8

/* ---- cores ------------------------------------------------------------------ */

static __thread int core_id; /* 0 on the thread that calls inference_run */
static pthread_barrier_t team_barrier;
static int team_size = 1;

struct worker {
    pthread_t thread;
    int id;
    void (*entry)(void *);
    void *arg;
};

static void fail(const char *what)
{
    fprintf(stderr, "pmsis_emu: %s\n", what);
    abort();
}

int pi_core_id(void)
{
    return core_id;
}

uint32_t pi_cl_cluster_nb_cores(void)
{
    return CLUSTER_CORES;
}

static void *worker_main(void *p)
{
    struct worker *w = p;
    core_id = w->id;
    w->entry(w->arg);
    return NULL;
}

void pi_cl_team_fork(int nb_cores, void (*entry)(void *), void *arg)
{
    struct worker workers[CLUSTER_CORES];
    if (nb_cores <= 0) {
        nb_cores = CLUSTER_CORES;
    }
    if (nb_cores > CLUSTER_CORES || core_id != 0 || team_size != 1) {
        fail("pi_cl_team_fork: nested fork, or more cores than the cluster has");
    }
    team_size = nb_cores;
    if (pthread_barrier_init(&team_barrier, NULL, (unsigned)nb_cores) != 0) {
        fail("pthread_barrier_init failed");
    }
    for (int i = 1; i < nb_cores; ++i) {
        workers[i] = (struct worker){.id = i, .entry = entry, .arg = arg};
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) {
            fail("pthread_create failed");
        }
    }
    entry(arg);
    for (int i = 1; i < nb_cores; ++i) {
        pthread_join(workers[i].thread, NULL);
    }
    pthread_barrier_destroy(&team_barrier);
    team_size = 1;
}

void pi_cl_team_barrier(void)
{
    if (team_size > 1) {
        pthread_barrier_wait(&team_barrier);
    }
}

/* ---- cluster DMA ------------------------------------------------------------- */

struct transfer {
    uint32_t id;
    uint8_t *dst;
    const uint8_t *src;
    uint32_t chunks, length, dst_stride, src_stride;
};

static pthread_mutex_t dma_lock = PTHREAD_MUTEX_INITIALIZER;
static struct transfer *queue; /* issued, not yet performed, in issue order */
static size_t queued, capacity;
static uint32_t last_id;

static void issue(uintptr_t ext, uintptr_t loc, uint32_t size, uint32_t stride, uint32_t length,
                  pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t *cmd)
{
    if (length == 0 || size % length != 0) {
        fail("DMA transfer size is not a whole number of chunks");
    }
    struct transfer t = {.chunks = size / length, .length = length};
    if (dir == PI_CL_DMA_DIR_EXT2LOC) {
        t.dst = (uint8_t *)loc, t.src = (const uint8_t *)ext, t.dst_stride = length, t.src_stride = stride;
    } else {
        t.dst = (uint8_t *)ext, t.src = (const uint8_t *)loc, t.dst_stride = stride, t.src_stride = length;
    }
    pthread_mutex_lock(&dma_lock);
    if (queued == capacity) {
        capacity = capacity ? 2 * capacity : 64;
        queue = realloc(queue, capacity * sizeof *queue);
        if (queue == NULL) {
            fail("out of memory");
        }
    }
    t.id = cmd->id = ++last_id;
    queue[queued++] = t;
    pthread_mutex_unlock(&dma_lock);
}

void pi_cl_dma_cmd(uintptr_t ext, uintptr_t loc, uint32_t size, pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t *cmd)
{
    issue(ext, loc, size, size, size ? size : 1, dir, cmd);
}

void pi_cl_dma_cmd_2d(uintptr_t ext, uintptr_t loc, uint32_t size, uint32_t stride, uint32_t length,
                      pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t *cmd)
{
    issue(ext, loc, size, stride, length, dir, cmd);
}

void pi_cl_dma_cmd_wait(pi_cl_dma_cmd_t *cmd)
{
    pthread_mutex_lock(&dma_lock);
    size_t done = 0;
    while (done < queued && queue[done].id <= cmd->id) {
        const struct transfer *t = &queue[done++];
        for (uint32_t i = 0; i < t->chunks; ++i) {
            memcpy(t->dst + (size_t)i * t->dst_stride, t->src + (size_t)i * t->src_stride, t->length);
        }
    }
    memmove(queue, queue + done, (queued - done) * sizeof *queue);
    queued -= done;
    pthread_mutex_unlock(&dma_lock);
}
