// seccomm GPU AEAD arithmetic core, shared by the CUDA kernels and the host verification shim.
//
// Every function is __host__ __device__ (plain static inline in a host build), so the exact code
// that runs on the GPU also compiles with the system C compiler and is checked against RFC 8439,
// the NIST GCM vectors and pyca/cryptography (tests/gpu/test_gpu_core.py).  This is verification code
// for our GPU kernels: CPU traffic is sealed with `cryptography`, never with this.
//
// Sources: ChaCha20 and Poly1305 — RFC 8439 §2.1-2.8 (Poly1305 in 26-bit limbs, as in
// poly1305-donna); AES-256 — FIPS 197; GCM/GMAC — NIST SP 800-38D (Algorithm 1 for the GF(2^128)
// multiply, 96-bit IV: J0 = IV || 0^31 || 1).
#ifndef SECCOMM_CRYPTO_CUH
#define SECCOMM_CRYPTO_CUH

#if defined(__CUDACC_RTC__)  // NVRTC (cupy.RawModule): no libc headers; size_t is built in
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#elif defined(__CUDACC__)
#include <stdint.h>
#include <stddef.h>
#endif

#ifdef __CUDACC__
#define SC_HD __host__ __device__ __forceinline__
#define SC_CONST __device__ __constant__
#else
#include <stdint.h>
#include <stddef.h>
#define SC_HD static inline
#define SC_CONST static const
#endif

// ---------------------------------------------------------------- little/big endian helpers
SC_HD uint32_t sc_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
SC_HD void sc_st_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
SC_HD uint64_t sc_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}
SC_HD void sc_st_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

// ---------------------------------------------------------------- ChaCha20 (RFC 8439 §2.3)
SC_HD uint32_t sc_rotl(uint32_t v, int c) { return (v << c) | (v >> (32 - c)); }

#define SC_QR(a, b, c, d)                                   \
    a += b; d ^= a; d = sc_rotl(d, 16);                     \
    c += d; b ^= c; b = sc_rotl(b, 12);                     \
    a += b; d ^= a; d = sc_rotl(d, 8);                      \
    c += d; b ^= c; b = sc_rotl(b, 7);

// One keystream block for (key, counter, nonce) as 16 little-endian words.
SC_HD void sc_chacha20_words(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                             uint32_t out[16]) {
    uint32_t s[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u,
                      key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
                      counter, nonce[0], nonce[1], nonce[2]};
    uint32_t x[16];
    for (int i = 0; i < 16; i++) x[i] = s[i];
    for (int i = 0; i < 10; i++) {
        SC_QR(x[0], x[4], x[8], x[12]) SC_QR(x[1], x[5], x[9], x[13])
        SC_QR(x[2], x[6], x[10], x[14]) SC_QR(x[3], x[7], x[11], x[15])
        SC_QR(x[0], x[5], x[10], x[15]) SC_QR(x[1], x[6], x[11], x[12])
        SC_QR(x[2], x[7], x[8], x[13]) SC_QR(x[3], x[4], x[9], x[14])
    }
    for (int i = 0; i < 16; i++) out[i] = x[i] + s[i];
}

// One 64-byte keystream block for (key, counter, nonce).
SC_HD void sc_chacha20_block(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                             uint8_t out[64]) {
    uint32_t w[16];
    sc_chacha20_words(key, counter, nonce, w);
    for (int i = 0; i < 16; i++) sc_st_le32(out + 4 * i, w[i]);
}

// XOR `len` bytes of keystream starting at block `counter` into out (in may equal out).
SC_HD void sc_chacha20_xor(const uint32_t key[8], uint32_t counter, const uint32_t nonce[3],
                           const uint8_t *in, uint8_t *out, size_t len) {
    uint8_t ks[64];
    for (size_t off = 0; off < len; off += 64, counter++) {
        sc_chacha20_block(key, counter, nonce, ks);
        size_t n = len - off < 64 ? len - off : 64;
        for (size_t i = 0; i < n; i++) out[off + i] = in[off + i] ^ ks[i];
    }
}

// ---------------------------------------------------------------- Poly1305 (RFC 8439 §2.5)
typedef struct { uint32_t r[5], h[5], pad[4]; } sc_poly1305;

SC_HD void sc_poly1305_init(sc_poly1305 *st, const uint8_t key[32]) {
    st->r[0] = (sc_le32(key + 0)) & 0x3ffffff;
    st->r[1] = (sc_le32(key + 3) >> 2) & 0x3ffff03;
    st->r[2] = (sc_le32(key + 6) >> 4) & 0x3ffc0ff;
    st->r[3] = (sc_le32(key + 9) >> 6) & 0x3f03fff;
    st->r[4] = (sc_le32(key + 12) >> 8) & 0x00fffff;
    for (int i = 0; i < 5; i++) st->h[i] = 0;
    for (int i = 0; i < 4; i++) st->pad[i] = sc_le32(key + 16 + 4 * i);
}

