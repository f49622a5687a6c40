// Grouped GEMM for mixture-of-experts layers on Hopper (sm_90a), with the groups read from
// device memory: out[r, :] = x[r, :] @ W[g] for every row r of group g (grouped90_*), and
// its weight gradient out[g] = a_g^T @ b_g (grouped90_wgrad_*, below).
//
// The problem and its arguments are those of grouped.cu (read its notes first): x is
// (rows, K), w is (G, K, N) with n contiguous ("kn") or k contiguous ("nk"), out is
// (rows, N), `offs` holds G + 1 cumulative or G end offsets, int32 or int64 (flags bits 0
// and 1); each offset is clamped to [0, rows] and the ends are made non-decreasing, so the
// groups are disjoint row ranges and rows no group covers are not written.  Two arguments
// follow those of grouped.cu: the TMA tensor maps of x and w, made on the host with
// cuTensorMapEncodeTiled (128-byte swizzle, 16-bit elements) and passed by value:
//
//   x:        dims {K, rows},    strides {ldx} (bytes),         box {64, BM}
//   w, "kn":  dims {N, K, Gw},   strides {ldw, sw} (bytes),     box {64, 64, 1}
//   w, "nk":  dims {K, N, Gw},   strides {ldw, sw} (bytes),     box {64, BN, 1}
//
// with Gw = G (Gw = 1 and any valid stride when sw == 0: the kernel then reads group 0's
// coordinates for every group, as the other kernels do with a zero group stride).
//
// Why one map over the whole of x serves every group: a tile of a group starts at a row the
// device computes and is loaded as BM rows from there.  Rows past the group's end belong to
// the next groups (or lie past the end of x, which TMA fills with zeros); they only make
// output rows the epilogue does not store, so nothing of another group reaches this one.
// K and N past their ends are zeros too, so K and N need not be multiples of the tile.
//
// The work: persistent blocks of 384 threads, one per SM (the grid is the SM count, or
// fewer), each looping over output tiles t = blockIdx.x, + gridDim.x, ... of BM x BN.  The
// row tiles are the groups' (ceil(rows_g / BM) each, found by a prefix sum over the offsets
// as in grouped.cu), numbered in bands of G9_BAND row tiles by every column tile, so the
// blocks working at one time share a few rows of x and a band of W in L2.
//  - Warp 0 (the producer) loads the K steps of its tiles, 64 deep, with TMA into a ring of
//    STAGES shared-memory stages guarded by mbarriers: "full" (one arrival with the byte
//    count, then the copies' bytes) and "empty" (one arrival per consumer warp).  With the
//    first stage of a tile it writes the tile's rows and first column beside the stage.
//  - Two consumer warpgroups multiply each stage with wgmma (m64nNk16, both operands read
//    from shared memory through matrix descriptors, fp32 accumulators in registers): for
//    BM = 128 each takes 64 rows of the tile, for BM = 64 each takes half the columns.  A
//    stage is released when the products of the next stage are issued and it is complete
//    (wgmma.wait_group 1), so the tensor cores always have a stage queued.
//  - The epilogue rounds the accumulators and stores rows below the group's end and columns
//    below N: straight from registers, or (BULK, 16-bit outputs) through a padded
//    shared-memory tile written out one row at a time by bulk copies (cp.async.bulk), which
//    run while the next tile's products do.
//
// Shared memory layout (dynamic; a launch must give G9Smem<...>::TOTAL bytes: 1024 of
// alignment slack + STAGES * (BM + BN) * 128 + 32 * STAGES rounded up to 128 + for BULK with
// 16-bit outputs 2 * 64 * (WN * 2 + 16), WN = the columns of a consumer warpgroup): STAGES
// stages of [x: BM rows x 128 B][w: BN x 128 B], 1024-aligned (the period of the 128-byte
// swizzle); the full and empty barriers (8 B each); the tile records (16 B per stage); for
// BULK two staging tiles of 64 rows, padded 16 B a row so that the stores from registers hit
// 32 different banks.  A block given less, or a problem with K, N or rows 0 (the host must
// write the zeros of K == 0 itself: a tensor map cannot have an empty dimension), returns at
// once, writing nothing.
//
// The weight gradient (grouped90_wgrad_*): out[g] = a_g^T @ b_g, a_g and b_g the rows of
// group g of a (rows, M) and b (rows, N) -- the "K-grouped" product of grouped.cu's
// grouped_wgrad_* (read its notes: the same arguments, offsets, clamping, flags and
// semantics), built from the pieces above.  The arguments are grouped_wgrad_*'s -- a (x, or
// dy for an out that is the transposed view of a (G, N, K) array: the wrapper swaps the
// operands), b, out, offs, flags, groups, rows, M, N, lda, ldb, so, ldo -- then the TMA
// tensor maps of a and b (128-byte swizzle, 16-bit):
//
//   a:  dims {M, rows},  strides {lda} (bytes),  box {64, 64}
//   b:  dims {N, rows},  strides {ldb} (bytes),  box {64, 64}
//
// flags: bit 0 int64 offsets, bit 1 G + 1 cumulative offsets (else G ends), bit 2 accumulate
// (out[g] += a_g^T b_g, rounded once; an empty group leaves out[g] untouched, bit for bit).
// Without bit 2 an empty group's out[g] is written with zeros.  Every element of out[g]
// (M x N, row stride ldo, group stride so) is written once.
//
//  - The product: the reduction runs over a group's rows, which only the device knows.  Each
//    output tile (BM rows of M by BN columns of N, of one group) loops over the group's rows
//    64 at a time.  A stage holds, for 64 rows from row r, the boxes of a at columns m0..
//    (64 x 64, one per 64 columns of M) and the boxes of b at columns n0..: the rows along
//    the reduction, M (and N) contiguous.  So both wgmma operands are "MN-major" (the
//    transpose bits set), laid out exactly as the forward's "kn" w: rows of 128 B (64
//    elements), eight rows per 1024-B swizzle atom, stride byte offset 1024 (between groups
//    of eight rows along the reduction), leading byte offset 8192 (between boxes of 64 along
//    M or N); the k16 slice kk of a stage starts kk * 2048 B in.
//  - Rows past a group's end: one map over the whole of a (and of b) serves every group, so
//    the last stage of a group whose size is no multiple of 64 holds rows of the next groups
//    (or, past the end of the arrays, TMA's zeros).  They must add nothing, and may hold
//    anything (rows no group covers are never read by the sm_80 kernel; NaN there must not
//    leak), so the consumer warpgroups zero those rows of the whole stage in shared memory
//    before any product reads it: a 128-byte swizzle permutes the 16-byte chunks within each
//    128-byte row only, so row r of a box is bytes r * 128 .. r * 128 + 127 of it whatever
//    the swizzle.  Each thread fences its stores to the async proxy (fence.proxy.async) and
//    the 256 consumer threads meet at a named barrier before the wgmmas.  Once per tile, at
//    most.
//  - The schedule: persistent blocks of 384 threads, one per SM.  Each block first reads the
//    offsets (warp 0: the clamped, non-decreasing group rows, as grouped.cu's) into a table
//    in shared memory and ranks the groups by size, largest first (ties by index); tile t is
//    then rank t / (mtiles * ntiles) and, within it, banded like the forward's (G9_BAND row
//    tiles of M by every column tile).  Block b takes tiles b, 2P - 1 - b, 2P + b, ... (P
//    blocks: a "snake" over the rounds), so with the tiles in decreasing cost every block
//    ends with about the same work.  Up to G9W_GMAX groups fit the table; a launch with more
//    returns at once, writing nothing (the host falls back to grouped.cu).
//  - Warp 0 lane 0 is the producer (TMA into a ring of STAGES stages guarded by full/empty
//    mbarriers, as the forward's); warps 4-11 the two consumer warpgroups: for BM = 128 each
//    takes 64 rows of M of the tile, for BM = 64 each half its columns.  A stage is released
//    once the products of the next are issued and it is complete (wgmma.wait_group 1).  The
//    epilogue stores from registers, adding what out holds with bit 2: rows below M, columns
//    below N (N even: pairs never straddle the edge; the wrapper requires multiples of 8).
//    The "s" tiles (BULK) with 16-bit outputs and without bit 2 write through a padded
//    staging tile per warpgroup and bulk copies, one row at a time, as the forward's staged
//    epilogue (the copies run while the next tile's products do); they need out's rows and
//    group stride to be multiples of 8 elements and N a multiple of 8 (16-byte copies), as
//    the wrapper checks.
//  - Shared memory (dynamic; a launch gives G9WSmem<...>::TOTAL): 1024 of alignment slack,
//    the stages [a: BM / 64 boxes][b: BN / 64 boxes] of 8192 B each, the 2 * STAGES barriers
//    rounded to 128 B, for BULK with 16-bit outputs two staging tiles of 64 rows (WN * 2 + 16
//    B a row), the ranked table (16 B a group) and the groups' rows (8 B a group) for
//    G9W_GMAX groups.  A block given less, or M, N or rows 0, returns at once, writing
//    nothing.
//
// Registers: the accumulators of a 64 x 256 warpgroup tile are 128 per thread; ptxas fits
// every kernel in at most the 168 that 384 threads per SM leave (the weight gradient's
// 128 x 256 tiles use 166-168, every other kernel at most 160), without spills, so the
// warpgroups need no setmaxnreg rebalancing.
//
// Target: wgmma needs sm_90a, whose code runs on compute capability 9.0 only (an "a" target
// is not forward compatible): the loader must refuse other GPUs, older and newer, and the
// caller fall back to grouped.cu.
//
// Descriptor encoding (PTX ISA "matrix descriptor"): start address >> 4 in bits 0-13,
// leading byte offset >> 4 in bits 16-29, stride byte offset >> 4 in bits 32-45, swizzle
// mode in bits 62-63 (1: 128 B).  K-major tiles (x, and w "nk"): rows of 64 k (128 B), eight
// rows per 1024-B swizzle atom, stride byte offset 1024, leading byte offset unused (16);
// the k16 slice kk of a stage starts kk * 32 B into the rows (the hardware applies the
// swizzle to the address it computes, as TMA did when it stored).  N-major w ("kn", the
// transpose bit set): boxes of 64 n by 64 k, each a column of atoms; stride byte offset
// 1024 (between groups of 8 k), leading byte offset 8192 (between boxes of 64 n); the k16
// slice kk starts kk * 2048 B in.  The weight gradient's a and b are both laid out so.
#include "common.cuh"

