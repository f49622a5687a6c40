// Grouped GEMM for mixture-of-experts layers, with the groups read from device memory:
// out[r, :] = x[r, :] @ W[g] for every row r of group g.
//
// The layout is torch._grouped_mm's "2-D x 3-D" case.  x is (rows, K), the rows of each group
// contiguous and in group order; w is (G, K, N), each W[g] stored with n contiguous ("kn") or
// with k contiguous ("nk": the transposed view of a (G, N, K) tensor, as a Linear layer keeps
// its weight); out is (rows, N).  `offs` holds the groups' row offsets as int32 or int64
// (flags bit 0): G + 1 cumulative offsets, group g being rows offs[g] .. offs[g + 1]
// (flags bit 1), or G end offsets with group 0 starting at row 0 (torch's `offs`).
//
// Why the offsets are read here: a MoE layer routes its tokens on the GPU, so the group sizes
// exist in device memory only.  A kernel that reads them when it runs can be captured in a
// CUDA graph once and replayed with any sizes whose total fits the capacity `rows`, with no
// copy to the host.  The grid is sized for the capacity: sum over groups of
// ceil(rows_g / BM) <= (rows + G * (BM - 1)) / BM row tiles ("virtual tiles"), times the
// column tiles.  Each block finds its group by a prefix sum of tiles per group over the
// offsets (one warp-wide scan per 32 groups, done by every warp, so nothing is shared and no
// barrier is needed), and a block whose virtual tile lies past the last group's tiles exits
// at once.  Blocks are numbered in bands of GM_BAND row tiles by every column tile, so the
// blocks resident at one time share a few rows of x and one band of W: both stay in L2.
//
// Bad offsets cannot make the kernel leave its arrays: each offset is clamped to [0, rows]
// and the ends are made non-decreasing with a running maximum (a group whose end lies below
// the end before it is empty), so the groups are disjoint row ranges inside x and out, every
// row of out is written at most once, and rows no group covers are not written at all.
//
// The product: 256 threads (8 warps, 2 along M by 4 along N) compute a BM x 128 tile of out
// (BM = 128 or 64), each warp a (BM / 2) x 32 part as m16n8k16 tensor-core products
// (mma.sync, bf16 or f16 in, f32 accumulation).  K advances 32 at a time through a ring of
// shared-memory stages (3 for BM = 128, 4 for BM = 64: 48 KB either way, the static limit)
// filled by cp.async 16 bytes at a time, STAGES - 1 tiles ahead of the products; rows past
// the group's end and columns past K or N are filled with zeros by the copy itself (a source
// size of 0).  So K and N must be multiples of 8, and the rows of x, w and out 16-byte
// aligned (the wrapper checks).  The tiles are stored with their 16-byte chunks permuted
// (an XOR of the chunk index with bits of the row) so that ldmatrix reads eight rows from
// eight different bank groups.  The accumulators are rounded once and stored as pairs.
//
// grouped_ptrs writes a table of device addresses passed by value into device memory: the
// pointer arrays of cublasGemmGroupedBatchedEx, built on the stream of the call (so also
// inside a graph capture) without a copy from the host.
#include "common.cuh"

#define GM_THREADS 256
#define GM_BN 128
#define GM_BK 32
#define GM_BAND 8
#define GM_FULL 0xffffffffu
#define GP_TABLE 256

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// 16 bytes from global to shared memory; `ok` false reads nothing and writes zeros.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool ok) {
    const int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col), f32 accumulators.