// Absorb one 16-byte block; `hibit` is 1<<24 for full blocks (the appended 1 bit).
SC_HD void sc_poly1305_block(sc_poly1305 *st, const uint8_t m[16], uint32_t hibit) {
    const uint32_t r0 = st->r[0], r1 = st->r[1], r2 = st->r[2], r3 = st->r[3], r4 = st->r[4];
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    uint32_t h0 = st->h[0], h1 = st->h[1], h2 = st->h[2], h3 = st->h[3], h4 = st->h[4];
    h0 += (sc_le32(m + 0)) & 0x3ffffff;
    h1 += (sc_le32(m + 3) >> 2) & 0x3ffffff;
    h2 += (sc_le32(m + 6) >> 4) & 0x3ffffff;
    h3 += (sc_le32(m + 9) >> 6) & 0x3ffffff;
    h4 += (sc_le32(m + 12) >> 8) | hibit;
    uint64_t d0 = (uint64_t)h0 * r0 + (uint64_t)h1 * s4 + (uint64_t)h2 * s3 + (uint64_t)h3 * s2 + (uint64_t)h4 * s1;
    uint64_t d1 = (uint64_t)h0 * r1 + (uint64_t)h1 * r0 + (uint64_t)h2 * s4 + (uint64_t)h3 * s3 + (uint64_t)h4 * s2;
    uint64_t d2 = (uint64_t)h0 * r2 + (uint64_t)h1 * r1 + (uint64_t)h2 * r0 + (uint64_t)h3 * s4 + (uint64_t)h4 * s3;
    uint64_t d3 = (uint64_t)h0 * r3 + (uint64_t)h1 * r2 + (uint64_t)h2 * r1 + (uint64_t)h3 * r0 + (uint64_t)h4 * s4;
    uint64_t d4 = (uint64_t)h0 * r4 + (uint64_t)h1 * r3 + (uint64_t)h2 * r2 + (uint64_t)h3 * r1 + (uint64_t)h4 * r0;
    uint32_t c;
    c = (uint32_t)(d0 >> 26); h0 = (uint32_t)d0 & 0x3ffffff; d1 += c;
    c = (uint32_t)(d1 >> 26); h1 = (uint32_t)d1 & 0x3ffffff; d2 += c;
    c = (uint32_t)(d2 >> 26); h2 = (uint32_t)d2 & 0x3ffffff; d3 += c;
    c = (uint32_t)(d3 >> 26); h3 = (uint32_t)d3 & 0x3ffffff; d4 += c;
    c = (uint32_t)(d4 >> 26); h4 = (uint32_t)d4 & 0x3ffffff; h0 += c * 5;
    c = h0 >> 26; h0 &= 0x3ffffff; h1 += c;
    st->h[0] = h0; st->h[1] = h1; st->h[2] = h2; st->h[3] = h3; st->h[4] = h4;
}

// Absorb `len` bytes zero-padded to a multiple of 16 (the AEAD construction pads AAD and text).
SC_HD void sc_poly1305_padded(sc_poly1305 *st, const uint8_t *m, size_t len) {
    size_t full = len & ~(size_t)15;
    for (size_t i = 0; i < full; i += 16) sc_poly1305_block(st, m + i, 1u << 24);
    if (len > full) {
        uint8_t b[16] = {0};
        for (size_t i = 0; i < len - full; i++) b[i] = m[full + i];
        sc_poly1305_block(st, b, 1u << 24);
    }
}

SC_HD void sc_poly1305_finish(sc_poly1305 *st, uint8_t tag[16]) {
    uint32_t h0 = st->h[0], h1 = st->h[1], h2 = st->h[2], h3 = st->h[3], h4 = st->h[4], c;
    c = h1 >> 26; h1 &= 0x3ffffff; h2 += c;
    c = h2 >> 26; h2 &= 0x3ffffff; h3 += c;
    c = h3 >> 26; h3 &= 0x3ffffff; h4 += c;
    c = h4 >> 26; h4 &= 0x3ffffff; h0 += c * 5;
    c = h0 >> 26; h0 &= 0x3ffffff; h1 += c;
    // g = h + 5 - 2^130; take g if h >= p (constant time)
    uint32_t g0 = h0 + 5; c = g0 >> 26; g0 &= 0x3ffffff;
    uint32_t g1 = h1 + c; c = g1 >> 26; g1 &= 0x3ffffff;
    uint32_t g2 = h2 + c; c = g2 >> 26; g2 &= 0x3ffffff;
    uint32_t g3 = h3 + c; c = g3 >> 26; g3 &= 0x3ffffff;
    uint32_t g4 = h4 + c - (1u << 26);
    uint32_t mask = (g4 >> 31) - 1;  // all ones when g4 did not underflow (h >= p)
    h0 = (h0 & ~mask) | (g0 & mask); h1 = (h1 & ~mask) | (g1 & mask);
    h2 = (h2 & ~mask) | (g2 & mask); h3 = (h3 & ~mask) | (g3 & mask);
    h4 = (h4 & ~mask) | (g4 & mask);
    // h mod 2^128, plus s
    uint32_t w0 = h0 | (h1 << 26), w1 = (h1 >> 6) | (h2 << 20);
    uint32_t w2 = (h2 >> 12) | (h3 << 14), w3 = (h3 >> 18) | (h4 << 8);
    uint64_t f;
    f = (uint64_t)w0 + st->pad[0]; w0 = (uint32_t)f;
    f = (uint64_t)w1 + st->pad[1] + (f >> 32); w1 = (uint32_t)f;
    f = (uint64_t)w2 + st->pad[2] + (f >> 32); w2 = (uint32_t)f;
    f = (uint64_t)w3 + st->pad[3] + (f >> 32); w3 = (uint32_t)f;
    sc_st_le32(tag, w0); sc_st_le32(tag + 4, w1); sc_st_le32(tag + 8, w2); sc_st_le32(tag + 12, w3);
}

// Constant-time tag comparison: 0 when equal.
SC_HD uint32_t sc_tag_diff(const uint8_t *a, const uint8_t *b) {
    uint32_t d = 0;
    for (int i = 0; i < 16; i++) d |= (uint32_t)(a[i] ^ b[i]);
    return d;
}

SC_HD void sc_chacha_keys(const uint8_t key[32], const uint8_t nonce[12], uint32_t k[8], uint32_t n[3]) {
    for (int i = 0; i < 8; i++) k[i] = sc_le32(key + 4 * i);
    for (int i = 0; i < 3; i++) n[i] = sc_le32(nonce + 4 * i);
}