#define G9_THREADS 384
#define G9_BK 64
#define G9_BAND 8
#define G9_FULL 0xffffffffu
#define G9_CONSUMER_WARPS 8

// A CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TensorMap {
    u64 bits[16];
};

__device__ __forceinline__ u32 g9_smem_u32(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// -- offsets and tiles (the clamping rules of grouped.cu) ----------------------------------------
__device__ __forceinline__ long long g9_offset(const void* offs, bool wide, u32 i) {
    return wide ? reinterpret_cast<const long long*>(offs)[i]
                : (long long)reinterpret_cast<const int*>(offs)[i];
}

__device__ __forceinline__ long long g9_clamp(long long v, long long rows) {
    return v < 0 ? 0 : (v > rows ? rows : v);
}

// The rows [start, end) of group `gi` (lane gi % 32 of the calling warp; past `groups`: empty
// at the last end): each offset clamped to [0, rows], the ends a running maximum across the
// lanes from `carry`, the end of the groups before this chunk of 32.  Warp-collective.
__device__ __forceinline__ void g9_span(const void* offs, bool wide, u32 has_start, u32 groups,
                                        long long rows, u32 gi, long long carry,
                                        long long& start, long long& end) {
    const u32 lane = threadIdx.x & 31;
    end = carry;
    if (gi < groups) {
        const long long e = g9_clamp(g9_offset(offs, wide, gi + has_start), rows);
        end = e > carry ? e : carry;
    }
    // Running maximum of the ends across the lanes: groups never overlap.
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const long long v = __shfl_up_sync(G9_FULL, end, d);
        if ((int)lane >= d && v > end) end = v;
    }
    start = __shfl_up_sync(G9_FULL, end, 1);
    if (lane == 0) start = carry;
}

