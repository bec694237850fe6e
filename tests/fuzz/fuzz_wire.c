/* fuzz_wire.c - libFuzzer target: Envelope decode and validation (proto/wire.c), as the
 * coordinator and the worker run it on every message a peer sends. */
#include <stddef.h>
#include <stdint.h>

#include "mt.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wire_env_t *env = NULL;
    char err[256];
    int code = 0;
    if (wire_unpack(data, size, WIRE_DEFAULT_MAX_BYTES, &env, &code, err, sizeof err) == MT_OK) {
        /* what validated must re-encode (exercises every field the decoder accepted); the
         * re-decode is not required to succeed: protobuf-c keeps unknown fields, even ones
         * with field number 0, and writes them back as they came */
        uint8_t *buf = NULL;
        size_t len = 0;
        (void)wire_allowed(WIRE_FROM_WORKER, env->body_case);
        if (wire_pack(env, &buf, &len) == MT_OK) {
            wire_env_t *again = NULL;
            (void)wire_unpack(buf, len, WIRE_DEFAULT_MAX_BYTES, &again, &code, err, sizeof err);
            wire_free(&again);
        }
        __builtin_free(buf);
        wire_free(&env);
    }
    return 0;
}
