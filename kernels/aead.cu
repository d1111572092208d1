// seccomm GPU AEAD kernels: seal/open many chunks per launch with exactly the CPU suites' framing
// (frame = ciphertext || 16-byte tag; nonce and AAD header built by the host per chunk, see
// docs/design.md).  Loaded with cupy.RawModule(path=...); names are extern "C".
//
// Layout of a batch of n chunks (all device pointers):
//   keys   n x 32 bytes      per-chunk key (direction or group key of the hop)
//   nonces n x 12 bytes      per-chunk nonce
//   aads   n x aad_stride    per-chunk AAD header (aad_len bytes used)
//   in/out byte buffers; chunk j spans [offs[j], offs[j] + lens[j]) of `in`, and its frame
//          starts at fr_offs[j] of the frame buffer (body, then 16-byte tag)
//   ok     n x int           open: 1 when chunk j verified, 0 otherwise
//
// First version: keystream in parallel over 64-byte (ChaCha20) / 16-byte (AES-CTR) blocks, one
// thread per chunk for the MAC (Poly1305 / GHASH are sequential per chunk).  Open runs the MAC
// kernel first and the keystream kernel writes plaintext only for chunks whose tag verified.
#include "sc_crypto.cuh"

// seal: write the tag behind the body; open: compare with the received tag, set ok[j].
__device__ __forceinline__ void sc_finish_tag(const uint8_t tag[16], const uint8_t *received,
                                              uint8_t *dst, int *ok, int j) {
    if (ok) {
        ok[j] = sc_tag_diff(tag, received) == 0;
    } else {
        for (int i = 0; i < 16; i++) dst[i] = tag[i];
    }
}

// The (chunk j, keystream block b) of this thread and the block's byte range [off, off + m);
// false when the thread has nothing to do (past the batch, past the chunk, or chunk not verified).
__device__ __forceinline__ bool sc_block_of(long long max_blocks, int n, const int *ok,
                                            const long long *lens, long long bs, int *j,
                                            long long *b, long long *off, long long *m) {
    long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    *j = (int)(gid / max_blocks);
    *b = gid % max_blocks;
    if (*j >= n || (ok && !ok[*j])) return false;
    *off = *b * bs;
    if (*off >= lens[*j]) return false;
    *m = lens[*j] - *off < bs ? lens[*j] - *off : bs;
    return true;
}

extern "C" {

// ---- ChaCha20-Poly1305 -------------------------------------------------------------------------
__global__ void sc_chacha_xor(const uint8_t *keys, const uint8_t *nonces, const uint8_t *in,
                              uint8_t *out, const long long *in_offs, const long long *out_offs,
                              const long long *lens, const int *ok, int n, long long max_blocks) {
    int j;
    long long b, off, m;
    if (!sc_block_of(max_blocks, n, ok, lens, 64, &j, &b, &off, &m)) return;
    uint32_t k[8], nn[3];
    sc_chacha_keys(keys + 32 * j, nonces + 12 * j, k, nn);
    uint8_t ks[64];
    sc_chacha20_block(k, (uint32_t)(1 + b), nn, ks);
    const uint8_t *src = in + in_offs[j] + off;
    uint8_t *dst = out + out_offs[j] + off;
    for (int i = 0; i < m; i++) dst[i] = src[i] ^ ks[i];
}

// Tag of chunk j over (aad_j, ciphertext_j).  seal: writes the tag after the body;
// open: compares with the received tag and sets ok[j].
__global__ void sc_chacha_tag(const uint8_t *keys, const uint8_t *nonces, const uint8_t *aads,
                              int aad_stride, int aad_len, const uint8_t *frames,
                              const long long *fr_offs, const long long *lens, uint8_t *tags_out,
                              int *ok, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    uint32_t k[8], nn[3];
    sc_chacha_keys(keys + 32 * j, nonces + 12 * j, k, nn);
    const uint8_t *ct = frames + fr_offs[j];
    uint8_t tag[16];
    sc_chacha_poly_tag(k, nn, aads + (long long)aad_stride * j, aad_len, ct, lens[j], tag);
    sc_finish_tag(tag, frames + fr_offs[j] + lens[j], ok ? 0 : tags_out + fr_offs[j] + lens[j], ok, j);
}

// ---- AES-256-GCM / GMAC ------------------------------------------------------------------------
__global__ void sc_gcm_xor(const uint8_t *keys, const uint8_t *nonces, const uint8_t *in,
                           uint8_t *out, const long long *in_offs, const long long *out_offs,
                           const long long *lens, const int *ok, int n, long long max_blocks) {
    int j;
    long long b, off, m;
    if (!sc_block_of(max_blocks, n, ok, lens, 16, &j, &b, &off, &m)) return;
    uint8_t rk[240], cb[16], ks[16];
    sc_aes256_expand(keys + 32 * j, rk);
    for (int i = 0; i < 12; i++) cb[i] = nonces[12 * j + i];
    uint32_t ctr = (uint32_t)(2 + b);
    cb[12] = (uint8_t)(ctr >> 24); cb[13] = (uint8_t)(ctr >> 16); cb[14] = (uint8_t)(ctr >> 8); cb[15] = (uint8_t)ctr;
    sc_aes256_block(rk, cb, ks);
    const uint8_t *src = in + in_offs[j] + off;
    uint8_t *dst = out + out_offs[j] + off;
    for (int i = 0; i < m; i++) dst[i] = src[i] ^ ks[i];
}

// GCM tag of chunk j.  gmac != 0: authentication only — the AAD is header || body and the
// ciphertext is empty (aes-256-gmac), so the body travels in the clear.
__global__ void sc_gcm_tag_k(const uint8_t *keys, const uint8_t *nonces, const uint8_t *aads,
                             int aad_stride, int aad_len, const uint8_t *frames,
                             const long long *fr_offs, const long long *lens, uint8_t *tags_out,
                             int *ok, int n, int gmac) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    uint8_t rk[240], tag[16];
    sc_aes256_expand(keys + 32 * j, rk);
    const uint8_t *body = frames + fr_offs[j];
    const uint8_t *aad = aads + (long long)aad_stride * j;
    if (gmac) {  // AAD = header || body (one GHASH stream), empty ciphertext
        sc_gmac_tag(rk, nonces + 12 * j, aad, aad_len, body, lens[j], tag);
    } else {
        sc_gcm_tag(rk, nonces + 12 * j, aad, aad_len, body, lens[j], tag);
    }
    sc_finish_tag(tag, frames + fr_offs[j] + lens[j], ok ? 0 : tags_out + fr_offs[j] + lens[j], ok, j);
}