// Row tile `vt` of the groups: true with its first row, its group's end and the group; false
// when there is no such tile, with `total` the number of row tiles.  Warp-collective: every
// lane of the calling warp gets the same answer.
template <int BM>
__device__ __forceinline__ bool g9_tile(const void* offs, u32 flags, u32 groups, long long rows,
                                        u32 vt, u32& row0, u32& row_end, u32& group,
                                        u32& total) {
    const u32 lane = threadIdx.x & 31;
    const bool wide = flags & 1u;
    const u32 has_start = (flags >> 1) & 1u;
    long long carry = has_start ? g9_clamp(g9_offset(offs, wide, 0), rows) : 0;
    u32 tiles_before = 0;
    for (u32 c0 = 0; c0 < groups; c0 += 32) {
        long long start, end;
        g9_span(offs, wide, has_start, groups, rows, c0 + lane, carry, start, end);
        const u32 tiles = (u32)((end - start + BM - 1) / BM);
        u32 incl = tiles;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const u32 v = __shfl_up_sync(G9_FULL, incl, d);
            if ((int)lane >= d) incl += v;
        }
        const u32 before = tiles_before + incl - tiles;
        const u32 hit = __ballot_sync(G9_FULL, tiles != 0 && vt >= before && vt - before < tiles);
        if (hit) {
            const int src = __ffs(hit) - 1;
            const long long s = __shfl_sync(G9_FULL, start, src);
            const u32 b = __shfl_sync(G9_FULL, before, src);
            row_end = (u32)__shfl_sync(G9_FULL, end, src);
            row0 = (u32)s + (vt - b) * BM;
            group = c0 + (u32)src;
            return true;
        }
        tiles_before += __shfl_sync(G9_FULL, incl, 31);
        carry = __shfl_sync(G9_FULL, end, 31);
    }
    total = tiles_before;
    return false;
}

// -- mbarriers, TMA, bulk copies -----------------------------------------------------------------
__device__ __forceinline__ void g9_bar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void g9_bar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void g9_bar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Wait for the phase of parity `parity` to complete (for the phase before the first, at once).
__device__ __forceinline__ void g9_bar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}

