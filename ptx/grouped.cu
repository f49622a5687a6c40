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
// The weight gradient (grouped_wgrad_*): out[g] = x_g^T @ dy_g, x_g and dy_g the rows of
// group g, the reduction running over those rows -- the backward of the product above with
// respect to W ("K-grouped").  The grid is every BM x 128 tile of every group's M x N product
// (G * mtiles * ntiles blocks, banded within a group like the forward's); each block finds its
// group's rows with one running maximum over the first g + 2 offsets (the same clamping, so
// the same groups), then streams 32 rows of x (BM columns) and of dy (128 columns) per stage
// with the same copies and the same products: x^T is the A operand, stored as it lies in x
// (the reduction along the rows), so ldmatrix.trans gives its row-major fragments, exactly as
// it gives the B fragments of a "kn" W.  An empty group writes zeros, or with flags bit 2
// (accumulate: out += x_g^T dy_g, rounded once) leaves out[g] untouched.  The wrapper swaps
// the operands (out[g]^T = dy_g^T @ x_g) for an out that is the transposed view of a (G, N, K)
// array.
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

// Two adjacent values of an output, widened (what an accumulating store adds to).
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 load2(const __half* p) {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 load2(const float* p) {
    return *reinterpret_cast<const float2*>(p);
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

// Block `b` of a grid numbered in bands of GM_BAND row tiles by every column tile: its row
// tile `mt` and column tile `nt`, so the blocks resident at one time share a few row tiles of
// one operand and a band of the other; false for a block past the last row tile.
__device__ __forceinline__ bool band_tile(u32 b, u32 mtiles, u32 ntiles, u32& mt, u32& nt) {
    const u32 band = GM_BAND * ntiles;
    const u32 first = (b / band) * GM_BAND;
    if (first >= mtiles) return false;
    const u32 in_band = mtiles - first < GM_BAND ? mtiles - first : GM_BAND;
    mt = first + (b % band) % in_band;
    nt = (b % band) / in_band;
    return true;
}

// Byte offset of 16-byte chunk `c` of row `r` in a shared tile of CPR (8 or more) chunks a
// row, stored XOR-permuted by the low bits of the row: ldmatrix reads one chunk column of
// eight consecutive rows from eight different bank groups.
template <int CPR> __device__ __forceinline__ u32 swz(int r, int c) {
    return (u32)(r * CPR + (c ^ (r & 7))) * 16u;
}

// Queue the copy of a ROWS x (CPR * 8) tile of a row-major matrix `m` (row stride `ld`) into
// the shared tile at `dst`: tile row r is row `row0 + r` of the matrix, its chunk c columns
// `col0 + 8c` on; rows from `row_end` on and columns from `cols` on are filled with zeros by
// the copy itself.
template <int ROWS, int CPR, typename T>
__device__ __forceinline__ void copy_rows(u32 dst, const T* m, u64 ld, long long row0,
                                          long long row_end, u32 col0, u32 cols, int tid) {
#pragma unroll
    for (int it = 0; it < ROWS * CPR / GM_THREADS; ++it) {
        const int i = tid + it * GM_THREADS;
        const int r = i / CPR, c = i % CPR;
        const long long gr = row0 + r;
        const u32 gc = col0 + c * 8;
        const bool ok = gr < row_end && gc < cols;
        cp_async16(dst + swz<CPR>(r, c), ok ? m + (u64)gr * ld + gc : m, ok);
    }
}

// The B fragments of warp column `wn` (32 columns) for the kk-th 16-deep slice of a stage
// that copy_rows<GM_BK, GM_BN / 8> filled (reduction along the rows, columns contiguous):
// ldmatrix.trans turns its rows into the column-major fragments mma.sync takes.
__device__ __forceinline__ void b_frags_rows(u32 sb, int kk, int wn, u32 (&b)[4][2]) {
    const int lane = threadIdx.x & 31, j = lane >> 3;
#pragma unroll
    for (int np = 0; np < 2; ++np) {
        const int r = kk * 16 + (j & 1) * 8 + (lane & 7);
        const int c = wn * 4 + np * 2 + (j >> 1);
        ldsm_x4_t(sb + swz<GM_BN / 8>(r, c), b[2 * np][0], b[2 * np][1], b[2 * np + 1][0],
                  b[2 * np + 1][1]);
    }
}

// The main loop of the grouped kernels: `steps` slices of GM_BK along the reduction, each
// staged by `load(stage address, step)` (cp.async into a ring of STAGES stages of STAGE
// chunks, STAGES - 1 slices ahead of the products) and multiplied by every warp into its
// (MI * 16) x 32 accumulators, with the operand fragments `frags(stage address, kk, a, b)`
// of each 16-deep half.  No copy outlives it.
template <typename T, int MI, int STAGES, int STAGE, typename Load, typename Frags>
__device__ __forceinline__ void mma_pipeline(u32 base, u32 steps, float (&acc)[MI][4][4],
                                             Load load, Frags frags) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if ((u32)s < steps) load(base + (u32)(s * STAGE) * 16u, (u32)s);
        cp_async_commit();
    }
    for (u32 kt = 0; kt < steps; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();                // slice kt is in; the stage refilled below is free
        const u32 next = kt + STAGES - 1;
        if (next < steps) load(base + (next % STAGES) * (u32)STAGE * 16u, next);
        cp_async_commit();
        const u32 sa = base + (kt % STAGES) * (u32)STAGE * 16u;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            u32 a[MI][4];
            u32 b[4][2];
            frags(sa, kk, a, b);
#pragma unroll
            for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni) Mma<T>::run(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
    cp_async_wait<0>();                 // no copy may outlive the block
}

// Store a warp's accumulators: rows row0 .. row0 + MI * 16 below `row_end`, columns
// col0 .. col0 + 32 below `cols`, row stride `ld`; with `add`, added to what out holds.
// Rounded once, two adjacent columns at a time.
template <int MI, typename TO>
__device__ __forceinline__ void store_tile(const float (&acc)[MI][4][4], TO* out, u64 ld,
                                           long long row0, long long row_end, u32 col0,
                                           u32 cols, bool add) {
    const int lane = threadIdx.x & 31;
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long r = row0 + mi * 16 + h * 8 + gq;
            if (r >= row_end) continue;
            TO* dst = out + (u64)r * ld;
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const u32 col = col0 + ni * 8 + tq * 2;
                if (col >= cols) continue;
                float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
                if (add) {
                    const float2 o = load2(dst + col);
                    v0 += o.x;
                    v1 += o.y;
                }
                store2(dst + col, v0, v1);
            }
        }
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

    // This block's virtual row tile and column tile.
    const u32 ntiles = (N + GM_BN - 1) / GM_BN;
    const u32 mtiles = (u32)(((u64)rows + (u64)groups * (BM - 1)) / BM);
    u32 vt, nt;
    if (!band_tile(blockIdx.x, mtiles, ntiles, vt, nt)) return;
    long long row0, row_end;
    u32 g;
    if (!find_tile<BM>(offs, flags, groups, (long long)rows, vt, row0, row_end, g)) return;

    const T* wg = w + (u64)g * sw;
    const u32 n0 = nt * GM_BN;
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int j = lane >> 3;            // which 8x8 matrix of an ldmatrix.x4 this lane addresses

    // Queue the copies of K slice `step` into the stage at `sa`: x's tile is BM rows of 4
    // chunks (its own permutation: 4 chunks a row), w's is 32 k rows of 128 n ("kn") or 128
    // n rows of 4 chunks of k ("nk").
    auto load = [&](u32 sa, u32 step) {
        const u32 k0 = step * GM_BK;
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
        if constexpr (KN) {
            copy_rows<GM_BK, GM_BN / 8>(sb, wg, ldw, k0, K, n0, N, tid);
        } else {
#pragma unroll
            for (int it = 0; it < B_CHUNKS / GM_THREADS; ++it) {
                const int i = tid + it * GM_THREADS;
                const int r = i >> 2, c = i & 3;      // n row, chunk of 8 k
                const u32 gn = n0 + r, gk = k0 + c * 8;
                const bool ok = gn < N && gk < K;
                const T* src = ok ? wg + (u64)gn * ldw + gk : w;
                cp_async16(sb + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, src, ok);
            }
        }
    };
    auto frags = [&](u32 sa, int kk, u32 (&a)[MI][4], u32 (&b)[4][2]) {
        const u32 sb = sa + (u32)A_CHUNKS * 16u;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int r = wm * WM + mi * 16 + (j & 1) * 8 + (lane & 7);
            const int c = 2 * kk + (j >> 1);
            ldsm_x4(sa + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, a[mi][0], a[mi][1],
                    a[mi][2], a[mi][3]);
        }
        if constexpr (KN) {
            b_frags_rows(sb, kk, wn, b);
        } else {
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                const int r = wn * 32 + (np * 2 + (j >> 1)) * 8 + (lane & 7);
                const int c = 2 * kk + (j & 1);
                ldsm_x4(sb + (u32)(r * 4 + (c ^ ((r >> 1) & 3))) * 16u, b[2 * np][0],
                        b[2 * np][1], b[2 * np + 1][0], b[2 * np + 1][1]);
            }
        }
    };
    float acc[MI][4][4];
    mma_pipeline<T, MI, STAGES, STAGE>(smem_u32(smem), (K + GM_BK - 1) / GM_BK, acc, load,
                                       frags);
    store_tile<MI>(acc, out, ldo, row0 + wm * WM, row_end, n0 + wn * 32, N, false);
}