template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma<__half> {
    static __device__ __forceinline__ void run(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// Two adjacent outputs, rounded once.
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(__half* p, float a, float b) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void store2(float* p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
}

__device__ __forceinline__ long long read_offset(const void* offs, bool wide, u32 i) {
    return wide ? reinterpret_cast<const long long*>(offs)[i]
                : (long long)reinterpret_cast<const int*>(offs)[i];
}

__device__ __forceinline__ long long clamp_rows(long long v, long long rows) {
    return v < 0 ? 0 : (v > rows ? rows : v);
}

// The group of virtual row tile `vt`: its first row, the group's end row and the group.
// Every lane of the calling warp gets the same answer; false when `vt` is past the last tile.
template <int BM>
__device__ __forceinline__ bool find_tile(const void* offs, u32 flags, u32 groups,
                                          long long rows, u32 vt, long long& row0,
                                          long long& row_end, u32& group) {
    const u32 lane = threadIdx.x & 31;
    const bool wide = flags & 1u;
    const u32 has_start = (flags >> 1) & 1u;
    long long carry = has_start ? clamp_rows(read_offset(offs, wide, 0), rows) : 0;
    u32 tiles_before = 0;
    for (u32 c0 = 0; c0 < groups; c0 += 32) {
        const u32 gi = c0 + lane;
        long long end = carry;
        if (gi < groups) {
            const long long e = clamp_rows(read_offset(offs, wide, gi + has_start), rows);
            end = e > carry ? e : carry;
        }
        // Running maximum of the ends across the lanes: groups never overlap.
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const long long v = __shfl_up_sync(GM_FULL, end, d);
            if ((int)lane >= d && v > end) end = v;
        }
        long long start = __shfl_up_sync(GM_FULL, end, 1);
        if (lane == 0) start = carry;
        const u32 tiles = (u32)((end - start + BM - 1) / BM);
        u32 incl = tiles;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const u32 v = __shfl_up_sync(GM_FULL, incl, d);
            if ((int)lane >= d) incl += v;
        }
        const u32 before = tiles_before + incl - tiles;
        const u32 hit = __ballot_sync(GM_FULL, tiles != 0 && vt >= before && vt - before < tiles);
        if (hit) {
            const int src = __ffs(hit) - 1;
            const long long s = __shfl_sync(GM_FULL, start, src);
            const u32 b = __shfl_sync(GM_FULL, before, src);
            row_end = __shfl_sync(GM_FULL, end, src);
            row0 = s + (long long)(vt - b) * BM;
            group = c0 + (u32)src;
            return true;
        }
        tiles_before += __shfl_sync(GM_FULL, incl, 31);
        carry = __shfl_sync(GM_FULL, end, 31);
    }
    return false;
}

template <typename T, typename TO, int BM, bool KN>
__device__ __forceinline__ void grouped_mm_impl(const T* __restrict__ x, const T* __restrict__ w,
                                                TO* __restrict__ out, const void* __restrict__ offs,
                                                u32 flags, u32 groups, u32 rows, u32 N, u32 K,
                                                u64 ldx, u64 ldw, u64 sw, u64 ldo) {
    constexpr int STAGES = BM == 128 ? 3 : 4;
    constexpr int WM = BM / 2;                       // rows of a warp's part
    constexpr int MI = WM / 16;                      // its m16 tiles
    constexpr int A_CHUNKS = BM * GM_BK / 8;         // 16-byte chunks of one stage of x
    constexpr int B_CHUNKS = GM_BK * GM_BN / 8;      // and of w
    constexpr int STAGE = A_CHUNKS + B_CHUNKS;
    __shared__ __align__(128) uint4 smem[STAGES * STAGE];

    // This block's virtual row tile and column tile (bands of GM_BAND row tiles).
    const u32 ntiles = (N + GM_BN - 1) / GM_BN;
    const u32 mtiles = (u32)(((u64)rows + (u64)groups * (BM - 1)) / BM);
    const u32 band = GM_BAND * ntiles;
    const u32 first = (blockIdx.x / band) * GM_BAND;
    if (first >= mtiles) return;
    const u32 in_band = mtiles - first < GM_BAND ? mtiles - first : GM_BAND;
    const u32 vt = first + (blockIdx.x % band) % in_band;
    const u32 nt = (blockIdx.x % band) / in_band;
    long long row0, row_end;
    u32 g;
    if (!find_tile<BM>(offs, flags, groups, (long long)rows, vt, row0, row_end, g)) return;

    const T* wg = w + (u64)g * sw;
    const u32 n0 = nt * GM_BN;
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const u32 base = smem_u32(smem);

    // Queue the copies of the K tile starting at k0 into stage `st`.
    auto load = [&](int st, u32 k0) {
        const u32 sa = base + (u32)(st * STAGE) * 16u;
        const u32 sb = sa + (u32)A_CHUNKS * 16u;
#pragma unroll
        for (int it = 0; it < A_CHUNKS / GM_THREADS; ++it) {
            const int i = tid + it * GM_THREADS;
            const int r = i >> 2, c = i & 3;
            const long long gr = row0 + r;
            const u32 gk = k0 + c * 8;
            const bool ok = gr < row_end && gk < K;
            const T* src = ok ? x + (u64)gr * ldx + gk : x;
            cp_async16(sa + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, src, ok);
        }
#pragma unroll
        for (int it = 0; it < B_CHUNKS / GM_THREADS; ++it) {
            const int i = tid + it * GM_THREADS;
            if constexpr (KN) {
                const int r = i >> 4, c = i & 15;     // k row, chunk of 8 n
                const u32 gk = k0 + r, gn = n0 + c * 8;
                const bool ok = gk < K && gn < N;
                const T* src = ok ? wg + (u64)gk * ldw + gn : w;
                cp_async16(sb + (u32)(r * 16 + (c ^ (r & 7))) * 16u, src, ok);
            } else {
                const int r = i >> 2, c = i & 3;      // n row, chunk of 8 k
                const u32 gn = n0 + r, gk = k0 + c * 8;
                const bool ok = gn < N && gk < K;
                const T* src = ok ? wg + (u64)gn * ldw + gk : w;
                cp_async16(sb + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, src, ok);
            }
        }
    };

    float acc[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    const u32 ktiles = (K + GM_BK - 1) / GM_BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if ((u32)s < ktiles) load(s, (u32)s * GM_BK);
        cp_async_commit();
    }
    const int j = lane >> 3;            // which 8x8 matrix of an ldmatrix.x4 this lane addresses
    for (u32 kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();                // tile kt is in; the stage refilled below is free
        const u32 next = kt + STAGES - 1;
        if (next < ktiles) load((int)(next % STAGES), next * GM_BK);
        cp_async_commit();
        const u32 sa = base + (kt % STAGES) * (u32)STAGE * 16u;
        const u32 sb = sa + (u32)A_CHUNKS * 16u;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            u32 a[MI][4];
            u32 b[4][2];
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) {
                const int r = wm * WM + mi * 16 + (j & 1) * 8 + (lane & 7);
                const int c = 2 * kk + (j >> 1);
                ldsm_x4(sa + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, a[mi][0], a[mi][1],
                        a[mi][2], a[mi][3]);
            }
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                if constexpr (KN) {
                    const int r = kk * 16 + (j & 1) * 8 + (lane & 7);
                    const int c = wn * 4 + np * 2 + (j >> 1);
                    ldsm_x4_t(sb + (u32)(r * 16 + (c ^ (r & 7))) * 16u, b[2 * np][0],
                              b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
                } else {
                    const int r = wn * 32 + (np * 2 + (j >> 1)) * 8 + (lane & 7);
                    const int c = 2 * kk + (j & 1);
                    ldsm_x4(sb + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, b[2 * np][0],
                            b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
                }
            }
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) Mma<T>::run(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
    cp_async_wait<0>();                 // no copy may outlive the block

    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long r = row0 + wm * WM + mi * 16 + h * 8 + gq;
            if (r >= row_end) continue;
            TO* dst = out + (u64)r * ldo;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const u32 col = n0 + wn * 32 + ni * 8 + tq * 2;
                if (col < N) store2(dst + col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
            }
        }
}