// ---- fused ring hop: open + add + seal in one pass over the payload -------------------------------
// Launch order per batch: sc_*_tag with ok (verify incoming), this kernel, sc_*_tag without ok
// (tag the outgoing frames).  A chunk whose incoming tag failed (ok[j] == 0) writes nothing: no
// reduced value, no outgoing ciphertext.  Block = 64 bytes (ChaCha20) or 16 bytes (AES-CTR): both
// hold whole float32/float16/bfloat16 elements.  suite: 0 ChaCha20-Poly1305, 1 AES-256-GCM.
__global__ void sc_fused_hop_xor(int suite, const uint8_t *keys_in, const uint8_t *nonces_in,
                                 const uint8_t *keys_out, const uint8_t *nonces_out,
                                 const uint8_t *frames_in, const long long *in_offs,
                                 const uint8_t *own, const long long *own_offs, uint8_t *frames_out,
                                 const long long *out_offs, uint8_t *acc, const long long *lens,
                                 const int *ok, int dtype, int n, long long max_blocks) {
    int j;
    long long b, off, m;
    if (!sc_block_of(max_blocks, n, ok, lens, suite == 0 ? 64 : 16, &j, &b, &off, &m)) return;
    uint8_t ks_in[64], ks_out[64], pt[64];
    if (suite == 0) {
        uint32_t k[8], nn[3];
        sc_chacha_keys(keys_in + 32 * j, nonces_in + 12 * j, k, nn);
        sc_chacha20_block(k, (uint32_t)(1 + b), nn, ks_in);
        sc_chacha_keys(keys_out + 32 * j, nonces_out + 12 * j, k, nn);
        sc_chacha20_block(k, (uint32_t)(1 + b), nn, ks_out);
    } else {
        uint8_t rk[240], cb[16];
        uint32_t ctr = (uint32_t)(2 + b);
        for (int side = 0; side < 2; side++) {
            sc_aes256_expand((side ? keys_out : keys_in) + 32 * j, rk);
            for (int i = 0; i < 12; i++) cb[i] = (side ? nonces_out : nonces_in)[12 * j + i];
            cb[12] = (uint8_t)(ctr >> 24); cb[13] = (uint8_t)(ctr >> 16); cb[14] = (uint8_t)(ctr >> 8); cb[15] = (uint8_t)ctr;
            sc_aes256_block(rk, cb, side ? ks_out : ks_in);
        }
    }
    const uint8_t *src = frames_in + in_offs[j] + off;
    for (int i = 0; i < m; i++) pt[i] = src[i] ^ ks_in[i];
    sc_add_into(pt, own + own_offs[j] + off, pt, m, dtype);
    if (acc) for (int i = 0; i < m; i++) acc[own_offs[j] + off + i] = pt[i];
    uint8_t *dst = frames_out + out_offs[j] + off;
    for (int i = 0; i < m; i++) dst[i] = pt[i] ^ ks_out[i];
}

}  // extern "C"