// The rows [start, end) of group g as the kernels read the offsets: each clamped to
// [0, rows], the ends a running maximum (find_tile's rule).  In the cumulative form f (f[0]
// = offs[0] with G + 1 offsets, 0 with G ends), start is the largest of f[0..g] and end the
// largest of f[0..g+1].  Every lane of the calling warp gets the same answer.
__device__ __forceinline__ void group_rows(const void* offs, u32 flags, u32 g, long long rows,
                                           long long& start, long long& end) {
    const u32 lane = threadIdx.x & 31;
    const bool wide = flags & 1u;
    const u32 has_start = (flags >> 1) & 1u;
    long long s = 0, e = 0;             // the clamped offsets are never below 0
    for (u32 i = lane; i <= g + 1; i += 32) {
        const long long v =
            has_start || i ? clamp_rows(read_offset(offs, wide, i - 1 + has_start), rows) : 0;
        if (i <= g && v > s) s = v;
        if (v > e) e = v;
    }
#pragma unroll
    for (int d = 16; d; d >>= 1) {
        const long long so = __shfl_xor_sync(GM_FULL, s, d);
        const long long eo = __shfl_xor_sync(GM_FULL, e, d);
        if (so > s) s = so;
        if (eo > e) e = eo;
    }
    start = s;
    end = e;
}