// Poly1305 tag of the AEAD construction over (aad, ciphertext) — RFC 8439 §2.8.
SC_HD void sc_chacha_poly_tag(const uint32_t k[8], const uint32_t n[3], const uint8_t *aad,
                              size_t aadlen, const uint8_t *ct, size_t len, uint8_t tag[16]) {
    uint8_t otk[64];
    sc_chacha20_block(k, 0, n, otk);
    sc_poly1305 st;
    sc_poly1305_init(&st, otk);
    sc_poly1305_padded(&st, aad, aadlen);
    sc_poly1305_padded(&st, ct, len);
    uint8_t lens[16];
    for (int i = 0; i < 8; i++) { lens[i] = (uint8_t)((uint64_t)aadlen >> (8 * i)); lens[8 + i] = (uint8_t)((uint64_t)len >> (8 * i)); }
    sc_poly1305_block(&st, lens, 1u << 24);
    sc_poly1305_finish(&st, tag);
}

// ChaCha20-Poly1305 seal: ct (len bytes) and tag.  pt may equal ct.
SC_HD void sc_chacha20poly1305_seal(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad,
                                    size_t aadlen, const uint8_t *pt, size_t len, uint8_t *ct,
                                    uint8_t tag[16]) {
    uint32_t k[8], n[3];
    sc_chacha_keys(key, nonce, k, n);
    sc_chacha20_xor(k, 1, n, pt, ct, len);
    sc_chacha_poly_tag(k, n, aad, aadlen, ct, len, tag);
}

// ChaCha20-Poly1305 open: returns 0 and writes pt only when the tag verifies; -1 otherwise
// (pt untouched: nothing unauthenticated is ever written).
SC_HD int sc_chacha20poly1305_open(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *aad,
                                   size_t aadlen, const uint8_t *ct, size_t len, const uint8_t tag[16],
                                   uint8_t *pt) {
    uint32_t k[8], n[3];
    uint8_t want[16];
    sc_chacha_keys(key, nonce, k, n);
    sc_chacha_poly_tag(k, n, aad, aadlen, ct, len, want);
    if (sc_tag_diff(want, tag)) return -1;
    sc_chacha20_xor(k, 1, n, ct, pt, len);
    return 0;
}

// ---------------------------------------------------------------- AES-256 (FIPS 197)
SC_CONST uint8_t SC_SBOX[256] = {
    0x63,0x7c,0x77,0x7b,0xf2,0x6b,0x6f,0xc5,0x30,0x01,0x67,0x2b,0xfe,0xd7,0xab,0x76,
    0xca,0x82,0xc9,0x7d,0xfa,0x59,0x47,0xf0,0xad,0xd4,0xa2,0xaf,0x9c,0xa4,0x72,0xc0,
    0xb7,0xfd,0x93,0x26,0x36,0x3f,0xf7,0xcc,0x34,0xa5,0xe5,0xf1,0x71,0xd8,0x31,0x15,
    0x04,0xc7,0x23,0xc3,0x18,0x96,0x05,0x9a,0x07,0x12,0x80,0xe2,0xeb,0x27,0xb2,0x75,
    0x09,0x83,0x2c,0x1a,0x1b,0x6e,0x5a,0xa0,0x52,0x3b,0xd6,0xb3,0x29,0xe3,0x2f,0x84,
    0x53,0xd1,0x00,0xed,0x20,0xfc,0xb1,0x5b,0x6a,0xcb,0xbe,0x39,0x4a,0x4c,0x58,0xcf,
    0xd0,0xef,0xaa,0xfb,0x43,0x4d,0x33,0x85,0x45,0xf9,0x02,0x7f,0x50,0x3c,0x9f,0xa8,
    0x51,0xa3,0x40,0x8f,0x92,0x9d,0x38,0xf5,0xbc,0xb6,0xda,0x21,0x10,0xff,0xf3,0xd2,
    0xcd,0x0c,0x13,0xec,0x5f,0x97,0x44,0x17,0xc4,0xa7,0x7e,0x3d,0x64,0x5d,0x19,0x73,
    0x60,0x81,0x4f,0xdc,0x22,0x2a,0x90,0x88,0x46,0xee,0xb8,0x14,0xde,0x5e,0x0b,0xdb,
    0xe0,0x32,0x3a,0x0a,0x49,0x06,0x24,0x5c,0xc2,0xd3,0xac,0x62,0x91,0x95,0xe4,0x79,
    0xe7,0xc8,0x37,0x6d,0x8d,0xd5,0x4e,0xa9,0x6c,0x56,0xf4,0xea,0x65,0x7a,0xae,0x08,
    0xba,0x78,0x25,0x2e,0x1c,0xa6,0xb4,0xc6,0xe8,0xdd,0x74,0x1f,0x4b,0xbd,0x8b,0x8a,
    0x70,0x3e,0xb5,0x66,0x48,0x03,0xf6,0x0e,0x61,0x35,0x57,0xb9,0x86,0xc1,0x1d,0x9e,
    0xe1,0xf8,0x98,0x11,0x69,0xd9,0x8e,0x94,0x9b,0x1e,0x87,0xe9,0xce,0x55,0x28,0xdf,
    0x8c,0xa1,0x89,0x0d,0xbf,0xe6,0x42,0x68,0x41,0x99,0x2d,0x0f,0xb0,0x54,0xbb,0x16};

SC_HD uint8_t sc_xtime(uint8_t x) { return (uint8_t)((x << 1) ^ ((x >> 7) * 0x1b)); }

// Expand a 256-bit key into 15 round keys (240 bytes).
SC_HD void sc_aes256_expand(const uint8_t key[32], uint8_t rk[240]) {
    for (int i = 0; i < 32; i++) rk[i] = key[i];
    uint8_t rcon = 1;
    for (int i = 8; i < 60; i++) {
        uint8_t t[4] = {rk[4 * i - 4], rk[4 * i - 3], rk[4 * i - 2], rk[4 * i - 1]};
        if (i % 8 == 0) {
            uint8_t u = t[0];
            t[0] = SC_SBOX[t[1]] ^ rcon; t[1] = SC_SBOX[t[2]]; t[2] = SC_SBOX[t[3]]; t[3] = SC_SBOX[u];
            rcon = sc_xtime(rcon);
        } else if (i % 8 == 4) {
            for (int j = 0; j < 4; j++) t[j] = SC_SBOX[t[j]];
        }
        for (int j = 0; j < 4; j++) rk[4 * i + j] = rk[4 * i - 32 + j] ^ t[j];
    }
}

