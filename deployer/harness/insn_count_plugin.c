/* QEMU TCG plugin (QEMU 7.2, plugin API version 1): an executed-instruction
 * histogram, used to profile generated engines on the Cortex-M QEMU boards.
 *
 * Each translated block gets a 64-bit counter that QEMU increments inline on
 * every execution of the block. At exit the plugin writes one line per guest
 * instruction address that ran, "hexaddr count" (count in decimal), sorted by
 * address; blocks translated more than once, or overlapping, are summed. A
 * block left early (an exception) still counts all of its instructions.
 *
 * Build (needs no QEMU or glib headers; the few API items are declared here):
 *   gcc -shared -fPIC -O2 -o insn_count.so insn_count_plugin.c
 * Run (QEMU writes the file when the guest exits, also through semihosting):
 *   qemu-system-arm -M mps2-an386 -nographic -monitor none -serial none \
 *       -semihosting-config enable=on,target=native -kernel engine.elf \
 *       -plugin ./insn_count.so,out=histogram.txt
 * With mark=HEXADDR,marks=PATH it also writes, to PATH, the running total of
 * executed instructions each time the instruction at HEXADDR runs (one line
 * per time, in order): marks between a program's phases (an engine's layers)
 * give each phase's count. Every block adds its size to the total on entry, so
 * a mark is exact up to the instructions of the block it starts.
 * With blocks=PATH it also writes one line per translated block that ran:
 *   "index start end count taken fell n addr..." (hex addresses; end is the
 * address after the block's last instruction): how often execution went on at
 * an address other than end after the block ran (taken: its last instruction
 * branched) and how often at end (fell). A callback on every block execution
 * sees the block that ran before it. With mark= as well, segments=PATH gets,
 * at each mark, "mark k" and one line "index count taken fell" for every block
 * that ran since the mark before (the counts since then): each layer's blocks.
 * Written against QEMU 7.2's API (version 1); later QEMUs changed the
 * inline-counter calls.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the QEMU plugin API items used (include/qemu/qemu-plugin.h) ---- */
typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 = 0 };
#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *udata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS = 0 };
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            void (*cb)(unsigned int vcpu_index, void *userdata),
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
                                          void (*cb)(unsigned int vcpu_index, void *userdata),
                                          enum qemu_plugin_cb_flags flags, void *userdata);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);

QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;

/* one translated block: its execution count and instruction addresses; with
 * blocks=, where execution went on after it (taken: not to end) and its
 * counts at the last mark */
struct block {
    uint64_t count;
    uint64_t end, taken, fell;
    uint64_t mark_count, mark_taken, mark_fell;
    size_t n;
    uint64_t addr[];
};

struct hit {
    uint64_t addr, count;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct block **blocks;
static size_t n_blocks, cap_blocks;
static char *out_path;

/* the marks: a running total (the board has one vCPU) and its value at each mark */
static uint64_t total;
static uint64_t mark_addr;
static int marking;
static char *marks_path;
static uint64_t *marks;
static size_t n_marks, cap_marks;

/* blocks= and segments=: the block that ran last, and each mark's block counts */
static char *blocks_path, *segments_path;
static struct block *last_block;
static FILE *segments;

static void on_mark(unsigned int vcpu_index, void *udata)
{
    (void)vcpu_index, (void)udata;
    if (n_marks == cap_marks) {
        cap_marks = cap_marks ? 2 * cap_marks : 1024;
        if ((marks = realloc(marks, cap_marks * sizeof *marks)) == NULL) {
            abort();
        }
    }
    marks[n_marks++] = total;
    if (segments == NULL) {
        return;
    }
    /* the blocks that ran since the mark before, with their counts since then */
    pthread_mutex_lock(&lock);
    fprintf(segments, "mark %zu\n", n_marks - 1);
    for (size_t i = 0; i < n_blocks; ++i) {
        struct block *b = blocks[i];
        if (b->count != b->mark_count || b->taken != b->mark_taken || b->fell != b->mark_fell) {
            fprintf(segments, "%zu %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", i, b->count - b->mark_count,
                    b->taken - b->mark_taken, b->fell - b->mark_fell);
            b->mark_count = b->count, b->mark_taken = b->taken, b->mark_fell = b->fell;
        }
    }
    pthread_mutex_unlock(&lock);
}

/* The address after a Thumb instruction: 32-bit when its first halfword's top five bits are
 * 0b11101, 0b11110 or 0b11111. (qemu_plugin_insn_size is not used alone: at the end of a page
 * QEMU's Thumb translator peeks at the next halfword, and the bytes it reads count as the
 * instruction's.) */
static uint64_t thumb_end(const struct qemu_plugin_insn *insn, uint64_t vaddr)
{
    const uint8_t *bytes = qemu_plugin_insn_data(insn);
    if (qemu_plugin_insn_size(insn) < 2 || bytes == NULL) {
        return vaddr + qemu_plugin_insn_size(insn);
    }
    const unsigned top = (unsigned)bytes[1] >> 3;
    return vaddr + (top == 0x1d || top == 0x1e || top == 0x1f ? 4 : 2);
}

/* every execution of a block: where the block before it went (one vCPU) */
static void on_block(unsigned int vcpu_index, void *udata)
{
    (void)vcpu_index;
    struct block *b = udata;
    if (last_block != NULL) {
        if (b->addr[0] == last_block->end) {
            ++last_block->fell;
        } else {
            ++last_block->taken;
        }
    }
    last_block = b;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    struct block *b = calloc(1, sizeof *b + n * sizeof b->addr[0]);
    if (b == NULL) {
        abort();
    }
    b->n = n;
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        b->addr[i] = qemu_plugin_insn_vaddr(insn);
        b->end = thumb_end(insn, b->addr[i]);
        if (marking && b->addr[i] == mark_addr) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
        }
    }
    pthread_mutex_lock(&lock);
    if (n_blocks == cap_blocks) {
        cap_blocks = cap_blocks ? 2 * cap_blocks : 4096;
        if ((blocks = realloc(blocks, cap_blocks * sizeof *blocks)) == NULL) {
            abort();
        }
    }
    blocks[n_blocks++] = b;
    pthread_mutex_unlock(&lock);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->count, 1);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &total, n);
    if (blocks_path != NULL && n > 0) {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, b);
    }
}