// The weight gradient: out[g] (M x N, row stride ldo, group stride so) = x_g^T @ dy_g, x_g
// and dy_g the rows of group g of x (rows x M) and dy (rows x N).  Block b is group
// b / (mtiles * ntiles) and a BM x 128 tile of its product, banded like the forward's.
template <typename T, typename TO, int BM>
__device__ __forceinline__ void grouped_wgrad_impl(const T* __restrict__ x,
                                                   const T* __restrict__ dy,
                                                   TO* __restrict__ out,
                                                   const void* __restrict__ offs, u32 flags,
                                                   u32 groups, u32 rows, u32 M, u32 N, u64 ldx,
                                                   u64 ldd, u64 so, u64 ldo) {
    constexpr int STAGES = BM == 128 ? 3 : 4;
    constexpr int WM = BM / 2;
    constexpr int MI = WM / 16;
    constexpr int A_CHUNKS = GM_BK * BM / 8;         // 32 rows of BM columns of x
    constexpr int B_CHUNKS = GM_BK * GM_BN / 8;      // 32 rows of 128 columns of dy
    constexpr int STAGE = A_CHUNKS + B_CHUNKS;
    __shared__ __align__(128) uint4 smem[STAGES * STAGE];

    const u32 mtiles = (M + BM - 1) / BM, ntiles = (N + GM_BN - 1) / GM_BN;
    const u32 per_group = mtiles * ntiles;
    const u32 g = blockIdx.x / per_group;
    u32 mt, nt;
    if (g >= groups || !band_tile(blockIdx.x % per_group, mtiles, ntiles, mt, nt)) return;
    long long start, end;
    group_rows(offs, flags, g, (long long)rows, start, end);
    const bool add = flags & 4u;
    // An empty group adds nothing: out is left as it is, bit for bit (-0 + 0 would be +0).
    if (add && end <= start) return;

    const u32 m0 = mt * BM, n0 = nt * GM_BN;
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int j = lane >> 3;

    // Both operands are tiles of 32 rows of the group: x's columns m0.., dy's n0...
    auto load = [&](u32 sa, u32 step) {
        const long long r0 = start + (long long)step * GM_BK;
        copy_rows<GM_BK, BM / 8>(sa, x, ldx, r0, end, m0, M, tid);
        copy_rows<GM_BK, GM_BN / 8>(sa + (u32)A_CHUNKS * 16u, dy, ldd, r0, end, n0, N, tid);
    };
    // x^T is the A operand: its stage holds A column-major (the reduction along the rows), so
    // ldmatrix.trans gives the row-major fragments; 8x8 matrix j of a fragment is rows
    // (reduction) 8 (j >> 1) on, columns (M) 8 (j & 1) on.
    auto frags = [&](u32 sa, int kk, u32 (&a)[MI][4], u32 (&b)[4][2]) {
        const int r = kk * 16 + (j >> 1) * 8 + (lane & 7);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int c = (wm * WM + mi * 16) / 8 + (j & 1);
            ldsm_x4_t(sa + swz<BM / 8>(r, c), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
        }
        b_frags_rows(sa + (u32)A_CHUNKS * 16u, kk, wn, b);
    };
    float acc[MI][4][4];
    const u32 steps = (u32)((end - start + GM_BK - 1) / GM_BK);
    mma_pipeline<T, MI, STAGES, STAGE>(smem_u32(smem), steps, acc, load, frags);
    store_tile<MI>(acc, out + (u64)g * so, ldo, (long long)(m0 + wm * WM), (long long)M,
                   n0 + wn * 32, N, add);
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

#define GROUPED_WGRAD(NAME, T, TO, BM)                                                         \
    extern "C" __global__ void __launch_bounds__(GM_THREADS, 2)                                \
        NAME(const T* x, const T* dy, TO* out, const void* offs, u32 flags, u32 groups,        \
             u32 rows, u32 M, u32 N, u64 ldx, u64 ldd, u64 so, u64 ldo) {                      \
        grouped_wgrad_impl<T, TO, BM>(x, dy, out, offs, flags, groups, rows, M, N, ldx, ldd,  \
                                      so, ldo);                                                \
    }

#define GROUPED_WGRAD_TILES(DT, T)                                                             \
    GROUPED_WGRAD(grouped_wgrad_##DT##_m128_##DT, T, T, 128)                                  \
    GROUPED_WGRAD(grouped_wgrad_##DT##_m128_f32, T, float, 128)                               \
    GROUPED_WGRAD(grouped_wgrad_##DT##_m64_##DT, T, T, 64)                                    \
    GROUPED_WGRAD(grouped_wgrad_##DT##_m64_f32, T, float, 64)

GROUPED_WGRAD_TILES(bf16, __nv_bfloat16)
GROUPED_WGRAD_TILES(f16, __half)

// A table of up to GP_TABLE device addresses, passed by value.
struct PtrTable {
    u64 p[GP_TABLE];
};

extern "C" __global__ void grouped_ptrs(u64* dst, u32 count, PtrTable table) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count && i < GP_TABLE) dst[i] = table.p[i];
}