// Encrypt one 16-byte block (state in column-major order, as FIPS 197).
SC_HD void sc_aes256_block(const uint8_t rk[240], const uint8_t in[16], uint8_t out[16]) {
    uint8_t s[16];
    for (int i = 0; i < 16; i++) s[i] = in[i] ^ rk[i];
    for (int round = 1; round <= 14; round++) {
        uint8_t t[16];
        for (int i = 0; i < 16; i++) t[i] = SC_SBOX[s[(i + 4 * (i % 4)) % 16]];  // SubBytes+ShiftRows
        if (round < 14) {
            for (int c = 0; c < 4; c++) {  // MixColumns
                uint8_t a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
                uint8_t x = a0 ^ a1 ^ a2 ^ a3;
                t[4 * c] = a0 ^ x ^ sc_xtime(a0 ^ a1);
                t[4 * c + 1] = a1 ^ x ^ sc_xtime(a1 ^ a2);
                t[4 * c + 2] = a2 ^ x ^ sc_xtime(a2 ^ a3);
                t[4 * c + 3] = a3 ^ x ^ sc_xtime(a3 ^ a0);
            }
        }
        for (int i = 0; i < 16; i++) s[i] = t[i] ^ rk[16 * round + i];
    }
    for (int i = 0; i < 16; i++) out[i] = s[i];
}

// ---------------------------------------------------------------- GHASH / GCM (SP 800-38D)
typedef struct { uint64_t hi, lo; } sc_u128;

// X * Y in GF(2^128) with GCM's bit order (SP 800-38D Algorithm 1).
SC_HD sc_u128 sc_gf_mul(sc_u128 x, sc_u128 y) {
    sc_u128 z = {0, 0}, v = y;
    for (int i = 0; i < 128; i++) {
        uint64_t bit = i < 64 ? (x.hi >> (63 - i)) & 1 : (x.lo >> (127 - i)) & 1;
        uint64_t m = 0 - bit;
        z.hi ^= v.hi & m; z.lo ^= v.lo & m;
        uint64_t lsb = v.lo & 1;
        v.lo = (v.lo >> 1) | (v.hi << 63);
        v.hi = (v.hi >> 1) ^ ((0 - lsb) & 0xe100000000000000ull);
    }
    return z;
}

SC_HD sc_u128 sc_ld128(const uint8_t b[16]) { sc_u128 r = {sc_be64(b), sc_be64(b + 8)}; return r; }

SC_HD sc_u128 sc_ghash_padded(sc_u128 y, sc_u128 h, const uint8_t *m, size_t len) {
    size_t full = len & ~(size_t)15;
    for (size_t i = 0; i < full; i += 16) {
        sc_u128 b = sc_ld128(m + i);
        y.hi ^= b.hi; y.lo ^= b.lo;
        y = sc_gf_mul(y, h);
    }
    if (len > full) {
        uint8_t t[16] = {0};
        for (size_t i = 0; i < len - full; i++) t[i] = m[full + i];
        sc_u128 b = sc_ld128(t);
        y.hi ^= b.hi; y.lo ^= b.lo;
        y = sc_gf_mul(y, h);
    }
    return y;
}

// The GCM tag for (aad, ct) under round keys rk and 96-bit IV.
SC_HD void sc_gcm_tag(const uint8_t rk[240], const uint8_t iv[12], const uint8_t *aad, size_t aadlen,
                      const uint8_t *ct, size_t len, uint8_t tag[16]) {
    uint8_t zero[16] = {0}, hb[16], j0[16], ej0[16], lens[16];
    sc_aes256_block(rk, zero, hb);
    sc_u128 h = sc_ld128(hb), y = {0, 0};
    y = sc_ghash_padded(y, h, aad, aadlen);
    y = sc_ghash_padded(y, h, ct, len);
    sc_st_be64(lens, (uint64_t)aadlen * 8);
    sc_st_be64(lens + 8, (uint64_t)len * 8);
    y = sc_ghash_padded(y, h, lens, 16);
    for (int i = 0; i < 12; i++) j0[i] = iv[i];
    j0[12] = 0; j0[13] = 0; j0[14] = 0; j0[15] = 1;
    sc_aes256_block(rk, j0, ej0);
    uint8_t yb[16];
    sc_st_be64(yb, y.hi); sc_st_be64(yb + 8, y.lo);
    for (int i = 0; i < 16; i++) tag[i] = yb[i] ^ ej0[i];
}

// CTR keystream XOR starting at inc32(J0) (counter 2 for the first data block).
SC_HD void sc_gcm_ctr(const uint8_t rk[240], const uint8_t iv[12], const uint8_t *in, uint8_t *out,
                      size_t len) {
    uint8_t cb[16], ks[16];
    for (int i = 0; i < 12; i++) cb[i] = iv[i];
    uint32_t ctr = 2;
    for (size_t off = 0; off < len; off += 16, ctr++) {
        cb[12] = (uint8_t)(ctr >> 24); cb[13] = (uint8_t)(ctr >> 16); cb[14] = (uint8_t)(ctr >> 8); cb[15] = (uint8_t)ctr;
        sc_aes256_block(rk, cb, ks);
        size_t n = len - off < 16 ? len - off : 16;
        for (size_t i = 0; i < n; i++) out[off + i] = in[off + i] ^ ks[i];
    }
}

