/* Generation harness for language-model engines (not part of an engine): runs a prompt, then
 * picks each next token and feeds it back, greedily or sampled with a seeded generator.
 *
 * stdin, int32 values: the prompt's length n and its n token ids; the most tokens to generate;
 * the end-of-text id or -1; the number of stop ids s and the s ids; the temperature as float32
 * bits (0: greedy); top_k (0: every candidate); the seed as two uint32 (low, then high).
 * stdout, int32 values: the generated ids, then why generation stopped, negative:
 *   -1 the end-of-text id, -2 a stop id (both are the last id written),
 *   -3 the number of tokens asked for,
 *   -4 the model's positions: every token written has a position of its own (prompt + generated
 *      <= INFERENCE_POSITIONS), so the one that takes the last position ends it.
 * Exit status: 0; 3 a bad request; 4 inference_run failed or gave no token id; 5 no logit to
 * sample from (none of the candidates' weights is above 0: the logits are not finite).
 *
 * Greedy: the argmax of the float logits (the first of equal ones), or the engine's own id when
 * it selects (INFERENCE_TOP_K). Sampling, with --temperature T > 0 (deployer/generate.py's
 * Sampler does the same, step for step, and is tested to pick the same ids):
 *   1. the candidates: every id of the vocabulary with its logit, or the engine's K ids with
 *      their K logits (INFERENCE_TOP_K > 1);
 *   2. with top_k > 0 (and fewer than the candidates), the top_k best are kept: the higher logit
 *      first, of equal logits the lower id (as the engine's selection orders them), NaN last;
 *   3. the kept candidates in increasing id order, each weighted by the integer
 *      w = (uint32)(exp_f32((logit - max) / T) * 2^24), 0 when (logit - max) / T < -87 or NaN
 *      (max: the largest logit kept; the best token weighs 2^24 exactly);
 *   4. r uniform in [0, sum of w) from a SplitMix64 generator seeded with the seed (draws at or
 *      below 2^64 mod sum are drawn again, so every r is equally likely); the pick is the first
 *      candidate whose running sum of w exceeds r.
 * Only step 3 computes in float: a subtraction, a division, the engine's exp_f32 (which the
 * numpy executor mirrors bit for bit) and a multiplication by a power of two, each an IEEE
 * float32 operation (built with -ffp-contract=off); the rest is integer arithmetic. A token
 * whose probability is below about 2^-24 of the best one's is never drawn. */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference_api.h"

#define STOPPED_EOS (-1)
#define STOPPED_STOP (-2)
#define STOPPED_MAX_TOKENS (-3)
#define STOPPED_POSITIONS (-4)

typedef struct {
    int32_t id;
    float logit;
} candidate_t;

static int32_t prompt[INFERENCE_POSITIONS];
static unsigned char is_stop[INFERENCE_VOCAB];
static candidate_t cands[INFERENCE_VOCAB];
static uint64_t rng_state;

static int read_i32(int32_t *v)
{
    return fread(v, sizeof *v, 1, stdin) == 1;
}

static void write_i32(int32_t v)
{
    fwrite(&v, sizeof v, 1, stdout);
    fflush(stdout);
}

/* SplitMix64: a Weyl sequence through a 64-bit mixing function */
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* the engine's exp_f32, operation for operation (deployer/decoder_executor.py: c_exp) */
static float exp_f32(float x)
{
    typedef union {
        float f;
        uint32_t u;
    } bits_t;
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.0f ? -87.0f : x;
    const float t = x * 1.44269504f;
    bits_t y;
    y.f = t + 12582912.0f;
    const float n = y.f - 12582912.0f;
    const float r = (x - n * 0.693145752f) - n * 1.42860677e-06f;
    bits_t p;
    p.f = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f + r * (0.0416666679f + r * (0.00833333377f + r * 0.00138888892f)))));
    p.u += y.u << 23;
    return p.f;
}

static int by_rank(const void *a, const void *b)
{
    const candidate_t *x = (const candidate_t *)a, *y = (const candidate_t *)b;
    const int x_nan = x->logit != x->logit, y_nan = y->logit != y->logit;
    if (x_nan != y_nan) {
        return x_nan - y_nan;
    }
    if (!x_nan && (x->logit > y->logit || x->logit < y->logit)) {
        return x->logit > y->logit ? -1 : 1;
    }
    return (x->id > y->id) - (x->id < y->id);
}

static int by_id(const void *a, const void *b)
{
    const candidate_t *x = (const candidate_t *)a, *y = (const candidate_t *)b;
    return (x->id > y->id) - (x->id < y->id);
}

/* the step's candidates in cands[], their count */
static int32_t candidates(void)
{
#if defined(INFERENCE_TOP_K) && INFERENCE_TOP_K > 1
    const int32_t *ids = (const int32_t *)inference_get_output(0);
    const float *logits = (const float *)inference_get_output(1);
    for (int32_t i = 0; i < INFERENCE_TOP_K; ++i) {
        cands[i].id = ids[i];
        cands[i].logit = logits[i];
    }
    return INFERENCE_TOP_K;
#elif defined(INFERENCE_TOP_K)
    return 0; /* one id and no logits: nothing to sample among (refused before the prompt runs) */
#else
    const float *logits = (const float *)inference_get_output(0);
    for (int32_t t = 0; t < INFERENCE_VOCAB; ++t) {
        cands[t].id = t;
        cands[t].logit = logits[t];
    }
    return INFERENCE_VOCAB;
#endif
}