static void write_blocks(void)
{
    FILE *f = fopen(blocks_path, "w");
    if (f == NULL) {
        fprintf(stderr, "insn_count: cannot write %s\n", blocks_path);
        abort();
    }
    for (size_t i = 0; i < n_blocks; ++i) {
        const struct block *b = blocks[i];
        if (b->count == 0) {
            continue;
        }
        fprintf(f, "%zu %" PRIx64 " %" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %zu", i, b->addr[0], b->end,
                b->count, b->taken, b->fell, b->n);
        for (size_t j = 0; j < b->n; ++j) {
            fprintf(f, " %" PRIx64, b->addr[j]);
        }
        fputc('\n', f);
    }
    fclose(f);
}

static int by_addr(const void *a, const void *b)
{
    const uint64_t x = ((const struct hit *)a)->addr, y = ((const struct hit *)b)->addr;
    return (x > y) - (x < y);
}

static void write_histogram(qemu_plugin_id_t id, void *udata)
{
    (void)id, (void)udata;
    pthread_mutex_lock(&lock);
    size_t n = 0;
    for (size_t i = 0; i < n_blocks; ++i) {
        n += blocks[i]->count ? blocks[i]->n : 0;
    }
    struct hit *hits = malloc((n ? n : 1) * sizeof *hits);
    FILE *f = fopen(out_path, "w");
    if (hits == NULL || f == NULL) {
        fprintf(stderr, "insn_count: cannot write %s\n", out_path);
        abort();
    }
    n = 0;
    for (size_t i = 0; i < n_blocks; ++i) {
        for (size_t j = 0; blocks[i]->count && j < blocks[i]->n; ++j) {
            hits[n++] = (struct hit){blocks[i]->addr[j], blocks[i]->count};
        }
    }
    qsort(hits, n, sizeof *hits, by_addr);
    for (size_t i = 0, j; i < n; i = j) {
        uint64_t sum = 0;
        for (j = i; j < n && hits[j].addr == hits[i].addr; ++j) {
            sum += hits[j].count;
        }
        fprintf(f, "%" PRIx64 " %" PRIu64 "\n", hits[i].addr, sum);
    }
    fclose(f);
    free(hits);
    if (marking) {
        FILE *m = fopen(marks_path, "w");
        if (m == NULL) {
            fprintf(stderr, "insn_count: cannot write %s\n", marks_path);
            abort();
        }
        for (size_t i = 0; i < n_marks; ++i) {
            fprintf(m, "%" PRIu64 "\n", marks[i]);
        }
        fclose(m);
    }
    if (blocks_path != NULL) {
        write_blocks();
    }
    if (segments != NULL) {
        fclose(segments);
        segments = NULL;
    }
    pthread_mutex_unlock(&lock);
}

/* a copy of an option's value: QEMU frees argv after install */
static char *value(const char *arg)
{
    const size_t len = strlen(arg) + 1;
    char *copy = malloc(len);
    if (copy != NULL) {
        memcpy(copy, arg, len);
    }
    return copy;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const void *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = value(argv[i] + 4);
        } else if (strncmp(argv[i], "marks=", 6) == 0) {
            marks_path = value(argv[i] + 6);
        } else if (strncmp(argv[i], "blocks=", 7) == 0) {
            blocks_path = value(argv[i] + 7);
        } else if (strncmp(argv[i], "segments=", 9) == 0) {
            segments_path = value(argv[i] + 9);
        } else if (strncmp(argv[i], "mark=", 5) == 0) {
            mark_addr = strtoull(argv[i] + 5, NULL, 16);
            marking = 1;
        }
    }
    if (marking && marks_path == NULL) {
        fprintf(stderr, "insn_count: mark= needs marks=PATH\n");
        return -1;
    }
    if (segments_path != NULL && (!marking || blocks_path == NULL)) {
        fprintf(stderr, "insn_count: segments= needs mark= and blocks=\n");
        return -1;
    }
    if (segments_path != NULL && (segments = fopen(segments_path, "w")) == NULL) {
        fprintf(stderr, "insn_count: cannot write %s\n", segments_path);
        return -1;
    }
    if (out_path == NULL) {
        fprintf(stderr, "insn_count: usage -plugin insn_count.so,out=PATH\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, write_histogram, NULL);
    return 0;
}
