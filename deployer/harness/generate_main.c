/* Greedy generation harness for language-model engines (not part of an engine): reads int32
 * values from stdin (the prompt's length n, its n token ids, the number of tokens to generate,
 * the end-of-text id or -1), runs the prompt, then feeds back the most likely token each step;
 * writes the generated ids to stdout as int32. Exit status: 0, 3 bad input, 4 inference_run failed. */
#include <stdint.h>
#include <stdio.h>

#include "inference_api.h"

static int read_i32(int32_t *v)
{
    return fread(v, sizeof *v, 1, stdin) == 1;
}

int main(void)
{
    int32_t n, want, eos, token = 0;
    if (!read_i32(&n) || n < 1 || inference_init() != 0) {
        return 3;
    }
    for (int32_t i = 0; i < n; ++i) {
        if (!read_i32(&token)) {
            return 3;
        }
        *(int32_t *)inference_get_input(0) = token;
        if (inference_run() != 0) {
            return 4;
        }
    }
    if (!read_i32(&want) || !read_i32(&eos)) {
        return 3;
    }
    for (int32_t k = 0; k < want; ++k) {
#ifdef INFERENCE_TOP_K
        int32_t best = *(const int32_t *)inference_get_output(0); /* the engine selected it */
#else
        const float *logits = (const float *)inference_get_output(0);
        int32_t best = 0;
        for (int32_t t = 1; t < INFERENCE_VOCAB; ++t) {
            best = logits[t] > logits[best] ? t : best;
        }
#endif
        fwrite(&best, sizeof best, 1, stdout);
        fflush(stdout);
        if (best == eos || k + 1 == want || inference_position() >= INFERENCE_POSITIONS) {
            break;
        }
        *(int32_t *)inference_get_input(0) = best;
        if (inference_run() != 0) {
            return 4;
        }
    }
    return 0;
}