// GMAC (GCM with an empty plaintext) over AAD = a || b, the two parts anywhere in memory:
// aes-256-gmac authenticates header || payload without copying them side by side.
SC_HD void sc_gmac_tag(const uint8_t rk[240], const uint8_t iv[12], const uint8_t *a, size_t alen,
                       const uint8_t *b, size_t blen, uint8_t tag[16]) {
    uint8_t zero[16] = {0}, hb[16], blk[16], j0[16], ej0[16];
    sc_aes256_block(rk, zero, hb);
    sc_u128 h = sc_ld128(hb), y = {0, 0};
    int fill = 0;
    for (size_t i = 0; i < alen + blen; i++) {
        blk[fill++] = i < alen ? a[i] : b[i - alen];
        if (fill == 16) {
            sc_u128 x = sc_ld128(blk);
            y.hi ^= x.hi; y.lo ^= x.lo; y = sc_gf_mul(y, h); fill = 0;
        }
    }
    if (fill) {
        for (int i = fill; i < 16; i++) blk[i] = 0;
        sc_u128 x = sc_ld128(blk);
        y.hi ^= x.hi; y.lo ^= x.lo; y = sc_gf_mul(y, h);
    }
    sc_st_be64(blk, (uint64_t)(alen + blen) * 8);
    sc_st_be64(blk + 8, 0);
    sc_u128 x = sc_ld128(blk);
    y.hi ^= x.hi; y.lo ^= x.lo; y = sc_gf_mul(y, h);
    for (int i = 0; i < 12; i++) j0[i] = iv[i];
    j0[12] = 0; j0[13] = 0; j0[14] = 0; j0[15] = 1;
    sc_aes256_block(rk, j0, ej0);
    sc_st_be64(blk, y.hi); sc_st_be64(blk + 8, y.lo);
    for (int i = 0; i < 16; i++) tag[i] = blk[i] ^ ej0[i];
}

SC_HD void sc_aes256gcm_seal(const uint8_t key[32], const uint8_t iv[12], const uint8_t *aad, size_t aadlen,
                             const uint8_t *pt, size_t len, uint8_t *ct, uint8_t tag[16]) {
    uint8_t rk[240];
    sc_aes256_expand(key, rk);
    sc_gcm_ctr(rk, iv, pt, ct, len);
    sc_gcm_tag(rk, iv, aad, aadlen, ct, len, tag);
}

// Returns 0 and writes pt only when the tag verifies; -1 otherwise (pt untouched).
SC_HD int sc_aes256gcm_open(const uint8_t key[32], const uint8_t iv[12], const uint8_t *aad, size_t aadlen,
                            const uint8_t *ct, size_t len, const uint8_t tag[16], uint8_t *pt) {
    uint8_t rk[240], want[16];
    sc_aes256_expand(key, rk);
    sc_gcm_tag(rk, iv, aad, aadlen, ct, len, want);
    if (sc_tag_diff(want, tag)) return -1;
    sc_gcm_ctr(rk, iv, ct, pt, len);
    return 0;
}

// ---------------------------------------------------------------- multi-lane MAC arithmetic
// Both MACs evaluate a polynomial, h = sum_i m_i k^(N-i+1) (Horner: h = (h + m_i) k), with
// k = r mod 2^130-5 (Poly1305) or k = H in GF(2^128) (GHASH).  The kernels split a chunk into
// lanes, evaluate each lane with Horner and combine lanes with powers of k; these are the field
// operations they need, checked here against the sequential code (tests/gpu/test_gpu_core.py).

// Poly1305 field element: five 26-bit limbs (limb 1 may exceed 2^26 slightly after a multiply).
typedef struct { uint32_t v[5]; } sc_p130;

SC_HD sc_p130 sc_p130_zero(void) { sc_p130 z = {{0, 0, 0, 0, 0}}; return z; }

// One 16-byte block with the appended 1 bit (RFC 8439 §2.5.1; AEAD blocks are always full).
SC_HD sc_p130 sc_p130_block(const uint8_t m[16]) {
    sc_p130 a;
    a.v[0] = (sc_le32(m + 0)) & 0x3ffffff;
    a.v[1] = (sc_le32(m + 3) >> 2) & 0x3ffffff;
    a.v[2] = (sc_le32(m + 6) >> 4) & 0x3ffffff;
    a.v[3] = (sc_le32(m + 9) >> 6) & 0x3ffffff;
    a.v[4] = (sc_le32(m + 12) >> 8) | (1u << 24);
    return a;
}

// The clamped r of a Poly1305 key (first 16 bytes), as a field element.
SC_HD sc_p130 sc_p130_r(const uint8_t key[16]) {
    sc_p130 r;
    r.v[0] = (sc_le32(key + 0)) & 0x3ffffff;
    r.v[1] = (sc_le32(key + 3) >> 2) & 0x3ffff03;
    r.v[2] = (sc_le32(key + 6) >> 4) & 0x3ffc0ff;
    r.v[3] = (sc_le32(key + 9) >> 6) & 0x3f03fff;
    r.v[4] = (sc_le32(key + 12) >> 8) & 0x00fffff;
    return r;
}

// a + b with one carry pass: limbs back under 2^26 (limb 1 under 2^26 + 2^6).
SC_HD sc_p130 sc_p130_add(sc_p130 a, sc_p130 b) {
    uint32_t h0 = a.v[0] + b.v[0], h1 = a.v[1] + b.v[1], h2 = a.v[2] + b.v[2];
    uint32_t h3 = a.v[3] + b.v[3], h4 = a.v[4] + b.v[4], c;
    c = h0 >> 26; h0 &= 0x3ffffff; h1 += c;
    c = h1 >> 26; h1 &= 0x3ffffff; h2 += c;
    c = h2 >> 26; h2 &= 0x3ffffff; h3 += c;
    c = h3 >> 26; h3 &= 0x3ffffff; h4 += c;
    c = h4 >> 26; h4 &= 0x3ffffff; h0 += c * 5;
    c = h0 >> 26; h0 &= 0x3ffffff; h1 += c;
    sc_p130 r = {{h0, h1, h2, h3, h4}};
    return r;
}

