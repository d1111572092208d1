/* tests/gpu/test_gpu_core.py::test_the_host_shim_runs_clean_under_asan_and_ubsan: every entry point of
   kernels/host_shim.c on exact-size heap buffers (0-130 bytes of payload, 0-33 of AAD),
   built with -fsanitize=address,undefined: an out-of-bounds access or undefined behaviour stops it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
void sc_host_chacha_seal(const uint8_t *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *, uint8_t *);
int sc_host_chacha_open(const uint8_t *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, const uint8_t *, uint8_t *);
void sc_host_gcm_seal(const uint8_t *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *, uint8_t *);
int sc_host_gcm_open(const uint8_t *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, const uint8_t *, uint8_t *);
void sc_host_gmac(const uint8_t *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *);
void sc_host_p130_mul(const uint8_t *, const uint8_t *, const uint8_t *, uint8_t *);
void sc_host_p130_pow_tag(const uint8_t *, unsigned long long, uint8_t *);
void sc_host_gf(const uint8_t *, const uint8_t *, uint8_t *, uint8_t *);
void sc_host_gf_pow(const uint8_t *, unsigned long long, uint8_t *);
void sc_host_aes_tt(const uint8_t *, const uint8_t *, uint8_t *);
static uint8_t *fill(size_t n, int seed) { /* exactly n bytes (ASan sees one past the end) */
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31 + seed);
    return p;
}
int main(void) {
    uint8_t *key = fill(32, 1), *nonce = fill(12, 2), *t16 = malloc(16), *o16 = malloc(16);
    for (size_t len = 0; len <= 130; len += (len < 70 ? 1 : 29)) {
        for (size_t alen = 0; alen <= 33; alen += 11) {
            uint8_t *aad = fill(alen, 3), *pt = fill(len, 4), *ct = malloc(len ? len : 1), *back = malloc(len ? len : 1);
            uint8_t *tag = malloc(16);
            sc_host_chacha_seal(key, nonce, aad, alen, pt, len, ct, tag);
            if (sc_host_chacha_open(key, nonce, aad, alen, ct, len, tag, back) != 0 || memcmp(pt, back, len)) return 2;
            sc_host_gcm_seal(key, nonce, aad, alen, pt, len, ct, tag);
            if (sc_host_gcm_open(key, nonce, aad, alen, ct, len, tag, back) != 0 || memcmp(pt, back, len)) return 3;
            sc_host_gmac(key, nonce, aad, alen, pt, len, tag);
            free(aad); free(pt); free(ct); free(back); free(tag);
        }
    }
    uint8_t *a = fill(16, 5), *b = fill(16, 6), *c = malloc(16);
    sc_host_p130_mul(a, b, key, t16);
    sc_host_p130_pow_tag(key, 1000003, t16);
    sc_host_gf(a, b, t16, o16);
    sc_host_gf_pow(a, 65537, c);
    sc_host_aes_tt(key, a, c);
    puts("CLEAN");
    return 0;
}
