// seccomm GPU AEAD kernels: seal/open many chunks per launch with exactly the CPU suites' framing
// (frame = body || 16-byte tag; nonce and AAD header built by the host per chunk, see
// docs/design.md).  Loaded with cupy.RawModule; names are extern "C".  Design: docs/gpu.md.
//
// A batch holds n chunks (all device pointers):
//   keys n x 32, nonces n x 12      per-chunk key and nonce (keys2/nonces2: the outgoing side of a hop)
//   aads n x aad_stride             per-chunk AAD header (aad_len bytes used)
//   in/out/own/acc                  byte buffers; chunk j of `in` is [in_offs[j], +lens[j])
//   ok n x int                      1 when chunk j's tag verified
//
// Work split.  A chunk is cut into 64-byte units (one ChaCha20 block, four AES-CTR blocks, four MAC
// blocks) and a thread block of SC_T threads takes SC_T consecutive units (a segment).  The MAC
// polynomial h = sum_i m_i k^(N-i+1) is evaluated in lanes: each thread runs Horner over its four
// blocks, the threads of a segment combine in a shared-memory tree with the powers k^(4*2^l), and
// sc_mac_finish chains the segments, the AAD, the last (partial) unit and the length block.  So
// one chunk uses as many threads as it has units, and sealing MACs the ciphertext from registers.
//
// Launches (seccomm/gpu/aead.py):
//   seal   sc_mac_prep, sc_units_*(SEAL), sc_mac_finish(write tag)
//   open   sc_mac_prep, sc_units_*(MAC), sc_mac_finish(set ok), sc_units_*(OPEN, only ok chunks)
//   hop    open's first three on the incoming frames, then sc_mac_prep(outgoing key),
//          sc_units_*(HOP, only ok chunks), sc_mac_finish(write tag, only ok chunks)
//   macs   (GMAC) sc_mac_prep, sc_units_gcm(MAC_CONCAT), sc_mac_finish(write or compare tags[j])
// Nothing unauthenticated is written: OPEN and HOP skip a chunk whose ok[j] is 0.
#include "sc_crypto.cuh"

#define SC_T 256                   // threads per block, one 64-byte unit each
#define SC_LOG_T 8
#define SC_SEG (64 * SC_T)         // bytes of a chunk per block
#define SC_PW (SC_LOG_T + 2)       // per-chunk slots from sc_mac_prep (8 words each):
                                   //   0: k, 1 + l: k^(4 * 2^l) (l < SC_LOG_T), SC_LOG_T + 1: pad
#define SC_SEAL 0                  // out = in ^ keystream, MAC(out)
#define SC_OPEN 1                  // out = in ^ keystream (ok chunks only)
#define SC_MAC 2                   // MAC(in)
#define SC_MAC_CONCAT 3            // MAC(aad || in): GMAC authenticates header || body as one AAD
#define SC_HOP 4                   // out = ((in ^ ks_in) + own) ^ ks_out, MAC(out) (ok chunks only)
#define SC_COPY 5                  // out = in (ok chunks only): GMAC bodies travel in the clear

// ---- the two MAC fields, with the same interface --------------------------------------------------
struct sc_poly_f {  // Poly1305: integers mod 2^130 - 5
    typedef sc_p130 E;
    typedef sc_p130 M;  // a multiplier (the element itself)
    static __device__ __forceinline__ E zero() { return sc_p130_zero(); }
    static __device__ __forceinline__ E add(E a, E b) { return sc_p130_add(a, b); }
    static __device__ __forceinline__ E mul(E a, const M &m) { return sc_p130_mul(a, m); }
    static __device__ __forceinline__ E mul2(E a, E b) { return sc_p130_mul(a, b); }
    static __device__ __forceinline__ void make(E x, M *m) { *m = x; }
    static __device__ __forceinline__ E bytes(const uint8_t b[16]) { return sc_p130_block(b); }
    static __device__ __forceinline__ E words(const uint32_t *w) {  // 4 little-endian words
        sc_p130 a;
        a.v[0] = w[0] & 0x3ffffff;
        a.v[1] = ((w[0] >> 26) | (w[1] << 6)) & 0x3ffffff;
        a.v[2] = ((w[1] >> 20) | (w[2] << 12)) & 0x3ffffff;
        a.v[3] = ((w[2] >> 14) | (w[3] << 18)) & 0x3ffffff;
        a.v[4] = (w[3] >> 8) | (1u << 24);
        return a;
    }
    static __device__ __forceinline__ E get(const uint32_t *s) {
        sc_p130 a;
        for (int i = 0; i < 5; i++) a.v[i] = s[i];
        return a;
    }
    static __device__ __forceinline__ void put(uint32_t *s, E a) {
        for (int i = 0; i < 5; i++) s[i] = a.v[i];
    }
};