#define GROUPED_MM(NAME, T, TO, BM, KN)                                                        \
    extern "C" __global__ void __launch_bounds__(GM_THREADS, 2)                                \
        NAME(const T* x, const T* w, TO* out, const void* offs, u32 flags, u32 groups,         \
             u32 rows, u32 N, u32 K, u64 ldx, u64 ldw, u64 sw, u64 ldo) {                      \
        grouped_mm_impl<T, TO, BM, KN>(x, w, out, offs, flags, groups, rows, N, K, ldx, ldw,  \
                                       sw, ldo);                                               \
    }

#define GROUPED_MM_OUTS(DT, T, LAYOUT, KN, BM)                                                 \
    GROUPED_MM(grouped_mm_##DT##_##LAYOUT##_m##BM##_##DT, T, T, BM, KN)                       \
    GROUPED_MM(grouped_mm_##DT##_##LAYOUT##_m##BM##_f32, T, float, BM, KN)

#define GROUPED_MM_TILES(DT, T, LAYOUT, KN)                                                    \
    GROUPED_MM_OUTS(DT, T, LAYOUT, KN, 128)                                                    \
    GROUPED_MM_OUTS(DT, T, LAYOUT, KN, 64)

GROUPED_MM_TILES(bf16, __nv_bfloat16, kn, true)
GROUPED_MM_TILES(bf16, __nv_bfloat16, nk, false)
GROUPED_MM_TILES(f16, __half, kn, true)
GROUPED_MM_TILES(f16, __half, nk, false)

// A table of up to GP_TABLE device addresses, passed by value.
struct PtrTable {
    u64 p[GP_TABLE];
};

extern "C" __global__ void grouped_ptrs(u64* dst, u32 count, PtrTable table) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count && i < GP_TABLE) dst[i] = table.p[i];
}
