// Host build of the GPU AEAD core (kernels/sc_crypto.cuh) for verification through ctypes:
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