struct sc_ghash_f {  // GHASH: GF(2^128), multipliers as Shoup 4-bit tables
    typedef sc_u128 E;
    struct M { sc_u128 t[16]; };
    static __device__ __forceinline__ E zero() { E z = {0, 0}; return z; }
    static __device__ __forceinline__ E add(E a, E b) { E r = {a.hi ^ b.hi, a.lo ^ b.lo}; return r; }
    static __device__ __forceinline__ E mul(E a, const M &m) { return sc_gf_mul_tab(a, m.t); }
    static __device__ __forceinline__ E mul2(E a, E b) { return sc_gf_mul(a, b); }
    static __device__ __forceinline__ void make(E x, M *m) { sc_gf_table(x, m->t); }
    static __device__ __forceinline__ E bytes(const uint8_t b[16]) { return sc_ld128(b); }
    static __device__ __forceinline__ uint32_t bswap(uint32_t v) {
        return (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
    }
    static __device__ __forceinline__ E words(const uint32_t *w) {
        E r = {((uint64_t)bswap(w[0]) << 32) | bswap(w[1]), ((uint64_t)bswap(w[2]) << 32) | bswap(w[3])};
        return r;
    }
    static __device__ __forceinline__ E get(const uint32_t *s) {
        E r = {((uint64_t)s[0] << 32) | s[1], ((uint64_t)s[2] << 32) | s[3]};
        return r;
    }
    static __device__ __forceinline__ void put(uint32_t *s, E a) {
        s[0] = (uint32_t)(a.hi >> 32); s[1] = (uint32_t)a.hi; s[2] = (uint32_t)(a.lo >> 32); s[3] = (uint32_t)a.lo;
    }
};

// ---- a 64-byte unit as 16 little-endian words ---------------------------------------------------
// (hi:lo) >> s for s in 8, 16, 24: the funnel shift of sm_32+.
__device__ __forceinline__ uint32_t sc_fshr(uint32_t lo, uint32_t hi, int s) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_r(lo, hi, s);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> s);
#endif
}

// Load m bytes (zero padded).  A whole unit: 16-byte vector loads when aligned, else 4-byte loads
// of the aligned words it overlaps (17 of them, all inside the 4-byte words that hold its first
// and last byte, so inside the allocation) joined by funnel shifts.  A partial unit: bytes.
__device__ __forceinline__ void sc_unit_load(uint32_t w[16], const uint8_t *src, int m) {
    const unsigned long long a = (unsigned long long)src;
    if (m == 64 && (a & 15) == 0) {
        const uint4 *p = (const uint4 *)src;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint4 v = p[q];
            w[4 * q] = v.x; w[4 * q + 1] = v.y; w[4 * q + 2] = v.z; w[4 * q + 3] = v.w;
        }
        return;
    }
    if (m == 64) {
        const uint32_t *p = (const uint32_t *)(a & ~3ull);
        const int s = 8 * (int)(a & 3);
        if (s == 0) {
#pragma unroll
            for (int q = 0; q < 16; q++) w[q] = p[q];
        } else {
            uint32_t lo = p[0];
#pragma unroll
            for (int q = 0; q < 16; q++) {
                uint32_t hi = p[q + 1];
                w[q] = sc_fshr(lo, hi, s);
                lo = hi;
            }
        }
        return;
    }
    // Static indices only (a loop bound of m would put w[] in local memory for every unit).
#pragma unroll
    for (int q = 0; q < 16; q++) {
        uint32_t v = 0;
#pragma unroll
        for (int b = 0; b < 4; b++)
            if (4 * q + b < m) v |= (uint32_t)src[4 * q + b] << (8 * b);
        w[q] = v;
    }
}

__device__ __forceinline__ void sc_unit_store(uint8_t *dst, const uint32_t w[16], int m) {
    if (m == 64 && (((unsigned long long)dst) & 15) == 0) {
        uint4 *p = (uint4 *)dst;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint4 v;
            v.x = w[4 * q]; v.y = w[4 * q + 1]; v.z = w[4 * q + 2]; v.w = w[4 * q + 3];
            p[q] = v;
        }
        return;
    }