// a * b mod 2^130-5 (poly1305-donna's multiply with any b, not only a clamped r: limbs below
// 2^27 keep every 64-bit column sum below 2^61).
SC_HD sc_p130 sc_p130_mul(sc_p130 a, sc_p130 b) {
    const uint32_t r0 = b.v[0], r1 = b.v[1], r2 = b.v[2], r3 = b.v[3], r4 = b.v[4];
    const uint32_t s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5;
    const uint32_t h0 = a.v[0], h1 = a.v[1], h2 = a.v[2], h3 = a.v[3], h4 = a.v[4];
    uint64_t d0 = (uint64_t)h0 * r0 + (uint64_t)h1 * s4 + (uint64_t)h2 * s3 + (uint64_t)h3 * s2 + (uint64_t)h4 * s1;
    uint64_t d1 = (uint64_t)h0 * r1 + (uint64_t)h1 * r0 + (uint64_t)h2 * s4 + (uint64_t)h3 * s3 + (uint64_t)h4 * s2;
    uint64_t d2 = (uint64_t)h0 * r2 + (uint64_t)h1 * r1 + (uint64_t)h2 * r0 + (uint64_t)h3 * s4 + (uint64_t)h4 * s3;
    uint64_t d3 = (uint64_t)h0 * r3 + (uint64_t)h1 * r2 + (uint64_t)h2 * r1 + (uint64_t)h3 * r0 + (uint64_t)h4 * s4;
    uint64_t d4 = (uint64_t)h0 * r4 + (uint64_t)h1 * r3 + (uint64_t)h2 * r2 + (uint64_t)h3 * r1 + (uint64_t)h4 * r0;
    uint32_t c, o0, o1, o2, o3, o4;
    c = (uint32_t)(d0 >> 26); o0 = (uint32_t)d0 & 0x3ffffff; d1 += c;
    c = (uint32_t)(d1 >> 26); o1 = (uint32_t)d1 & 0x3ffffff; d2 += c;
    c = (uint32_t)(d2 >> 26); o2 = (uint32_t)d2 & 0x3ffffff; d3 += c;
    c = (uint32_t)(d3 >> 26); o3 = (uint32_t)d3 & 0x3ffffff; d4 += c;
    c = (uint32_t)(d4 >> 26); o4 = (uint32_t)d4 & 0x3ffffff; o0 += c * 5;
    c = o0 >> 26; o0 &= 0x3ffffff; o1 += c;
    sc_p130 r = {{o0, o1, o2, o3, o4}};
    return r;
}

// x^e (e >= 1) by square-and-multiply.
SC_HD sc_p130 sc_p130_pow(sc_p130 x, unsigned long long e) {
    sc_p130 r = x;
    int top = 63;
    while (top > 0 && !((e >> top) & 1)) top--;
    for (int i = top - 1; i >= 0; i--) {
        r = sc_p130_mul(r, r);
        if ((e >> i) & 1) r = sc_p130_mul(r, x);
    }
    return r;
}

// The 16-byte Poly1305 tag of accumulator h and pad s (key bytes 16..31).
SC_HD void sc_p130_tag(sc_p130 h, const uint8_t s[16], uint8_t tag[16]) {
    sc_poly1305 st;
    for (int i = 0; i < 5; i++) { st.r[i] = 0; st.h[i] = h.v[i]; }
    for (int i = 0; i < 4; i++) st.pad[i] = sc_le32(s + 4 * i);
    sc_poly1305_finish(&st, tag);
}

// GF(2^128) with 4-bit tables (Shoup's method; the table layout and reduction constants of
// OpenSSL's gcm_init_4bit/gcm_gmult_4bit): m[i] = i * X for the 4-bit polynomial i, bit 3 = x^0.
SC_HD void sc_gf_table(sc_u128 x, sc_u128 m[16]) {
    sc_u128 v = x;
    m[0].hi = 0; m[0].lo = 0;
    m[8] = v;
    for (int i = 4; i >= 1; i >>= 1) {  // v *= x: shift right one bit, reduce by 0xe1 || 0^120
        uint64_t t = 0xe100000000000000ull & (0 - (v.lo & 1));
        v.lo = (v.lo >> 1) | (v.hi << 63);
        v.hi = (v.hi >> 1) ^ t;
        m[i] = v;
    }
    for (int i = 2; i <= 8; i <<= 1)
        for (int j = 1; j < i; j++) { m[i + j].hi = m[i].hi ^ m[j].hi; m[i + j].lo = m[i].lo ^ m[j].lo; }
}

// y * X where m is the table of X (sc_gf_table): 32 four-bit steps from the last byte of y.
SC_HD sc_u128 sc_gf_mul_tab(sc_u128 y, const sc_u128 m[16]) {
    const uint16_t rem4[16] = {0x0000, 0x1C20, 0x3840, 0x2460, 0x7080, 0x6CA0, 0x48C0, 0x54E0,
                               0xE100, 0xFD20, 0xD940, 0xC560, 0x9180, 0x8DA0, 0xA9C0, 0xB5E0};
    sc_u128 z = {0, 0};
    for (int i = 15; i >= 0; i--) {
        uint32_t byte = (uint32_t)((i < 8 ? y.hi >> (56 - 8 * i) : y.lo >> (56 - 8 * (i - 8))) & 0xff);
        for (int half = 0; half < 2; half++) {
            uint32_t nib = half ? byte >> 4 : byte & 0xf;
            if (i != 15 || half) {  // shift z right 4 bits, folding the bits shifted out
                uint32_t rem = (uint32_t)(z.lo & 0xf);
                z.lo = (z.hi << 60) | (z.lo >> 4);
                z.hi = (z.hi >> 4) ^ ((uint64_t)rem4[rem] << 48);
            }
            z.hi ^= m[nib].hi; z.lo ^= m[nib].lo;
        }
    }
    return z;
}

