// railstore's cuda engine: out[r] (^)= sum_c A[r][c] * in[c] over GF(2^8), compiled at run
// time by NVRTC. The same nibble tables as the PSHUFB engines (per coefficient: its products
// with 0..15, then with 0x00, 0x10, .. 0xF0), looked up four bytes at a time with PRMT: PRMT
// picks bytes out of two registers, so an 8-entry table half is one instruction and a
// 16-entry table two, merged by the nibble's top bit.
//
// Layout: a launch codes `stripes` stripes. Stripe s's input c starts at
// in + s * in_stripe + c * pitch and output r at out + s * out_stripe + r * pitch, in 16-byte
// words; the host pads each shard to whole words. One thread codes one word of every shard of
// one stripe, for R outputs (a template parameter, so the accumulators stay in registers).

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// One input word, prepared once for every output: PRMT selectors for the low and the high
// nibbles' three low bits, and masks of the bytes whose nibble has its top bit set.
struct Prepared {
    u32 sel_lo, sel_hi, top_lo, top_hi;
};

// Packs the 3-bit values in bytes 0..3 of v into the four selector nibbles PRMT reads.
__device__ __forceinline__ u32 pack_selector(u32 v) {
    return prmt(v | (v >> 4), 0, 0x4420);
}

__device__ __forceinline__ Prepared prepare(u32 x) {
    Prepared p;
    p.sel_lo = pack_selector(x & 0x07070707u);
    p.sel_hi = pack_selector((x >> 4) & 0x07070707u);
    // A selector nibble with its top bit set replicates the sign bit of the byte it picks:
    // shifting bit 3 of each byte into bit 7 turns it into a byte mask.
    p.top_lo = prmt(x << 4, 0, 0xBA98);
    p.top_hi = prmt(x, 0, 0xBA98);
    return p;
}

// The product of four bytes with one coefficient, from the halves of its table: products with
// the low nibbles 0..15 and with the high nibbles 0x00..0xF0.
__device__ __forceinline__ u32 mul4(const uint4 lo, const uint4 hi, const Prepared p) {
    u32 l = (prmt(lo.x, lo.y, p.sel_lo) & ~p.top_lo) | (prmt(lo.z, lo.w, p.sel_lo) & p.top_lo);
    u32 h = (prmt(hi.x, hi.y, p.sel_hi) & ~p.top_hi) | (prmt(hi.z, hi.w, p.sel_hi) & p.top_hi);
    return l ^ h;
}

template <int R>
__device__ __forceinline__ void apply_rows(const uint4* __restrict__ in, uint4* __restrict__ out,
                                           const uint4* __restrict__ tables, int cols, int row0,
                                           u32 pitch, u32 stripes, u64 in_stripe,
                                           u64 out_stripe, int accumulate) {
    // This block's R rows of tables, 32 bytes per coefficient, staged in shared memory so
    // every thread reads them as broadcasts.
    extern __shared__ uint4 shared_tables[];
    const int count = R * cols * 2;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        shared_tables[i] = tables[(u64)row0 * cols * 2 + i];
    }
    __syncthreads();

    // One flat index over (stripe, word), so small shards still fill whole blocks; the host
    // keeps stripes * pitch below 2^32.
    const u32 g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= stripes * pitch) {
        return;
    }
    const u32 s = g / pitch;
    const u32 w = g - s * pitch;
    const uint4* src = in + s * in_stripe + w;
    uint4* dst = out + s * out_stripe + (u64)row0 * pitch + w;

    u32 acc[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (accumulate) {
            const uint4 o = dst[(u64)r * pitch];
            acc[r][0] = o.x;
            acc[r][1] = o.y;
            acc[r][2] = o.z;
            acc[r][3] = o.w;
        } else {
            acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0;
        }
    }

#pragma unroll 2
    for (int c = 0; c < cols; ++c) {
        const uint4 x = __ldg(src + (u64)c * pitch);
        const Prepared p0 = prepare(x.x), p1 = prepare(x.y), p2 = prepare(x.z),
                       p3 = prepare(x.w);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint4 lo = shared_tables[(r * cols + c) * 2];
            const uint4 hi = shared_tables[(r * cols + c) * 2 + 1];
            acc[r][0] ^= mul4(lo, hi, p0);
            acc[r][1] ^= mul4(lo, hi, p1);
            acc[r][2] ^= mul4(lo, hi, p2);
            acc[r][3] ^= mul4(lo, hi, p3);
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r) {
        dst[(u64)r * pitch] = make_uint4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
}

#define GF_APPLY(R)                                                                        \
    extern "C" __global__ void gf_apply_r##R(const uint4* __restrict__ in,                 \
                                             uint4* __restrict__ out,                      \
                                             const uint4* __restrict__ tables, int cols,   \
                                             int row0, u32 pitch, u32 stripes,             \
                                             u64 in_stripe, u64 out_stripe, int accumulate) { \
        apply_rows<R>(in, out, tables, cols, row0, pitch, stripes, in_stripe, out_stripe,   \
                      accumulate);                                                         \
    }

GF_APPLY(1)
GF_APPLY(2)
GF_APPLY(3)
GF_APPLY(4)