__device__ __forceinline__ void g9_tma_2d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void g9_tma_3d(u32 dst, const TensorMap* map, u32 bar, int c0, int c1,
                                          int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void g9_bulk_store(void* dst, u32 src, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
                 "r"(src), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void g9_bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// The bulk copies this thread issued have read their source.
__device__ __forceinline__ void g9_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// ... and have completed.
__device__ __forceinline__ void g9_bulk_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// -- wgmma ---------------------------------------------------------------------------------------
__device__ __forceinline__ u64 g9_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void g9_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void g9_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void g9_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pin the accumulators in place around the asynchronous products: the compiler may neither
// read them before the products complete nor move their zeroing past the first product.
template <int NA> __device__ __forceinline__ void g9_fence_acc(float (&d)[NA]) {
#pragma unroll
    for (int i = 0; i < NA; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define G9_R64                                                                                 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define G9_R128                                                                                \
    G9_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "     \
           "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, "  \
           "%95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "   \
           "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "    \
           "%122, %123, %124, %125, %126, %127"
#define G9_D8(i)                                                                               \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]),                \
        "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define G9_D64(i)                                                                              \
    G9_D8(i), G9_D8(i + 8), G9_D8(i + 16), G9_D8(i + 24), G9_D8(i + 32), G9_D8(i + 40),        \
        G9_D8(i + 48), G9_D8(i + 56)

// d (64 x N, fp32) += a (64 x 16, K-major) * b (16 x N; K-major, or N-major when TB = 1).
template <typename T, int N> struct Wgmma;

#define G9_WGMMA(T, TY, N, REGS, A, B, S, TB, ...)                                             \
    template <> struct Wgmma<T, N> {                                                           \
        template <int TRANS>                                                                   \
        static __device__ __forceinline__ void run(float (&d)[N / 2], u64 a, u64 b) {          \
            asm volatile("{\n"                                                                 \
                         ".reg .pred p;\n"                                                     \
                         "setp.ne.b32 p, %" S ", 0;\n"                                         \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " "       \
                         "{" REGS "}, %" A ", %" B ", p, 1, 1, 0, %" TB ";\n"                  \
                         "}\n"                                                                 \
                         : __VA_ARGS__                                                         \
                         : "l"(a), "l"(b), "r"(1), "n"(TRANS)                                  \
                         : "memory");                                                          \
        }                                                                                      \
    };

G9_WGMMA(__nv_bfloat16, "bf16", 256, G9_R128, "128", "129", "130", "131",
         G9_D64(0), G9_D64(64))
G9_WGMMA(__nv_bfloat16, "bf16", 128, G9_R64, "64", "65", "66", "67", G9_D64(0))
G9_WGMMA(__half, "f16", 256, G9_R128, "128", "129", "130", "131", G9_D64(0), G9_D64(64))
G9_WGMMA(__half, "f16", 128, G9_R64, "64", "65", "66", "67", G9_D64(0))

// Two adjacent outputs, rounded once.
__device__ __forceinline__ void g9_store2(__nv_bfloat16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void g9_store2(__half* p, float a, float b) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
__device__ __forceinline__ void g9_store2(float* p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
}

// -- the kernel ----------------------------------------------------------------------------------
// Bytes of one stage, and of the whole dynamic shared memory a launch must give (the host
// computes the same: 1024 of alignment slack, the stages, barriers and tile records rounded
// to 128, two staging tiles of 64 rows for BULK with 16-bit outputs).
template <int BM, int BN> struct G9Stage {
    static constexpr u32 A = BM * 128;
    static constexpr u32 B = BN * 128;
    static constexpr u32 BYTES = A + B;
};

template <typename TO, int BM, int BN, int STAGES, bool BULK> struct G9Smem {
    static constexpr u32 WN = BN / (2 / (BM / 64));
    static constexpr bool STAGED = BULK && sizeof(TO) == 2;
    static constexpr u32 ROW = WN * (u32)sizeof(TO) + 16;   // staging pitch: no bank conflicts
    static constexpr u32 EPI = STAGED ? 64 * ROW : 0;
    static constexpr u32 RING = STAGES * G9Stage<BM, BN>::BYTES;
    static constexpr u32 META = (32 * STAGES + 127) / 128 * 128;
    static constexpr u32 TOTAL = 1024 + RING + META + 2 * EPI;
};

template <typename T, typename TO, bool KN, int BM, int BN, int STAGES, bool BULK>
__device__ __forceinline__ void grouped90_impl(TO* __restrict__ out, const void* __restrict__ offs,
                                               u32 flags, u32 groups, u32 rows, u32 N, u32 K,
                                               u64 sw, u64 ldo, const TensorMap* tx,
                                               const TensorMap* tw) {
    static_assert(BM == 64 || BM == 128, "BM is 64 or 128");
    static_assert(BN % 64 == 0 && BN <= 256, "BN is 64..256 in steps of 64");
    typedef G9Stage<BM, BN> Stage;
    typedef G9Smem<TO, BM, BN, STAGES, BULK> Smem;
    constexpr int WGM = BM / 64;             // consumer warpgroups along M (2 or 1)
    constexpr int WN = Smem::WN;             // columns of a consumer warpgroup
    constexpr int NA = WN / 2;               // fp32 accumulators per thread
    static_assert(WN == 128 || WN == 256, "a warpgroup takes 128 or 256 columns");
    static_assert(Smem::TOTAL <= 232448, "more shared memory than a Hopper block has");

    extern __shared__ __align__(1024) unsigned char g9_smem[];
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn));
    if (dyn < Smem::TOTAL || K == 0 || N == 0 || rows == 0) return;
    const u32 raw = g9_smem_u32(g9_smem);
    const u32 base = (raw + 1023u) & ~1023u;
    unsigned char* const gbase = g9_smem + (base - raw);
    const u32 bars = base + Smem::RING;                   // full[s]: bars + 8 s
    const u32 empties = bars + 8 * STAGES;                // empty[s]: empties + 8 s
    uint4* const info = reinterpret_cast<uint4*>(gbase + Smem::RING + 16 * STAGES);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            g9_bar_init(bars + 8 * s, 1);
            g9_bar_init(empties + 8 * s, G9_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp >= 1 && warp < 4) return;   // the producer warpgroup's other warps have no work

    const u32 ktiles = (K + G9_BK - 1) / G9_BK;
    const u32 ntiles = (N + BN - 1) / BN;
    u32 row0 = 0, row_end = 0, g = 0, mtiles = 0;
    g9_tile<BM>(offs, flags, groups, (long long)rows, G9_FULL, row0, row_end, g, mtiles);
    const u64 total = (u64)mtiles * ntiles;
    const u64 band = (u64)G9_BAND * ntiles;

    if (warp == 0) {
        // The producer.
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(tx)) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(tw)) : "memory");
        }
        u32 s = 0, phase = 0;
        for (u64 t = blockIdx.x; t < total; t += gridDim.x) {
            const u64 bi = t / band;
            const u32 first = (u32)bi * G9_BAND;
            const u32 in_band = mtiles - first < G9_BAND ? mtiles - first : G9_BAND;
            const u32 r = (u32)(t - bi * band);
            const u32 mt = first + r % in_band;
            const u32 n0 = (r / in_band) * BN;
            u32 unused;
            g9_tile<BM>(offs, flags, groups, (long long)rows, mt, row0, row_end, g, unused);
            const int gz = sw ? (int)g : 0;
            if (lane == 0) {
                for (u32 kb = 0; kb < ktiles; ++kb) {
                    const u32 full = bars + 8 * s;
                    g9_bar_wait(empties + 8 * s, phase ^ 1);
                    if (kb == 0) info[s] = make_uint4(row0, row_end, n0, 0);
                    g9_bar_expect(full, Stage::BYTES);
                    const u32 sa = base + s * Stage::BYTES;
                    const u32 sb = sa + Stage::A;
                    const int k0 = (int)(kb * G9_BK);
                    g9_tma_2d(sa, tx, full, k0, (int)row0);
                    if (KN) {
#pragma unroll
                        for (int j = 0; j < BN / 64; ++j)
                            g9_tma_3d(sb + j * 8192, tw, full, (int)n0 + 64 * j, k0, gz);
                    } else {
                        g9_tma_3d(sb, tw, full, k0, (int)n0, gz);
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
            __syncwarp();
        }
        return;
    }

    // A consumer warpgroup: rows wm * 64 and columns wn * WN of each tile.
    const u32 c = (threadIdx.x >> 7) - 1;
    const u32 wm = c % WGM, wn = c / WGM;
    const u32 a_off = wm * 64 * 128;
    const u32 b_off = KN ? wn * (WN / 64) * 8192 : wn * WN * 128;
    const u32 wq = warp & 3;                       // the warp within its warpgroup
    const u32 epi = base + Smem::RING + Smem::META + c * Smem::EPI;
    unsigned char* const stg = gbase + Smem::RING + Smem::META + c * Smem::EPI;
    float d[NA];
    u32 s = 0, phase = 0;
    for (u64 t = blockIdx.x; t < total; t += gridDim.x) {
#pragma unroll
        for (int i = 0; i < NA; ++i) d[i] = 0.0f;
        g9_fence_acc(d);
        uint4 tile = make_uint4(0, 0, 0, 0);
        u32 prev = 0;
        for (u32 kb = 0; kb < ktiles; ++kb) {
            g9_bar_wait(bars + 8 * s, phase);
            if (kb == 0) tile = info[s];
            const u32 sa = base + s * Stage::BYTES + a_off;
            const u32 sb = base + s * Stage::BYTES + Stage::A + b_off;
            g9_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < G9_BK / 16; ++kk) {
                const u64 da = g9_desc(sa + kk * 32, 16, 1024);
                const u64 db = KN ? g9_desc(sb + kk * 2048, 8192, 1024)
                                  : g9_desc(sb + kk * 32, 16, 1024);
                Wgmma<T, WN>::template run<KN ? 1 : 0>(d, da, db);
            }
            g9_wgmma_commit();
            g9_wgmma_wait<1>();
            if (kb > 0 && lane == 0) g9_bar_arrive(empties + 8 * prev);
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
        g9_wgmma_wait<0>();
        g9_fence_acc(d);
        if (lane == 0) g9_bar_arrive(empties + 8 * prev);

        const u32 t_row0 = tile.x, t_end = tile.y, t_n0 = tile.z;
        const u32 rl = wq * 16 + (lane >> 2);               // row within the warpgroup's 64
        const u32 cl = 2 * (lane & 3);                      // column within each 8
        if constexpr (Smem::STAGED) {
            // Free the staging tile (the previous tile's copies have read it), fill it,
            // make it visible to the bulk copies, and let warp 0 of the group write it out.
            if (wq == 0) g9_bulk_wait_read();
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < WN / 8; ++j)
                    g9_store2(reinterpret_cast<TO*>(stg + (rl + 8 * h) * Smem::ROW) + 8 * j + cl,
                              d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory");
            if (wq == 0) {
                const u32 c0 = t_n0 + wn * WN;
                if (c0 < N) {
                    const u32 bytes = (N - c0 < WN ? N - c0 : WN) * (u32)sizeof(TO);
                    for (u32 rr = lane; rr < 64; rr += 32) {
                        const u32 r = t_row0 + wm * 64 + rr;
                        if (r < t_end) g9_bulk_store(out + (u64)r * ldo + c0, epi + rr * Smem::ROW,
                                                     bytes);
                    }
                }
                g9_bulk_commit();
            }
        } else {
            const u32 rb = t_row0 + wm * 64 + rl;
            const u32 cb = t_n0 + wn * WN + cl;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 r = rb + 8 * h;
                if (r < t_end) {
                    TO* const p = out + (u64)r * ldo;
#pragma unroll
                    for (int j = 0; j < WN / 8; ++j) {
                        const u32 col = cb + 8 * j;
                        if (col < N) g9_store2(p + col, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                    }
                }
            }
        }
    }
    if constexpr (Smem::STAGED) {
        if (wq == 0) g9_bulk_wait();   // no copy may outlive the block's shared memory
    }
}

#define GROUPED90(NAME, T, TO, KN, BM, BN, STAGES, BULK)                                       \
    extern "C" __global__ void __launch_bounds__(G9_THREADS, 1)                                \
        NAME(const T* x, const T* w, TO* out, const void* offs, u32 flags, u32 groups,         \
             u32 rows, u32 N, u32 K, u64 ldx, u64 ldw, u64 sw, u64 ldo,                        \
             const __grid_constant__ TensorMap tx, const __grid_constant__ TensorMap tw) {     \
        grouped90_impl<T, TO, KN, BM, BN, STAGES, BULK>(out, offs, flags, groups, rows, N, K,  \
                                                        sw, ldo, &tx, &tw);                    \
    }

// The tile shapes, with the stages that fit: 128 x 256 (4 stages; 3 with the staged epilogue),
// 128 x 128 (6; 5), 64 x 256 (5; 4).
#define GROUPED90_TILES(DT, T, OUT, TO, LAYOUT, KN)                                            \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m128n256_##OUT, T, TO, KN, 128, 256, 4, false)       \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m128n256s_##OUT, T, TO, KN, 128, 256, 3, true)       \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m128n128_##OUT, T, TO, KN, 128, 128, 6, false)       \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m128n128s_##OUT, T, TO, KN, 128, 128, 5, true)       \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m64n256_##OUT, T, TO, KN, 64, 256, 5, false)         \
    GROUPED90(grouped90_##DT##_##LAYOUT##_m64n256s_##OUT, T, TO, KN, 64, 256, 4, true)

#define GROUPED90_OUTS(DT, T, LAYOUT, KN)                                                      \
    GROUPED90_TILES(DT, T, DT, T, LAYOUT, KN)                                                  \
    GROUPED90_TILES(DT, T, f32, float, LAYOUT, KN)

GROUPED90_OUTS(bf16, __nv_bfloat16, kn, true)
GROUPED90_OUTS(bf16, __nv_bfloat16, nk, false)
GROUPED90_OUTS(f16, __half, kn, true)
GROUPED90_OUTS(f16, __half, nk, false)

// -- the weight gradient -------------------------------------------------------------------------
#define G9W_GMAX 256
#define G9W_BAR_CONSUMERS 1   // named barrier of the 256 consumer threads

template <typename TO, int BM, int BN, int STAGES, bool BULK> struct G9WSmem {
    static constexpr u32 BOX = 64 * 128;
    static constexpr u32 A = (BM / 64) * BOX;
    static constexpr u32 STAGE = (BM + BN) / 64 * BOX;
    static constexpr u32 RING = STAGES * STAGE;
    static constexpr u32 META = (16 * STAGES + 127) / 128 * 128;
    static constexpr u32 WN = BN / (2 / (BM / 64));
    static constexpr bool STAGED = BULK && sizeof(TO) == 2;
    static constexpr u32 ROW = WN * (u32)sizeof(TO) + 16;   // staging pitch: no bank conflicts
    static constexpr u32 EPI = STAGED ? 64 * ROW : 0;
    static constexpr u32 TABLE = 16 * G9W_GMAX;
    static constexpr u32 ROWS = 8 * G9W_GMAX;
    static constexpr u32 TOTAL = 1024 + RING + META + 2 * EPI + TABLE + ROWS;
};

// d (64 x N, fp32) += a (64 x 16, M-major) * b (16 x N, N-major): both transpose bits set.
template <typename T, int N> struct WgmmaTT;

#define G9W_WGMMA(T, TY, N, REGS, A, B, S, ...)                                                \
    template <> struct WgmmaTT<T, N> {                                                         \
        static __device__ __forceinline__ void run(float (&d)[N / 2], u64 a, u64 b) {          \
            asm volatile("{\n"                                                                 \
                         ".reg .pred p;\n"                                                     \
                         "setp.ne.b32 p, %" S ", 0;\n"                                         \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " "       \
                         "{" REGS "}, %" A ", %" B ", p, 1, 1, 1, 1;\n"                        \
                         "}\n"                                                                 \
                         : __VA_ARGS__                                                         \
                         : "l"(a), "l"(b), "r"(1)                                              \
                         : "memory");                                                          \
        }                                                                                      \
    };

G9W_WGMMA(__nv_bfloat16, "bf16", 256, G9_R128, "128", "129", "130", G9_D64(0), G9_D64(64))
G9W_WGMMA(__nv_bfloat16, "bf16", 128, G9_R64, "64", "65", "66", G9_D64(0))
G9W_WGMMA(__half, "f16", 256, G9_R128, "128", "129", "130", G9_D64(0), G9_D64(64))
G9W_WGMMA(__half, "f16", 128, G9_R64, "64", "65", "66", G9_D64(0))

// Two adjacent outputs, widened (what an accumulating store adds to).
__device__ __forceinline__ float2 g9w_load2(const __nv_bfloat16* p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 g9w_load2(const __half* p) {
    return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 g9w_load2(const float* p) {
    return *reinterpret_cast<const float2*>(p);
}

// Tile `t` of the ranked groups: its entry of the table (group, first row, end row) and its
// row and column tile within the group's product (banded as the forward's).
__device__ __forceinline__ uint4 g9w_tile(const uint4* table, u32 t, u32 per_group,
                                          u32 mtiles, u32 ntiles, u32& m_tile, u32& n_tile) {
    const uint4 e = table[t / per_group];
    const u32 r = t % per_group;
    const u32 band = G9_BAND * ntiles;
    const u32 first = (r / band) * G9_BAND;
    const u32 in_band = mtiles - first < G9_BAND ? mtiles - first : G9_BAND;
    const u32 rr = r % band;
    m_tile = first + rr % in_band;
    n_tile = rr / in_band;
    return e;
}

// The j-th tile of block `b` of `blocks` (the snake over rounds), or `total` or more when the
// block has no j-th tile in that round.
__device__ __forceinline__ u32 g9w_pick(u32 j, u32 b, u32 blocks) {
    return j * blocks + ((j & 1u) ? blocks - 1u - b : b);
}

template <typename T, typename TO, int BM, int BN, int STAGES, bool BULK>
__device__ __forceinline__ void grouped90_wgrad_impl(TO* __restrict__ out,
                                                     const void* __restrict__ offs, u32 flags,
                                                     u32 groups, u32 rows, u32 M, u32 N, u64 so,
                                                     u64 ldo, const TensorMap* ta,
                                                     const TensorMap* tb) {
    static_assert(BM == 64 || BM == 128, "BM is 64 or 128");
    static_assert(BN % 64 == 0 && BN <= 256, "BN is 64..256 in steps of 64");
    typedef G9WSmem<TO, BM, BN, STAGES, BULK> Smem;
    constexpr int WGM = BM / 64;             // consumer warpgroups along M (2 or 1)
    constexpr int WN = BN / (2 / WGM);       // columns of a consumer warpgroup
    constexpr int NA = WN / 2;               // fp32 accumulators per thread
    static_assert(WN == 128 || WN == 256, "a warpgroup takes 128 or 256 columns");
    static_assert(Smem::TOTAL <= 232448, "more shared memory than a Hopper block has");

    extern __shared__ __align__(1024) unsigned char g9_smem[];
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn));
    if (dyn < Smem::TOTAL || M == 0 || N == 0 || rows == 0 || groups == 0 ||
        groups > G9W_GMAX)
        return;
    const u32 raw = g9_smem_u32(g9_smem);
    const u32 base = (raw + 1023u) & ~1023u;
    unsigned char* const gbase = g9_smem + (base - raw);
    const u32 bars = base + Smem::RING;                   // full[s]: bars + 8 s
    const u32 empties = bars + 8 * STAGES;                // empty[s]: empties + 8 s
    const u32 tab_off = Smem::RING + Smem::META + 2 * Smem::EPI;
    uint4* const table = reinterpret_cast<uint4*>(gbase + tab_off);
    uint2* const grows = reinterpret_cast<uint2*>(gbase + tab_off + Smem::TABLE);
    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            g9_bar_init(bars + 8 * s, 1);
            g9_bar_init(empties + 8 * s, G9_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (warp == 0) {
        // The groups' rows: each offset clamped to [0, rows], the ends a running maximum.
        const bool wide = flags & 1u;
        const u32 has_start = (flags >> 1) & 1u;
        long long carry = has_start ? g9_clamp(g9_offset(offs, wide, 0), rows) : 0;
        for (u32 c0 = 0; c0 < groups; c0 += 32) {
            const u32 gi = c0 + lane;
            long long start, end;
            g9_span(offs, wide, has_start, groups, rows, gi, carry, start, end);
            if (gi < groups) grows[gi] = make_uint2((u32)start, (u32)end);
            carry = __shfl_sync(G9_FULL, end, 31);
        }
    }
    __syncthreads();
    // Rank the groups by size, largest first, ties by index: rank i is table[i].
    for (u32 i = threadIdx.x; i < groups; i += G9_THREADS) {
        const uint2 mine = grows[i];
        const u32 size = mine.y - mine.x;
        u32 rank = 0;
        for (u32 j = 0; j < groups; ++j) {
            const uint2 o = grows[j];
            const u32 sj = o.y - o.x;
            rank += (sj > size || (sj == size && j < i)) ? 1u : 0u;
        }
        table[rank] = make_uint4(i, mine.x, mine.y, 0);
    }
    __syncthreads();

    if (warp >= 1 && warp < 4) return;   // the producer warpgroup's other warps have no work

    const bool add = flags & 4u;
    const u32 mtiles = (M + BM - 1) / BM;
    const u32 ntiles = (N + BN - 1) / BN;
    const u32 per_group = mtiles * ntiles;
    const u32 total = groups * per_group;   // the host keeps it below 2^31

    if (warp == 0) {
        // The producer.
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(ta)) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(tb)) : "memory");
            u32 s = 0, phase = 0;
            for (u32 j = 0; (u64)j * gridDim.x < total; ++j) {
                const u32 t = g9w_pick(j, blockIdx.x, gridDim.x);
                if (t >= total) continue;
                u32 mt, nt;
                const uint4 e = g9w_tile(table, t, per_group, mtiles, ntiles, mt, nt);
                const u32 start = e.y, end = e.z;
                const int m0 = (int)(mt * BM), n0 = (int)(nt * BN);
                for (u32 r = start; r < end; r += 64) {
                    const u32 full = bars + 8 * s;
                    g9_bar_wait(empties + 8 * s, phase ^ 1);
                    g9_bar_expect(full, Smem::STAGE);
                    const u32 sa = base + s * Smem::STAGE;
                    const u32 sb = sa + Smem::A;
#pragma unroll
                    for (int i = 0; i < BM / 64; ++i)
                        g9_tma_2d(sa + i * Smem::BOX, ta, full, m0 + 64 * i, (int)r);
#pragma unroll
                    for (int i = 0; i < BN / 64; ++i)
                        g9_tma_2d(sb + i * Smem::BOX, tb, full, n0 + 64 * i, (int)r);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        __syncwarp();
        return;
    }

    // A consumer warpgroup: rows wm * 64 and columns wn * WN of each tile.
    const u32 c = (threadIdx.x >> 7) - 1;
    const u32 wm = c % WGM, wn = c / WGM;
    const u32 a_off = wm * Smem::BOX;
    const u32 b_off = Smem::A + wn * (WN / 64) * Smem::BOX;
    const u32 wq = warp & 3;                       // the warp within its warpgroup
    const u32 ct = threadIdx.x - 128;              // 0..255 among the consumers
    const u32 epi = base + Smem::RING + Smem::META + c * Smem::EPI;
    unsigned char* const stg = gbase + Smem::RING + Smem::META + c * Smem::EPI;
    float d[NA];
    u32 s = 0, phase = 0;
    for (u32 j = 0; (u64)j * gridDim.x < total; ++j) {
        const u32 t = g9w_pick(j, blockIdx.x, gridDim.x);
        if (t >= total) continue;
        u32 mt, nt;
        const uint4 e = g9w_tile(table, t, per_group, mtiles, ntiles, mt, nt);
        const u32 g = e.x, start = e.y, end = e.z;
        // An empty group adds nothing: out is left as it is, bit for bit (-0 + 0 would be +0).
        if (add && end <= start) continue;
        const u32 steps = (end - start + 63) / 64;
        const u32 tail = (end - start) & 63;       // rows of the last step, 0: all 64
#pragma unroll
        for (int i = 0; i < NA; ++i) d[i] = 0.0f;
        g9_fence_acc(d);
        u32 prev = 0;
        for (u32 kb = 0; kb < steps; ++kb) {
            g9_bar_wait(bars + 8 * s, phase);
            const u32 st = base + s * Smem::STAGE;
            if (tail && kb + 1 == steps) {
                // Zero rows tail..63 of every box of the stage (the next groups' rows, or
                // anything): whole 128-byte rows, so the swizzle does not matter.
                const u32 per_box = (64 - tail) * 8;        // 16-byte chunks
                const u32 n16 = (u32)((BM + BN) / 64) * per_box;
                for (u32 i = ct; i < n16; i += 256) {
                    const u32 box = i / per_box, rem = i - box * per_box;
                    const u32 addr = st + box * Smem::BOX + (tail + rem / 8) * 128 + (rem % 8) * 16;
                    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr),
                                 "r"(0u)
                                 : "memory");
                }
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                asm volatile("bar.sync %0, 256;\n" ::"n"(G9W_BAR_CONSUMERS) : "memory");
            }
            g9_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const u64 da = g9_desc(st + a_off + kk * 2048, 8192, 1024);
                const u64 db = g9_desc(st + b_off + kk * 2048, 8192, 1024);
                WgmmaTT<T, WN>::run(d, da, db);
            }
            g9_wgmma_commit();
            g9_wgmma_wait<1>();
            if (kb > 0 && lane == 0) g9_bar_arrive(empties + 8 * prev);
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
        g9_wgmma_wait<0>();
        g9_fence_acc(d);
        if (steps && lane == 0) g9_bar_arrive(empties + 8 * prev);

        const u32 rl = wq * 16 + (lane >> 2);               // row within the warpgroup's 64
        const u32 cl = 2 * (lane & 3);                      // column within each 8
        const u32 rb = mt * BM + wm * 64 + rl;
        const u32 cb = nt * BN + wn * WN + cl;
        TO* const og = out + (u64)g * so;
        if constexpr (Smem::STAGED) {
            if (!add) {
                // As the forward's staged epilogue: free the staging tile (the previous
                // tile's copies have read it), fill it, make it visible to the bulk copies,
                // and let warp 0 of the warpgroup write it out one row at a time.
                if (wq == 0) g9_bulk_wait_read();
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int jj = 0; jj < WN / 8; ++jj)
                        g9_store2(reinterpret_cast<TO*>(stg + (rl + 8 * h) * Smem::ROW) + 8 * jj +
                                      cl,
                                  d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1]);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
                if (wq == 0) {
                    const u32 c0 = nt * BN + wn * WN;
                    if (c0 < N) {
                        const u32 bytes = (N - c0 < WN ? N - c0 : WN) * (u32)sizeof(TO);
                        for (u32 rr = lane; rr < 64; rr += 32) {
                            const u32 r = mt * BM + wm * 64 + rr;
                            if (r < M) g9_bulk_store(og + (u64)r * ldo + c0, epi + rr * Smem::ROW,
                                                     bytes);
                        }
                    }
                    g9_bulk_commit();
                }
                continue;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 r = rb + 8 * h;
            if (r < M) {
                TO* const p = og + (u64)r * ldo;
#pragma unroll
                for (int jj = 0; jj < WN / 8; ++jj) {
                    const u32 col = cb + 8 * jj;
                    if (col < N) {
                        float v0 = d[4 * jj + 2 * h], v1 = d[4 * jj + 2 * h + 1];
                        if (add) {
                            const float2 o = g9w_load2(p + col);
                            v0 += o.x;
                            v1 += o.y;
                        }
                        g9_store2(p + col, v0, v1);
                    }
                }
            }
        }
    }
    if constexpr (Smem::STAGED) {
        if (wq == 0) g9_bulk_wait();   // no copy may outlive the block's shared memory
    }
}

