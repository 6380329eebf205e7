/* Test-side start-up for GAP8 engines that use L3: what an application does before the first
 * run. Opens an emulated HyperRAM of L3_BYTES bytes, stores the weight image (the file named by
 * L3_IMAGE, if any) at address L3_BASE and hands both to the engine. Called by the verification
 * harness through -DVERIFY_SETUP=l3_setup. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pmsis.h"

int inference_l3_init(struct pi_device *ram, uint32_t base);

#define L3_BASE 4096u /* not 0, so an engine that forgets the base reads the wrong bytes */

static struct pi_device ram;

int l3_setup(void)
{
    const char *bytes = getenv("L3_BYTES");
    const char *image = getenv("L3_IMAGE");
    if (bytes == NULL) {
        fprintf(stderr, "l3_loader: L3_BYTES is not set\n");
        return -1;
    }
    char *end = NULL;
    const unsigned long size = strtoul(bytes, &end, 10);
    if (end == bytes || *end != '\0' || size == 0 || size > 0x7fffffffUL - L3_BASE) {
        fprintf(stderr, "l3_loader: L3_BYTES is not a size: %s\n", bytes);
        return -1;
    }
    ram.size = L3_BASE + (uint32_t)size;
    ram.mem = calloc(ram.size, 1);
    if (ram.mem == NULL) {
        return -1;
    }
    if (image != NULL && image[0] != '\0') {
        FILE *f = fopen(image, "rb");
        if (f == NULL) {
            fprintf(stderr, "l3_loader: cannot open %s\n", image);
            return -1;
        }
        /* the image holds the weights; the activations placed in L3 follow them, so it may be
         * shorter than the L3, never longer */
        const size_t n = fread(ram.mem + L3_BASE, 1, ram.size - L3_BASE, f);
        const int failed = ferror(f), longer = fgetc(f) != EOF;
        fclose(f);
        if (failed || longer) {
            fprintf(stderr, "l3_loader: %s: %s\n", image, failed ? "cannot read it" : "larger than L3_BYTES");
            return -1;
        }
        (void)n;
    }
    return inference_l3_init(&ram, L3_BASE);
}