/* 0 and the sampled id in *picked, or 5: no candidate weighs anything */
static int sample(float temperature, int32_t top_k, int32_t *picked)
{
    int32_t n = candidates();
    if (top_k > 0 && top_k < n) {
        qsort(cands, (size_t)n, sizeof cands[0], by_rank);
        n = top_k;
    }
    qsort(cands, (size_t)n, sizeof cands[0], by_id);
    float top = -FLT_MAX;
    for (int32_t i = 0; i < n; ++i) {
        top = cands[i].logit > top ? cands[i].logit : top;
    }
    uint64_t total = 0;
    static uint32_t weight[INFERENCE_VOCAB];
    for (int32_t i = 0; i < n; ++i) {
        const float x = (cands[i].logit - top) / temperature;
        weight[i] = x >= -87.0f ? (uint32_t)(exp_f32(x) * 16777216.0f) : 0u;
        total += weight[i];
    }
    if (total == 0) {
        return 5;
    }
    const uint64_t below = (UINT64_C(0) - total) % total; /* 2^64 mod total: draws a bias would favour */
    uint64_t draw = rng_next();
    while (draw < below) {
        draw = rng_next();
    }
    const uint64_t r = draw % total;
    uint64_t sum = 0;
    for (int32_t i = 0; i < n; ++i) {
        sum += weight[i];
        if (r < sum) {
            *picked = cands[i].id;
            return 0;
        }
    }
    return 5; /* not reached: r < total */
}

static int32_t greedy(void)
{
#ifdef INFERENCE_TOP_K
    return *(const int32_t *)inference_get_output(0); /* the engine selected it */
#else
    const float *logits = (const float *)inference_get_output(0);
    int32_t best = 0;
    for (int32_t t = 1; t < INFERENCE_VOCAB; ++t) {
        best = logits[t] > logits[best] ? t : best;
    }
    return best;
#endif
}

int main(void)
{
    int32_t n, want, eos, stops, bits, top_k, seed_lo, seed_hi;
    float temperature;
    if (!read_i32(&n) || n < 1 || n >= INFERENCE_POSITIONS) {
        return 3;
    }
    for (int32_t i = 0; i < n; ++i) {
        if (!read_i32(&prompt[i]) || prompt[i] < 0 || prompt[i] >= INFERENCE_VOCAB) {
            return 3;
        }
    }
    if (!read_i32(&want) || want < 1 || !read_i32(&eos) || eos < -1 || eos >= INFERENCE_VOCAB || !read_i32(&stops)
        || stops < 0 || stops > INFERENCE_VOCAB) {
        return 3;
    }
    for (int32_t i = 0, id; i < stops; ++i) {
        if (!read_i32(&id) || id < 0 || id >= INFERENCE_VOCAB) {
            return 3;
        }
        is_stop[id] = 1;
    }
    if (!read_i32(&bits) || !read_i32(&top_k) || !read_i32(&seed_lo) || !read_i32(&seed_hi)) {
        return 3;
    }
    memcpy(&temperature, &bits, sizeof temperature);
    if (!(temperature >= 0.0f && temperature <= FLT_MAX) || top_k < 0) {
        return 3;
    }
#ifdef INFERENCE_TOP_K
    if (top_k > INFERENCE_TOP_K || (INFERENCE_TOP_K == 1 && temperature > 0.0f)) {
        return 3;
    }
#else
    if (top_k > INFERENCE_VOCAB) {
        return 3;
    }
#endif
    rng_state = ((uint64_t)(uint32_t)seed_hi << 32) | (uint32_t)seed_lo;
    if (inference_init() != 0) {
        return 3;
    }
    for (int32_t i = 0; i < n; ++i) {
        *(int32_t *)inference_get_input(0) = prompt[i];
        if (inference_run() != 0) {
            return 4;
        }
    }
    for (int32_t k = 0;; ++k) {
        int32_t next = 0;
        if (temperature > 0.0f) {
            const int status = sample(temperature, top_k, &next);
            if (status != 0) {
                return status;
            }
        } else {
            next = greedy();
        }
        if (next < 0 || next >= INFERENCE_VOCAB) {
            return 4;
        }
        write_i32(next);
        const int32_t stopped = next == eos ? STOPPED_EOS
                                : is_stop[next] ? STOPPED_STOP
                                : k + 1 >= want ? STOPPED_MAX_TOKENS
                                : inference_position() + 1 >= INFERENCE_POSITIONS ? STOPPED_POSITIONS
                                : 0;
        if (stopped != 0) {
            write_i32(stopped);
            return 0;
        }
        *(int32_t *)inference_get_input(0) = next;
        if (inference_run() != 0) {
            return 4;
        }
    }
}