#define GROUPED90_WGRAD(NAME, T, TO, BM, BN, STAGES, BULK)                                     \
    extern "C" __global__ void __launch_bounds__(G9_THREADS, 1)                                \
        NAME(const T* a, const T* b, TO* out, const void* offs, u32 flags, u32 groups,         \
             u32 rows, u32 M, u32 N, u64 lda, u64 ldb, u64 so, u64 ldo,                        \
             const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb) {     \
        grouped90_wgrad_impl<T, TO, BM, BN, STAGES, BULK>(out, offs, flags, groups, rows, M, N, \
                                                          so, ldo, &ta, &tb);                  \
    }

// The tile shapes, with the stages that fit beside the group table: 128 x 256 (4 stages of
// 48 KB; 3 with the staged epilogue), 128 x 128 (6 of 32 KB; 5), 64 x 256 (5 of 40 KB; 4).
#define GROUPED90_WGRAD_TILES(DT, T, OUT, TO)                                                  \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m128n256_##OUT, T, TO, 128, 256, 4, false)          \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m128n256s_##OUT, T, TO, 128, 256, 3, true)          \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m128n128_##OUT, T, TO, 128, 128, 6, false)          \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m128n128s_##OUT, T, TO, 128, 128, 5, true)          \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m64n256_##OUT, T, TO, 64, 256, 5, false)            \
    GROUPED90_WGRAD(grouped90_wgrad_##DT##_m64n256s_##OUT, T, TO, 64, 256, 4, true)

GROUPED90_WGRAD_TILES(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
GROUPED90_WGRAD_TILES(bf16, __nv_bfloat16, f32, float)
GROUPED90_WGRAD_TILES(f16, __half, f16, __half)
GROUPED90_WGRAD_TILES(f16, __half, f32, float)
