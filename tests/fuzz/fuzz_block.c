/*
 * fuzz_block.c — libFuzzer target for the block decoder (daemon/shared/block.c),
 * which reads bytes from session files: whatever they are, decoding never
 * reads out of bounds, and a block that decodes re-encodes into one that
 * decodes to the same entries (block_enc_load takes the same path), also
 * when read from each of its restarts.
 *
 * Input: 2 bytes (little-endian entry count, taken modulo BLOCK_ENTRIES + 2
 * so that counts over the limit are tried), then the block's bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct block_entry in[BLOCK_ENTRIES], out[BLOCK_ENTRIES];
    struct block_dec d;
    struct block_enc b;
    uint32_t n, i = 0;
    int rc;

    if (size < 2)
        return 0;
    n = (uint32_t)(data[0] | data[1] << 8) % (BLOCK_ENTRIES + 2);
    block_dec_init(&d, data + 2, size - 2, n);
    while (i < BLOCK_ENTRIES && (rc = block_dec_next(&d, &in[i])) == 1)
        i++;
    block_enc_init(&b);
    if (block_enc_load(&b, data + 2, size - 2, n) == 0) {
        if (rc != 0 || b.n != i)
            abort(); /* load and the decoder disagree */
        block_dec_init(&d, b.buf, b.len, b.n);
        for (uint32_t k = 0; k < b.n; k++) {
            if (block_dec_next(&d, &out[k]) != 1 || out[k].process_id != in[k].process_id ||
                out[k].step != in[k].step || out[k].op_id != in[k].op_id ||
                out[k].device_id != in[k].device_id || out[k].start_ns != in[k].start_ns ||
                out[k].dur_ns != in[k].dur_ns || out[k].has_elements != in[k].has_elements ||
                out[k].elements != in[k].elements || out[k].mem_bytes != in[k].mem_bytes ||
                out[k].shape_id != in[k].shape_id)
                abort();
        }
        if (block_dec_next(&d, &out[0]) != 0)
            abort();
        /* From each restart the encoder noted, the same entries. */
        for (uint32_t k = 0; k < block_restarts(b.n); k++) {
            block_dec_init(&d, b.buf, b.len, b.n);
            if (block_dec_seek(&d, k, b.restart[k]) < 0 || block_dec_next(&d, &out[0]) != 1 ||
                out[0].start_ns != in[k * BLOCK_RESTART].start_ns ||
                out[0].process_id != in[k * BLOCK_RESTART].process_id)
                abort();
        }
    }
    /* Seeking the input with offsets taken from it: never out of bounds. */
    if (size >= 6) {
        block_dec_init(&d, data + 2, size - 2, n);
        if (block_dec_seek(&d, data[2] % 40, (uint32_t)(data[3] | data[4] << 8)) == 0)
            while (block_dec_next(&d, &out[0]) == 1)
                ;
    }
    block_enc_deinit(&b);
    return 0;
}