// x^e (e >= 1) in GF(2^128), square-and-multiply with the bitwise multiply.
SC_HD sc_u128 sc_gf_pow(sc_u128 x, unsigned long long e) {
    sc_u128 r = x;
    int top = 63;
    while (top > 0 && !((e >> top) & 1)) top--;
    for (int i = top - 1; i >= 0; i--) {
        r = sc_gf_mul(r, r);
        if ((e >> i) & 1) r = sc_gf_mul(r, x);
    }
    return r;
}

// ---------------------------------------------------------------- AES-256 with 32-bit T-tables
// te[0][x] = (2S[x], S[x], S[x], 3S[x]) as a big-endian word, te[1..3] its rotations right by
// 8, 16, 24 bits (FIPS 197 §5.1 rounds as table lookups, the layout of the classic
// rijndael-alg-fst.c).  The kernels keep the tables in shared memory.
SC_HD uint32_t sc_ror32(uint32_t v, int c) { return (v >> c) | (v << (32 - c)); }

SC_HD void sc_aes_te_entry(int x, uint32_t *t0, uint32_t *t1, uint32_t *t2, uint32_t *t3) {
    uint32_t s = SC_SBOX[x], s2 = sc_xtime((uint8_t)s), s3 = s2 ^ s;
    uint32_t w = (s2 << 24) | (s << 16) | (s << 8) | s3;
    *t0 = w; *t1 = sc_ror32(w, 8); *t2 = sc_ror32(w, 16); *t3 = sc_ror32(w, 24);
}

SC_HD uint32_t sc_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
SC_HD void sc_st_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

// Round keys as 60 big-endian words (from sc_aes256_expand's bytes).
SC_HD void sc_aes256_rk32(const uint8_t key[32], uint32_t rk32[60]) {
    uint8_t rk[240];
    sc_aes256_expand(key, rk);
    for (int i = 0; i < 60; i++) rk32[i] = sc_be32(rk + 4 * i);
}

// Encrypt the block (w0, w1, w2, w3) (big-endian words) with tables te and round keys rk32.
SC_HD void sc_aes256_tt(const uint32_t *te0, const uint32_t *te1, const uint32_t *te2,
                        const uint32_t *te3, const uint32_t *rk, const uint32_t in[4], uint32_t out[4]) {
    uint32_t s0 = in[0] ^ rk[0], s1 = in[1] ^ rk[1], s2 = in[2] ^ rk[2], s3 = in[3] ^ rk[3];
    for (int r = 1; r < 14; r++) {
        uint32_t t0 = te0[s0 >> 24] ^ te1[(s1 >> 16) & 0xff] ^ te2[(s2 >> 8) & 0xff] ^ te3[s3 & 0xff] ^ rk[4 * r];
        uint32_t t1 = te0[s1 >> 24] ^ te1[(s2 >> 16) & 0xff] ^ te2[(s3 >> 8) & 0xff] ^ te3[s0 & 0xff] ^ rk[4 * r + 1];
        uint32_t t2 = te0[s2 >> 24] ^ te1[(s3 >> 16) & 0xff] ^ te2[(s0 >> 8) & 0xff] ^ te3[s1 & 0xff] ^ rk[4 * r + 2];
        uint32_t t3 = te0[s3 >> 24] ^ te1[(s0 >> 16) & 0xff] ^ te2[(s1 >> 8) & 0xff] ^ te3[s2 & 0xff] ^ rk[4 * r + 3];
        s0 = t0; s1 = t1; s2 = t2; s3 = t3;
    }
    // last round: SubBytes + ShiftRows only; S[x] is byte 1 of te0[x]
#define SC_SB(x) ((te0[(x)] >> 8) & 0xff)
    out[0] = (SC_SB(s0 >> 24) << 24 | SC_SB((s1 >> 16) & 0xff) << 16 | SC_SB((s2 >> 8) & 0xff) << 8 | SC_SB(s3 & 0xff)) ^ rk[56];
    out[1] = (SC_SB(s1 >> 24) << 24 | SC_SB((s2 >> 16) & 0xff) << 16 | SC_SB((s3 >> 8) & 0xff) << 8 | SC_SB(s0 & 0xff)) ^ rk[57];
    out[2] = (SC_SB(s2 >> 24) << 24 | SC_SB((s3 >> 16) & 0xff) << 16 | SC_SB((s0 >> 8) & 0xff) << 8 | SC_SB(s1 & 0xff)) ^ rk[58];
    out[3] = (SC_SB(s3 >> 24) << 24 | SC_SB((s0 >> 16) & 0xff) << 16 | SC_SB((s1 >> 8) & 0xff) << 8 | SC_SB(s2 & 0xff)) ^ rk[59];
#undef SC_SB
}

// ---------------------------------------------------------------- element types of the fused hop
// dtype codes: 0 float32, 1 float16 (IEEE binary16), 2 bfloat16.  Sums are computed in float32
// and rounded to nearest-even once, as numpy (float16) and ml_dtypes (bfloat16) do for one add,
// so the GPU hop is bit-exact with the CPU path.
SC_HD float sc_f32_from_bits(uint32_t u) { union { uint32_t u; float f; } c; c.u = u; return c.f; }
SC_HD uint32_t sc_bits_from_f32(float f) { union { uint32_t u; float f; } c; c.f = f; return c.u; }

SC_HD float sc_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return sc_f32_from_bits(sign);
        while (!(man & 0x400)) { man <<= 1; exp--; }  // subnormal: normalise
        exp++; man &= 0x3ff;
    } else if (exp == 31) {
        return sc_f32_from_bits(sign | 0x7f800000u | (man << 13));
    }
    return sc_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