#pragma unroll
    for (int q = 0; q < 16; q++)
#pragma unroll
        for (int b = 0; b < 4; b++)
            if (4 * q + b < m) dst[4 * q + b] = (uint8_t)(w[q] >> (8 * b));
}

// Zero the bytes at and after m (padding of the last MAC block).
__device__ __forceinline__ void sc_unit_mask(uint32_t w[16], int m) {
#pragma unroll
    for (int q = 0; q < 16; q++) {
        int lo = 4 * q;
        if (lo >= m) w[q] = 0;
        else if (lo + 4 > m) w[q] &= (1u << (8 * (m - lo))) - 1;
    }
}

// Keystream of unit t under one key: ChaCha20 block 1 + t (RFC 8439 §2.8), or AES-CTR blocks
// 2 + 4t .. 5 + 4t (SP 800-38D, counter 2 is the first data block), as little-endian words.
__device__ __forceinline__ void sc_unit_ks_chacha(const uint8_t *key, const uint8_t *nonce, long long t,
                                                  uint32_t ks[16]) {
    uint32_t k[8], nn[3];
    sc_chacha_keys(key, nonce, k, nn);
    sc_chacha20_words(k, (uint32_t)(1 + t), nn, ks);
}

__device__ __forceinline__ void sc_unit_ks_aes(const uint32_t (*te)[256], const uint32_t *rk,
                                               const uint8_t *nonce, long long t, uint32_t ks[16]) {
    uint32_t in[4] = {sc_be32(nonce), sc_be32(nonce + 4), sc_be32(nonce + 8), 0}, o[4];
#pragma unroll
    for (int b = 0; b < 4; b++) {
        in[3] = (uint32_t)(2 + 4 * t + b);
        sc_aes256_tt(te[0], te[1], te[2], te[3], rk, in, o);
#pragma unroll
        for (int q = 0; q < 4; q++) ks[4 * b + q] = sc_ghash_f::bswap(o[q]);
    }
}

// own + pt elementwise in dtype (0 float32, 1 float16, 2 bfloat16), float32 arithmetic and one
// rounding (sc_add_into); whole elements only: 64-byte units hold whole elements of every dtype.
__device__ __forceinline__ void sc_unit_add(uint32_t pt[16], const uint32_t own[16], int dtype) {
#pragma unroll
    for (int q = 0; q < 16; q++) {
        if (dtype == 0) {
            pt[q] = sc_f32_add_bits(own[q], pt[q]);
        } else {
            uint32_t lo = sc_add16((uint16_t)own[q], (uint16_t)pt[q], dtype);
            uint32_t hi = sc_add16((uint16_t)(own[q] >> 16), (uint16_t)(pt[q] >> 16), dtype);
            pt[q] = lo | (hi << 16);
        }
    }
}

