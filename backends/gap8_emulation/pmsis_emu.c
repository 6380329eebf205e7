/* Host emulation of the PMSIS subset in pmsis.h, for testing generated GAP8 engines.
 *
 * Cores: pi_cl_team_fork runs entry on nb_cores threads (the caller is core 0, the others
 * are pthreads joined before it returns); pi_cl_team_barrier is a pthread barrier.
 * DMA and L3 RAM: a transfer is only queued when issued; it is performed (memcpy) when a wait reaches
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

/* ---- transfer queues: the cluster DMA and the L3 RAM, each performed in issue order ---- */

struct transfer {
    uint32_t id;
    uint8_t *dst;
    const uint8_t *src;
    uint32_t chunks, length, dst_stride, src_stride;
};

struct queue {
    pthread_mutex_t lock;
    struct transfer *items; /* issued, not yet performed, in issue order */
    size_t queued, capacity;
    uint32_t last_id;
};

static struct queue dma_queue = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct queue ram_queue = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint32_t enqueue(struct queue *q, struct transfer t)
{
    pthread_mutex_lock(&q->lock);
    if (q->queued == q->capacity) {
        q->capacity = q->capacity ? 2 * q->capacity : 64;
        q->items = realloc(q->items, q->capacity * sizeof *q->items);
        if (q->items == NULL) {
            fail("out of memory");
        }
    }
    t.id = ++q->last_id;
    q->items[q->queued++] = t;
    pthread_mutex_unlock(&q->lock);
    return t.id;
}

/* Perform every transfer up to and including id. */
static void perform(struct queue *q, uint32_t id)
{
    pthread_mutex_lock(&q->lock);
    size_t done = 0;
    while (done < q->queued && q->items[done].id <= id) {
        const struct transfer *t = &q->items[done++];
        for (uint32_t i = 0; i < t->chunks; ++i) {
            memcpy(t->dst + (size_t)i * t->dst_stride, t->src + (size_t)i * t->src_stride, t->length);
        }
    }
    memmove(q->items, q->items + done, (q->queued - done) * sizeof *q->items);
    q->queued -= done;
    pthread_mutex_unlock(&q->lock);
}

/* ---- cluster DMA ------------------------------------------------------------- */

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
    cmd->id = enqueue(&dma_queue, t);
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
    perform(&dma_queue, cmd->id);
}

/* ---- L3 RAM ------------------------------------------------------------------- */

static void ram_issue(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, uint32_t stride,
                      uint32_t length, int write, pi_cl_ram_req_t *req)
{
    if (device == NULL || device->mem == NULL) {
        fail("RAM request on a device that is not open");
    }
    if (length == 0 || size % length != 0) {
        fail("RAM request size is not a whole number of lines");
    }
    const uint32_t lines = size / length;
    if ((uint64_t)ram_addr + (uint64_t)(lines - 1) * stride + length > device->size) {
        fail("RAM request outside the device");
    }
    struct transfer t = {.chunks = lines, .length = length};
    if (write) {
        t.dst = device->mem + ram_addr, t.src = addr, t.dst_stride = stride, t.src_stride = length;
    } else {
        t.dst = addr, t.src = device->mem + ram_addr, t.dst_stride = length, t.src_stride = stride;
    }
    req->id = enqueue(&ram_queue, t);
}

void pi_cl_ram_read(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, pi_cl_ram_req_t *req)
{
    ram_issue(device, ram_addr, addr, size, size, size ? size : 1, 0, req);
}

void pi_cl_ram_write(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, pi_cl_ram_req_t *req)
{
    ram_issue(device, ram_addr, addr, size, size, size ? size : 1, 1, req);
}

void pi_cl_ram_read_2d(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, uint32_t stride,
                       uint32_t length, pi_cl_ram_req_t *req)
{
    ram_issue(device, ram_addr, addr, size, stride, length, 0, req);
}

void pi_cl_ram_write_2d(struct pi_device *device, uint32_t ram_addr, void *addr, uint32_t size, uint32_t stride,
                        uint32_t length, pi_cl_ram_req_t *req)
{
    ram_issue(device, ram_addr, addr, size, stride, length, 1, req);
}

void pi_cl_ram_read_wait(pi_cl_ram_req_t *req)
{
    perform(&ram_queue, req->id);
}

void pi_cl_ram_write_wait(pi_cl_ram_req_t *req)
{
    perform(&ram_queue, req->id);
}
