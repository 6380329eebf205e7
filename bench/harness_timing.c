/* Timing harness for generated engines, used only by bench/engine_vs_tflm.py
 * (not part of an engine). Links with the engine through inference_api.h.
 *
 *   engine_timing WARMUP RUNS < input bytes
 *
 * Reads every input once from stdin (inference_input_bytes(i) bytes each, in
 * input order) and keeps a private copy. Inputs live in the engine's arena and
 * may be overwritten by later layers, so the copy is written back before every
 * inference, outside the timed region. Runs WARMUP untimed inferences, then
 * RUNS inferences each timed with clock_gettime(CLOCK_MONOTONIC), and prints
 * on stdout:
 *
 *   median_ns <n>
 *   min_ns <n>
 *   runs <n>
 *   output <index> <hex bytes>     (one line per output, of the last run)
 */
#define _POSIX_C_SOURCE 199309L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inference_api.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void restore_inputs(void *const *saved)
{
    for (int i = 0; i < INFERENCE_NUM_INPUTS; ++i) {
        memcpy(inference_get_input(i), saved[i], inference_input_bytes(i));
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s WARMUP RUNS < inputs\n", argv[0]);
        return 1;
    }
    const long warmup = strtol(argv[1], NULL, 10);
    const long runs = strtol(argv[2], NULL, 10);
    if (warmup < 0 || runs < 1) {
        fprintf(stderr, "bad WARMUP or RUNS\n");
        return 1;
    }
    if (inference_init() != 0) {
        return 2;
    }
    void *saved[INFERENCE_NUM_INPUTS];
    for (int i = 0; i < INFERENCE_NUM_INPUTS; ++i) {
        const unsigned n = inference_input_bytes(i);
        saved[i] = malloc(n ? n : 1);
        if (saved[i] == NULL || fread(saved[i], 1, n, stdin) != n) {
            fprintf(stderr, "short input %d\n", i);
            return 3;
        }
    }
    for (long k = 0; k < warmup; ++k) {
        restore_inputs(saved);
        if (inference_run() != 0) {
            return 4;
        }
    }
    int64_t *times = malloc((size_t)runs * sizeof *times);
    if (times == NULL) {
        return 5;
    }
    for (long k = 0; k < runs; ++k) {
        restore_inputs(saved);
        const int64_t t0 = now_ns();
        const int status = inference_run();
        const int64_t t1 = now_ns();
        if (status != 0) {
            return 4;
        }
        times[k] = t1 - t0;
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_i64);
    const int64_t median = (runs % 2) ? times[runs / 2] : (times[runs / 2 - 1] + times[runs / 2]) / 2;
    printf("median_ns %lld\nmin_ns %lld\nruns %ld\n", (long long)median, (long long)times[0], runs);
    for (int o = 0; o < INFERENCE_NUM_OUTPUTS; ++o) {
        const unsigned char *p = inference_get_output(o);
        printf("output %d ", o);
        for (unsigned j = 0; j < inference_output_bytes(o); ++j) {
            printf("%02x", p[j]);
        }
        printf("\n");
    }
    free(times);
    for (int i = 0; i < INFERENCE_NUM_INPUTS; ++i) {
        free(saved[i]);
    }
    return 0;
}