// ---- the unit pass: cipher and MAC lanes, one block per (chunk, segment) --------------------------
template <class F, int AES>
__device__ __forceinline__ void sc_units(int mode, const uint8_t *keys, const uint8_t *nonces,
                                         const uint8_t *keys2, const uint8_t *nonces2, const uint8_t *aads,
                                         int aad_stride, int aad_len, const uint8_t *in,
                                         const long long *in_offs, const uint8_t *own,
                                         const long long *own_offs, uint8_t *out, const long long *out_offs,
                                         uint8_t *acc, const long long *lens, const int *ok,
                                         const uint32_t *pw, uint32_t *parts, uint32_t *tails, int dtype,
                                         int n, int max_seg) {
    __shared__ typename F::M mul[SC_LOG_T + 1];  // k (Horner), k^(4 * 2^l) (tree level l)
    __shared__ typename F::E tree[SC_T];
    __shared__ uint32_t te[4][AES ? 256 : 1];
    __shared__ uint32_t rk[2][AES ? 60 : 1];
    const int j = blockIdx.x / max_seg, s = blockIdx.x % max_seg, i = threadIdx.x;
    // Block-uniform exits, before any barrier: the whole block leaves together.
    if (j >= n) return;
    const bool gated = mode == SC_OPEN || mode == SC_HOP || mode == SC_COPY;
    if (gated && ok && !ok[j]) return;
    const bool concat = mode == SC_MAC_CONCAT;
    const long long len = lens[j], slen = concat ? len + aad_len : len;
    if ((long long)s * SC_SEG >= slen) return;
    const bool mac = mode == SC_SEAL || mode == SC_MAC || mode == SC_MAC_CONCAT || mode == SC_HOP;
    const bool cipher = mode == SC_SEAL || mode == SC_OPEN || mode == SC_HOP;

    if (mac && i <= SC_LOG_T) F::make(F::get(pw + ((long long)j * SC_PW + i) * 8), &mul[i]);
    if constexpr (AES) {
        if (cipher) {  // T-tables and round keys in shared memory, once per block
            for (int x = i; x < 256; x += SC_T) sc_aes_te_entry(x, &te[0][x], &te[1][x], &te[2][x], &te[3][x]);
            if (i == 0) sc_aes256_rk32(keys + 32LL * j, rk[0]);
            if (i == 1 && mode == SC_HOP) sc_aes256_rk32(keys2 + 32LL * j, rk[1]);
        }
    }
    __syncthreads();

    const long long t = (long long)s * SC_T + i, off = 64 * t;
    const int m = off < slen ? (int)(slen - off < 64 ? slen - off : 64) : 0;
    uint32_t w[16];
#pragma unroll
    for (int q = 0; q < 16; q++) w[q] = 0;
    if (m > 0) {
        if (concat && off < aad_len) {  // stream = aad row || body; this unit holds AAD bytes
            const uint8_t *a = aads + (long long)aad_stride * j, *b = in + in_offs[j];
#pragma unroll
            for (int q = 0; q < 16; q++) {
                uint32_t v = 0;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const long long p = off + 4 * q + c;
                    if (4 * q + c < m) v |= (uint32_t)(p < aad_len ? a[p] : b[p - aad_len]) << (8 * c);
                }
                w[q] = v;
            }
        } else if (concat) {  // a unit of body only, at any alignment
            sc_unit_load(w, in + in_offs[j] + (off - aad_len), m);
        } else {
            sc_unit_load(w, in + in_offs[j] + off, m);
        }
        if (cipher) {
            uint32_t ks[16];
            if constexpr (AES) sc_unit_ks_aes(te, rk[0], nonces + 12LL * j, t, ks);
            else sc_unit_ks_chacha(keys + 32LL * j, nonces + 12LL * j, t, ks);
#pragma unroll
            for (int q = 0; q < 16; q++) w[q] ^= ks[q];
            if (mode == SC_HOP) {
                uint32_t o[16];
                sc_unit_load(o, own + own_offs[j] + off, m);
                sc_unit_add(w, o, dtype);
                if (acc) sc_unit_store(acc + own_offs[j] + off, w, m);
                if constexpr (AES) sc_unit_ks_aes(te, rk[1], nonces2 + 12LL * j, t, ks);
                else sc_unit_ks_chacha(keys2 + 32LL * j, nonces2 + 12LL * j, t, ks);
#pragma unroll
                for (int q = 0; q < 16; q++) w[q] ^= ks[q];
            }
            sc_unit_mask(w, m);
        }
        if (mode != SC_MAC && mode != SC_MAC_CONCAT) sc_unit_store(out + out_offs[j] + off, w, m);
    }
    if (!mac) return;  // no barrier follows

    // This thread's lane: Horner over its (up to) four MAC blocks.
    typename F::E v = F::zero();
#pragma unroll
    for (int b = 0; b < 4; b++)
        if (16 * b < m) v = F::mul(F::add(v, F::words(w + 4 * b)), mul[0]);
    // Units [0, nfull) are whole and go through the tree; the last unit is the tail.
    const long long units = (slen + 63) / 64, nfull = units - 1, seg0 = (long long)s * SC_T;
    const long long end = nfull < seg0 + SC_T ? nfull : seg0 + SC_T;
    const int cnt = end > seg0 ? (int)(end - seg0) : 0;
    if (t == nfull) F::put(tails + 8LL * j, v);
    // tree[p] = lane value with weight (k^4)^p, p counted back from the segment's last whole unit
    if (i < cnt) tree[cnt - 1 - i] = v;
    else tree[i] = F::zero();
    __syncthreads();
    for (int l = 0; (1 << l) < cnt; l++) {  // block-uniform
        const int d = 1 << l;
        if ((i & (2 * d - 1)) == 0 && i + d < SC_T) tree[i] = F::add(tree[i], F::mul(tree[i + d], mul[1 + l]));
        __syncthreads();
    }
    if (i == 0) F::put(parts + ((long long)j * max_seg + s) * 8, tree[0]);
}