SC_HD uint16_t sc_float_to_half(float f) {  // round to nearest even, overflow to inf
    uint32_t u = sc_bits_from_f32(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);           // >= 65520: inf
    if (a < 0x38800000u) {                                             // subnormal or zero
        if (a < 0x33000000u) return (uint16_t)sign;                    // < 2^-25: rounds to 0
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;                                      // rebias 127 -> 15
    uint32_t h = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

SC_HD float sc_bf16_to_float(uint16_t b) { return sc_f32_from_bits((uint32_t)b << 16); }

SC_HD uint16_t sc_float_to_bf16(float f) {
    uint32_t u = sc_bits_from_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);  // as ml_dtypes
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// float32 a + b, bit-exact with numpy on x86 on every platform:
// - subnormals kept: on the GPU an inline add.rn.f32 (no .ftz), whatever -ftz the compiler
//   was given (CuPy builds with -ftz=true);
// - NaN rules of SSE/AVX (Intel SDM, "Floating-Point Exception Conditions"): a NaN operand
//   propagates quieted, the first one first; an invalid operation (inf + -inf) gives the default
//   NaN 0xffc00000.  GPUs return one canonical NaN instead, so the rules are applied here.
SC_HD uint32_t sc_f32_add_bits(uint32_t a, uint32_t b) {
    if ((a & 0x7fffffffu) > 0x7f800000u) return a | 0x00400000u;
    if ((b & 0x7fffffffu) > 0x7f800000u) return b | 0x00400000u;
#if defined(__CUDA_ARCH__)
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(sc_f32_from_bits(a)), "f"(sc_f32_from_bits(b)));
#else
    float r = sc_f32_from_bits(a) + sc_f32_from_bits(b);
#endif
    uint32_t u = sc_bits_from_f32(r);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0xffc00000u : u;
}

// a + b for float16 (dtype 1) or bfloat16 (2): float32 sum, one rounding (numpy, ml_dtypes).
SC_HD uint16_t sc_add16(uint16_t a, uint16_t b, int dtype) {
    if (dtype == 1)
        return sc_float_to_half(sc_f32_from_bits(sc_f32_add_bits(sc_bits_from_f32(sc_half_to_float(a)),
                                                                  sc_bits_from_f32(sc_half_to_float(b)))));
    return sc_float_to_bf16(sc_f32_from_bits(sc_f32_add_bits((uint32_t)a << 16, (uint32_t)b << 16)));
}

// acc[i] = own[i] + pt[i] over n elements of dtype (little-endian bytes, any alignment).
SC_HD void sc_add_into(uint8_t *acc, const uint8_t *own, const uint8_t *pt, long long nbytes, int dtype) {
    if (dtype == 0) {
        for (long long i = 0; i + 4 <= nbytes; i += 4) sc_st_le32(acc + i, sc_f32_add_bits(sc_le32(own + i), sc_le32(pt + i)));
    } else {
        for (long long i = 0; i + 2 <= nbytes; i += 2) {
            uint16_t a = (uint16_t)(own[i] | (own[i + 1] << 8)), b = (uint16_t)(pt[i] | (pt[i + 1] << 8));
            uint16_t r = sc_add16(a, b, dtype);
            acc[i] = (uint8_t)r; acc[i + 1] = (uint8_t)(r >> 8);
        }
    }
}

// ---------------------------------------------------------------- fused ring hop (reference)
// Open frame_in (ct || tag) under (key_in, nonce_in, aad_in), add `own` elementwise, and seal the
// sum as frame_out under (key_out, nonce_out, aad_out); `acc` (may be NULL) also receives the
// plaintext sum.  suite: 0 ChaCha20-Poly1305, 1 AES-256-GCM.  Returns -1 and writes nothing when
// the incoming tag fails.  The kernels split this into verify / one fused pass / tag launches.
SC_HD int sc_fused_hop(int suite, const uint8_t *key_in, const uint8_t *nonce_in, const uint8_t *aad_in,
                       const uint8_t *frame_in, long long nbytes, const uint8_t *own, int dtype,
                       const uint8_t *key_out, const uint8_t *nonce_out, const uint8_t *aad_out,
                       size_t aadlen, uint8_t *frame_out, uint8_t *acc) {
    uint8_t tag[16];
    if (suite == 0) {
        uint32_t k[8], n[3];
        sc_chacha_keys(key_in, nonce_in, k, n);
        sc_chacha_poly_tag(k, n, aad_in, aadlen, frame_in, (size_t)nbytes, tag);
        if (sc_tag_diff(tag, frame_in + nbytes)) return -1;
        sc_chacha20_xor(k, 1, n, frame_in, frame_out, (size_t)nbytes);       // plaintext in
        sc_add_into(frame_out, own, frame_out, nbytes, dtype);                // + own
        if (acc) for (long long i = 0; i < nbytes; i++) acc[i] = frame_out[i];
        sc_chacha_keys(key_out, nonce_out, k, n);
        sc_chacha20_xor(k, 1, n, frame_out, frame_out, (size_t)nbytes);      // sealed out
        sc_chacha_poly_tag(k, n, aad_out, aadlen, frame_out, (size_t)nbytes, frame_out + nbytes);
    } else {
        uint8_t rk[240];
        sc_aes256_expand(key_in, rk);
        sc_gcm_tag(rk, nonce_in, aad_in, aadlen, frame_in, (size_t)nbytes, tag);
        if (sc_tag_diff(tag, frame_in + nbytes)) return -1;
        sc_gcm_ctr(rk, nonce_in, frame_in, frame_out, (size_t)nbytes);
        sc_add_into(frame_out, own, frame_out, nbytes, dtype);
        if (acc) for (long long i = 0; i < nbytes; i++) acc[i] = frame_out[i];
        sc_aes256_expand(key_out, rk);
        sc_gcm_ctr(rk, nonce_out, frame_out, frame_out, (size_t)nbytes);
        sc_gcm_tag(rk, nonce_out, aad_out, aadlen, frame_out, (size_t)nbytes, frame_out + nbytes);
    }
    return 0;
}

#endif  // SECCOMM_CRYPTO_CUH
