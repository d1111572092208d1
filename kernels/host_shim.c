// Host build of the GPU AEAD core (sc_crypto.cuh) for verification through ctypes:
// the same source the kernels compile, checked here against RFC 8439, NIST GCM and cryptography.
#include "sc_crypto.cuh"

void sc_host_chacha_seal(const uint8_t *key, const uint8_t *nonce, const uint8_t *aad, size_t aadlen,
                         const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag) {
    sc_chacha20poly1305_seal(key, nonce, aad, aadlen, pt, len, ct, tag);
}

int sc_host_chacha_open(const uint8_t *key, const uint8_t *nonce, const uint8_t *aad, size_t aadlen,
                        const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt) {
    return sc_chacha20poly1305_open(key, nonce, aad, aadlen, ct, len, tag, pt);
}

void sc_host_gcm_seal(const uint8_t *key, const uint8_t *iv, const uint8_t *aad, size_t aadlen,
                      const uint8_t *pt, size_t len, uint8_t *ct, uint8_t *tag) {
    sc_aes256gcm_seal(key, iv, aad, aadlen, pt, len, ct, tag);
}

int sc_host_gcm_open(const uint8_t *key, const uint8_t *iv, const uint8_t *aad, size_t aadlen,
                     const uint8_t *ct, size_t len, const uint8_t *tag, uint8_t *pt) {
    return sc_aes256gcm_open(key, iv, aad, aadlen, ct, len, tag, pt);
}

int sc_host_fused_hop(int suite, const uint8_t *key_in, const uint8_t *nonce_in, const uint8_t *aad_in,
                      const uint8_t *frame_in, long long nbytes, const uint8_t *own, int dtype,
                      const uint8_t *key_out, const uint8_t *nonce_out, const uint8_t *aad_out,
                      size_t aadlen, uint8_t *frame_out, uint8_t *acc) {
    return sc_fused_hop(suite, key_in, nonce_in, aad_in, frame_in, nbytes, own, dtype, key_out,
                        nonce_out, aad_out, aadlen, frame_out, acc);
}

void sc_host_gmac(const uint8_t *key, const uint8_t *iv, const uint8_t *a, size_t alen, const uint8_t *b,
                  size_t blen, uint8_t *tag) {
    uint8_t rk[240];
    sc_aes256_expand(key, rk);
    sc_gmac_tag(rk, iv, a, alen, b, blen, tag);
}

// ---- pieces of the multi-lane MAC and T-table AES, for tests/gpu/test_gpu_core.py
void sc_host_p130_mul(const uint8_t *a16, const uint8_t *b16, const uint8_t *key32, uint8_t *tag16) {
    // tag of (r-independent) product block(a) * block(b), finished with pad key32[16..]
    sc_p130 p = sc_p130_mul(sc_p130_block(a16), sc_p130_block(b16));
    sc_p130_tag(p, key32 + 16, tag16);
}

void sc_host_p130_pow_tag(const uint8_t *key32, unsigned long long e, uint8_t *tag16) {
    sc_p130_tag(sc_p130_pow(sc_p130_r(key32), e), key32 + 16, tag16);
}

void sc_host_gf(const uint8_t *x16, const uint8_t *y16, uint8_t *bitwise16, uint8_t *table16) {
    sc_u128 x = sc_ld128(x16), y = sc_ld128(y16), m[16];
    sc_u128 a = sc_gf_mul(y, x);
    sc_gf_table(x, m);
    sc_u128 b = sc_gf_mul_tab(y, m);
    sc_st_be64(bitwise16, a.hi); sc_st_be64(bitwise16 + 8, a.lo);
    sc_st_be64(table16, b.hi); sc_st_be64(table16 + 8, b.lo);
}

void sc_host_gf_pow(const uint8_t *x16, unsigned long long e, uint8_t *out16) {
    sc_u128 r = sc_gf_pow(sc_ld128(x16), e);
    sc_st_be64(out16, r.hi); sc_st_be64(out16 + 8, r.lo);
}

void sc_host_aes_tt(const uint8_t *key32, const uint8_t *in16, uint8_t *out16) {
    static uint32_t te[4][256];
    uint32_t rk[60], w[4], o[4];
    for (int x = 0; x < 256; x++) sc_aes_te_entry(x, &te[0][x], &te[1][x], &te[2][x], &te[3][x]);
    sc_aes256_rk32(key32, rk);
    for (int i = 0; i < 4; i++) w[i] = sc_be32(in16 + 4 * i);
    sc_aes256_tt(te[0], te[1], te[2], te[3], rk, w, o);
    for (int i = 0; i < 4; i++) sc_st_be32(out16 + 4 * i, o[i]);
}