// ---- per-chunk MAC setup and finish (one thread per chunk) ---------------------------------------
template <class F, int AES>
__device__ __forceinline__ void sc_prep(const uint8_t *keys, const uint8_t *nonces, uint32_t *pw, int n) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    uint32_t *P = pw + (long long)j * SC_PW * 8;
    uint8_t pad[16];
    typename F::E k;
    if constexpr (AES) {  // H = E_K(0^128), pad = E_K(J0), J0 = IV || 0^31 || 1
        uint8_t rk[240], z[16] = {0}, hb[16], j0[16];
        sc_aes256_expand(keys + 32LL * j, rk);
        sc_aes256_block(rk, z, hb);
        for (int q = 0; q < 12; q++) j0[q] = nonces[12LL * j + q];
        j0[12] = 0; j0[13] = 0; j0[14] = 0; j0[15] = 1;
        sc_aes256_block(rk, j0, pad);
        k = F::bytes(hb);
    } else {  // one-time key = ChaCha20 block 0: r (clamped), s
        uint32_t kk[8], nn[3];
        uint8_t otk[64];
        sc_chacha_keys(keys + 32LL * j, nonces + 12LL * j, kk, nn);
        sc_chacha20_block(kk, 0, nn, otk);
        for (int q = 0; q < 16; q++) pad[q] = otk[16 + q];
        k = sc_p130_r(otk);
    }
    F::put(P, k);
    typename F::E x = F::mul2(k, k);
    x = F::mul2(x, x);  // k^4
    for (int l = 0; l < SC_LOG_T; l++) {
        F::put(P + 8 * (1 + l), x);
        x = F::mul2(x, x);
    }
    for (int q = 0; q < 4; q++) P[8 * (SC_LOG_T + 1) + q] = sc_le32(pad + 4 * q);
}

template <class F, int AES>
__device__ __forceinline__ void sc_finish(int gmac, const uint8_t *aads, int aad_stride, int aad_len,
                                          const uint32_t *pw, const uint32_t *parts, const uint32_t *tails,
                                          const long long *lens, uint8_t *frames, const long long *fr_offs,
                                          uint8_t *tags, int *ok, const int *gate, int n, int max_seg) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n || (gate && !gate[j])) return;
    const long long len = lens[j], A = gmac ? 0 : aad_len, S = gmac ? len + aad_len : len;
    uint8_t *dst = tags ? tags + 16LL * j : frames + fr_offs[j] + len;  // (tags: a MAC alone)
    if ((S + SC_SEG - 1) / SC_SEG > max_seg) {  // the caller's max_len was short: segments unMACed
        if (ok) ok[j] = 0;
        else for (int q = 0; q < 16; q++) dst[q] = 0;  // a tag that will not verify
        return;
    }
    const uint32_t *P = pw + (long long)j * SC_PW * 8;
    typename F::M mk;
    F::make(F::get(P), &mk);
    typename F::E h = F::zero();
    const uint8_t *a = aads + (long long)aad_stride * j;
    for (long long o = 0; o < A; o += 16) {  // AAD blocks, zero padded (not GMAC: its AAD is in the units)
        uint8_t b[16];
        for (int q = 0; q < 16; q++) b[q] = o + q < A ? a[o + q] : 0;
        h = F::mul(F::add(h, F::bytes(b)), mk);
    }
    if (S > 0) {
        const long long units = (S + 63) / 64, nfull = units - 1, blocks = (S + 15) / 16;
        const int q = (int)(blocks - 4 * nfull);  // MAC blocks of the tail unit, 1..4
        if (nfull > 0) {
            typename F::E kt = F::get(P + 8 * SC_LOG_T);  // k^(4 * SC_T / 2)
            typename F::M mkt;
            F::make(F::mul2(kt, kt), &mkt);              // k^(4 * SC_T): one whole segment
            const long long nseg = (nfull + SC_T - 1) / SC_T;
            for (long long s = 0; s < nseg; s++) {
                const long long c = nfull - s * SC_T < SC_T ? nfull - s * SC_T : SC_T;
                if (c == SC_T) {
                    h = F::mul(h, mkt);
                } else {
                    for (int l = 0; l < SC_LOG_T; l++)
                        if ((c >> l) & 1) h = F::mul2(h, F::get(P + 8 * (1 + l)));
                }
                h = F::add(h, F::get(parts + ((long long)j * max_seg + s) * 8));
            }
        }
        for (int r = 0; r < q; r++) h = F::mul(h, mk);
        h = F::add(h, F::get(tails + 8LL * j));
    }
    uint8_t lb[16];  // length block
    if constexpr (AES) {
        sc_st_be64(lb, (uint64_t)(gmac ? S : A) * 8);
        sc_st_be64(lb + 8, (uint64_t)(gmac ? 0 : S) * 8);
    } else {
        for (int q = 0; q < 8; q++) { lb[q] = (uint8_t)((uint64_t)A >> (8 * q)); lb[8 + q] = (uint8_t)((uint64_t)S >> (8 * q)); }
    }
    h = F::mul(F::add(h, F::bytes(lb)), mk);
    uint8_t pad[16], tag[16];
    for (int q = 0; q < 4; q++) sc_st_le32(pad + 4 * q, P[8 * (SC_LOG_T + 1) + q]);
    if constexpr (AES) {
        sc_st_be64(tag, h.hi);
        sc_st_be64(tag + 8, h.lo);
        for (int q = 0; q < 16; q++) tag[q] ^= pad[q];
    } else {
        sc_p130_tag(h, pad, tag);
    }
    if (ok) ok[j] = sc_tag_diff(tag, dst) == 0;
    else for (int q = 0; q < 16; q++) dst[q] = tag[q];
}

