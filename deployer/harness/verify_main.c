/* Test harness for generated engines (not part of an engine): reads raw input
 * samples from stdin, runs one inference per sample and writes the raw outputs
 * to stdout. Built with -DINFERENCE_TRACE it first writes every layer's output
 * as a record: int32 layer index, uint32 byte count, the bytes. An engine that
 * keeps state across runs reads one byte before each sample: nonzero resets the
 * state first (the samples are one stream otherwise). */
#include <stdint.h>
#include <stdio.h>

#include "inference_api.h"

#ifdef INFERENCE_TRACE
void inference_trace(int layer, const void *data, unsigned bytes)
{
    const int32_t header[2] = {layer, (int32_t)bytes};
    fwrite(header, sizeof header, 1, stdout);
    fwrite(data, 1, bytes, stdout);
}
#endif

#ifdef INFERENCE_INPUT_EXTERNAL
/* the application's input buffers, passed to the engine before each run */
static uint8_t external_input[INFERENCE_NUM_INPUTS][INFERENCE_INPUT_MAX_BYTES] __attribute__((aligned(16)));

static void *input_buffer(int i)
{
    inference_set_input(i, external_input[i]);
    return external_input[i];
}
#else
static void *input_buffer(int i)
{
    return inference_get_input(i);
}
#endif

#ifdef VERIFY_SETUP
/* A target's start-up before the first run (e.g. storing the L3 weight image), 0 = ok */
int VERIFY_SETUP(void);
#endif

int main(void)
{
#ifdef VERIFY_SETUP
    if (VERIFY_SETUP() != 0) {
        return 5;
    }
#endif
    if (inference_init() != 0) {
        return 2;
    }
    for (;;) {
#if defined(INFERENCE_STATE_BYTES) && INFERENCE_STATE_BYTES > 0
        unsigned char reset;
        if (fread(&reset, 1, 1, stdin) != 1) {
            return feof(stdin) ? 0 : 3;
        }
        if (reset) {
            inference_reset_state();
        }
        for (int i = 0; i < INFERENCE_NUM_INPUTS; ++i) {
            const unsigned n = inference_input_bytes(i);
            if (fread(input_buffer(i), 1, n, stdin) != n) {
                return 3;
            }
        }
#else
        for (int i = 0; i < INFERENCE_NUM_INPUTS; ++i) {
            const unsigned n = inference_input_bytes(i);
            if (fread(input_buffer(i), 1, n, stdin) != n) {
                return (i == 0 && feof(stdin)) ? 0 : 3;
            }
        }
#endif
        if (inference_run() != 0) {
#ifdef INFERENCE_GUARD_FAILED
            if (inference_guard_layer() >= 0) {
                fprintf(stderr, "guard: after op %d: %s\n", inference_guard_layer(), inference_guard_what());
                return 6;
            }
#endif
            return 4;
        }
        for (int o = 0; o < INFERENCE_NUM_OUTPUTS; ++o) {
            fwrite(inference_get_output(o), 1, inference_output_bytes(o), stdout);
        }
        fflush(stdout);
    }
}