extern "C" {

#define SC_UNITS_ARGS                                                                                   \
    int mode, const uint8_t *keys, const uint8_t *nonces, const uint8_t *keys2, const uint8_t *nonces2, \
        const uint8_t *aads, int aad_stride, int aad_len, const uint8_t *in, const long long *in_offs,  \
        const uint8_t *own, const long long *own_offs, uint8_t *out, const long long *out_offs,         \
        uint8_t *acc, const long long *lens, const int *ok, const uint32_t *pw, uint32_t *parts,        \
        uint32_t *tails, int dtype, int n, int max_seg
#define SC_UNITS_PASS                                                                                 \
    mode, keys, nonces, keys2, nonces2, aads, aad_stride, aad_len, in, in_offs, own, own_offs, out,   \
        out_offs, acc, lens, ok, pw, parts, tails, dtype, n, max_seg

__global__ void __launch_bounds__(SC_T) sc_units_chacha(SC_UNITS_ARGS) {
    sc_units<sc_poly_f, 0>(SC_UNITS_PASS);
}

__global__ void __launch_bounds__(SC_T) sc_units_gcm(SC_UNITS_ARGS) {
    sc_units<sc_ghash_f, 1>(SC_UNITS_PASS);
}

// suite: 0 ChaCha20-Poly1305, 1 AES-256-GCM / GMAC.  One thread per chunk.
__global__ void sc_mac_prep(int suite, const uint8_t *keys, const uint8_t *nonces, uint32_t *pw, int n) {
    if (suite == 0) sc_prep<sc_poly_f, 0>(keys, nonces, pw, n);
    else sc_prep<sc_ghash_f, 1>(keys, nonces, pw, n);
}

// Seal (ok == NULL): write each tag after its body in `frames`; verify: set ok[j].  tags (may be
// NULL): chunk j's tag is tags[16 j .. 16 j + 15] instead, written or compared (frames unused: the
// MAC of a chunk alone).  gate (may be NULL): skip chunks whose gate[j] is 0.  gmac: the units
// MACed aad || body (SC_MAC_CONCAT).
__global__ void sc_mac_finish(int suite, int gmac, const uint8_t *aads, int aad_stride, int aad_len,
                              const uint32_t *pw, const uint32_t *parts, const uint32_t *tails,
                              const long long *lens, uint8_t *frames, const long long *fr_offs, uint8_t *tags,
                              int *ok, const int *gate, int n, int max_seg) {
    if (suite == 0) sc_finish<sc_poly_f, 0>(gmac, aads, aad_stride, aad_len, pw, parts, tails, lens, frames, fr_offs, tags, ok, gate, n, max_seg);
    else sc_finish<sc_ghash_f, 1>(gmac, aads, aad_stride, aad_len, pw, parts, tails, lens, frames, fr_offs, tags, ok, gate, n, max_seg);
}

}  // extern "C"
