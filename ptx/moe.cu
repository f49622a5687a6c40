// Mixture-of-experts routing: the router's top-k softmax and its gradient, the routing of the
// (token, choice) slots to experts (a stable counting sort: histogram, scan, scatter), and the
// permutations of token rows into expert order and back, with the routing weights, and their
// gradients.
//
// Slot t*k + j is token t's j-th choice.  The routing is three int32 arrays: offsets[E + 1] (the
// rows of expert e are offsets[e] .. offsets[e + 1] of the sorted order), order[N] (sorted row r
// holds slot order[r]) and slots[N] (its inverse), N = T*k.
//
// Every index these kernels read from memory is clamped to its range before it addresses
// anything: expert ids to [0, E - 1], order and slots values to [0, N - 1].  Device values are
// never checked on the host (that would synchronise), so whatever they hold no kernel reads or
// writes outside its arrays; the routing of an out-of-range id is that of the nearest expert.
//
// Nothing uses atomics: every sum has a fixed order, every result is bitwise reproducible.
// __match_any_sync needs sm_70; the file builds for compute_75 like the rest of the library.
#include "common.cuh"

#define FULL_MASK 0xffffffffu
// The most choices per token (one per lane of a warp).
#define MOE_MAX_K 32
// Warps (rows) per block of the top-k kernels.
#define TOPK_WARPS 8
// Threads of the routing scan: one block.
#define SCAN_THREADS 1024

// -- warp reductions ---------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

__device__ __forceinline__ u64 warp_max_u64(u64 v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const u64 o = __shfl_xor_sync(FULL_MASK, v, off);
        v = o > v ? o : v;
    }
    return v;
}

// An index read from memory, clamped to [0, n - 1] (n >= 1).
template <typename L>
__device__ __forceinline__ u32 clamp_index(L v, u32 n) {
    return v < (L)0 ? 0u : (v >= (L)n ? n - 1u : (u32)v);
}

__device__ __forceinline__ bool aligned16(const void* p) { return ((u64)p & 15u) == 0; }

// -- top-k softmax -----------------------------------------------------------------------------
// The bits of a float32, and back.  A union, not __float_as_uint: the CPU tests compile the keys
// for the host and check their order against numpy's on every 16-bit value.
__host__ __device__ __forceinline__ u32 float_bits(float v) {
    union { float f; u32 u; } c;
    c.f = v;
    return c.u;
}
__host__ __device__ __forceinline__ float bits_float(u32 u) {
    union { u32 u; float f; } c;
    c.u = u;
    return c.f;
}

// The selection key of logit v at index i: the float's bits mapped so that their unsigned order
// is the order of the values (-0 read as +0: equal probabilities tie), above the complemented
// index, so that of two equal values the lower index has the larger key.  Keys are distinct,
// totally ordered (NaNs above +inf or below -inf by their sign) and nonzero (i < 2^31).
__host__ __device__ __forceinline__ u64 topk_key(float v, u32 i) {
    u32 u = float_bits(v);
    if ((u & 0x7fffffffu) == 0u) u = 0u;
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((u64)u << 32) | (u64)(0xffffffffu - i);
}
__host__ __device__ __forceinline__ float key_value(u64 key) {
    const u32 u = (u32)(key >> 32);
    return bits_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
__host__ __device__ __forceinline__ u32 key_index(u64 key) { return 0xffffffffu - (u32)key; }

// One warp per row of logits (rows of cols values, ld apart): the k largest in descending order,
// pass j finding the largest key below pass j-1's (k passes over the row, which stays in L1);
// then w_j = exp(v_j - m) / s with m the row's maximum and s = sum over the row of exp(x - m),
// or (renormalize) s = sum over the k chosen of exp(v - m): the softmax of the chosen logits,
// which is the chosen probabilities divided by their sum.  Lane j writes choice j.
template <typename T>
__device__ __forceinline__ void topk_softmax_impl(const T* x, float* weights, int* ids, u32 rows,
                                                  u32 cols, u64 ld, u32 k, int renormalize) {
    const u32 lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    for (u64 row = (u64)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows;
         row += (u64)gridDim.x * wpb) {
        const T* xr = x + row * ld;
        u64 mine = 0, prev = 0, top = 0;
        for (u32 j = 0; j < k; ++j) {
            u64 best = 0;
            for (u32 i = lane; i < cols; i += 32) {
                const u64 key = topk_key(to_acc(xr[i]), i);
                if ((j == 0 || key < prev) && key > best) best = key;
            }
            best = warp_max_u64(best);
            if (j == 0) top = best;
            if (lane == j) mine = best;
            prev = best;
        }
        const float m = key_value(top);
        const float e = lane < k ? expf(key_value(mine) - m) : 0.0f;
        float s;
        if (renormalize) {
            s = warp_sum(e);
        } else {
            float part = 0.0f;
            for (u32 i = lane; i < cols; i += 32) part += expf(to_acc(xr[i]) - m);
            s = warp_sum(part);
        }
        if (lane < k) {
            weights[row * k + lane] = e / s;
            ids[row * k + lane] = (int)key_index(mine);
        }
    }
}

// The gradient of the weights with the ids held fixed, one warp per row (ids clamped; a repeated
// id adds its choices' terms).  With w_j the weights and G = sum_j w_j dw_j:
//   renormalize:  dx_i = sum over j with id_j = i of w_j (dw_j - G)     (0 elsewhere)
//   otherwise:    dx_i = sum over j with id_j = i of w_j dw_j  -  p_i G  (p the softmax)
// Each element of dx is written once, its terms added in j order.
template <typename T, typename L>
__device__ __forceinline__ void topk_softmax_backward_impl(const T* x, const L* ids,
                                                           const float* dw, float* dx, u32 rows,
                                                           u32 cols, u64 ld, u32 k,
                                                           int renormalize) {
    __shared__ u32 sh_id[TOPK_WARPS][MOE_MAX_K];
    __shared__ float sh_c[TOPK_WARPS][MOE_MAX_K];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    for (u64 row = (u64)blockIdx.x * wpb + warp; row < rows; row += (u64)gridDim.x * wpb) {
        const T* xr = x + row * ld;
        const bool chosen = lane < k;
        u32 id = 0xffffffffu;
        float g = 0.0f, v = neg_inf();
        if (chosen) {
            id = clamp_index(ids[row * k + lane], cols);
            g = dw[row * k + lane];
            v = to_acc(xr[id]);
        }
        float m = 0.0f, s = 1.0f, w;
        if (renormalize) {
            // Every lane takes part in the shuffles: a reduction called from one side of a
            // branch would leave lanes >= k out of the full-warp mask.
            const float top = warp_max(v);
            const float e = chosen ? expf(v - top) : 0.0f;
            w = e / warp_sum(e);
        } else {
            float mm = neg_inf();
            for (u32 i = lane; i < cols; i += 32) mm = fmaxf(mm, to_acc(xr[i]));
            m = warp_max(mm);
            float part = 0.0f;
            for (u32 i = lane; i < cols; i += 32) part += expf(to_acc(xr[i]) - m);
            s = warp_sum(part);
            w = chosen ? expf(v - m) / s : 0.0f;
        }
        const float big_g = warp_sum(w * g);
        sh_id[warp][lane] = id;
        sh_c[warp][lane] = renormalize ? w * (g - big_g) : w * g;
        __syncwarp();
        for (u32 i = lane; i < cols; i += 32) {
            float d = 0.0f;
            for (u32 j = 0; j < k; ++j)
                if (sh_id[warp][j] == i) d += sh_c[warp][j];
            if (!renormalize) d -= expf(to_acc(xr[i]) - m) / s * big_g;
            dx[row * cols + i] = d;
        }
        __syncwarp();   // sh_* are written again for the next row
    }
}

// -- routing: a stable counting sort of the slots by expert ------------------------------------
// 1. count: each warp takes `chunk` consecutive slots (a unit), walks them 32 at a time, and
//    gives each slot its rank among the unit's earlier slots of the same expert (lanes of one
//    expert found by __match_any_sync), kept in slots[]; the unit's count of every expert goes
//    to counts[unit][expert].
// 2. scan (one block): the offsets of the experts, and counts[unit][e] replaced by the sorted
//    row where the unit's first slot of expert e goes: offsets[e] + the earlier units' counts.
// 3. scatter: slot i of unit u goes to row counts[u][e] + rank: slots[i] = row, order[row] = i.
// Within an expert the rows follow the slots' order: the sort is stable, the result unique.
template <typename L>
__device__ __forceinline__ void route_count_impl(const L* ids, int* counts, int* rank, u32 n,
                                                 u32 experts, u32 chunk, u32 units) {
    extern __shared__ int route_hist[];   // experts ints per warp
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 unit = blockIdx.x * (blockDim.x >> 5) + warp;
    if (unit >= units) return;            // a whole warp: no block barrier follows
    int* h = route_hist + warp * experts;
    for (u32 e = lane; e < experts; e += 32) h[e] = 0;
    __syncwarp();
    const u64 begin = (u64)unit * chunk;
    const u64 end = min((u64)n, begin + chunk);
    const u32 below = (1u << lane) - 1u;
    for (u64 i0 = begin; i0 < end; i0 += 32) {
        const u64 i = i0 + lane;
        const bool live = i < end;
        const u32 e = live ? clamp_index(ids[i], experts) : experts;
        const u32 same = __match_any_sync(FULL_MASK, e);
        if (live) rank[i] = h[e] + __popc(same & below);
        __syncwarp();   // every lane has read h[e] before its group's first lane adds to it
        if (live && __ffs(same) - 1 == (int)lane) h[e] += __popc(same);
        __syncwarp();
    }
    for (u32 e = lane; e < experts; e += 32) counts[(u64)unit * experts + e] = h[e];
}

// One block of SCAN_THREADS threads: `groups` groups of `width` threads (experts rounded up to a
// warp), group g summing units [g units / groups, (g + 1) units / groups) of every expert.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS)
moe_route_scan(int* counts, int* offsets, u32 experts, u32 units) {
    __shared__ int part[SCAN_THREADS];
    __shared__ int start[SCAN_THREADS];
    __shared__ int warp_total[32];
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 width = (experts + 31u) & ~31u;
    const u32 groups = blockDim.x / width;
    const u32 g = tid / width, e = tid % width;
    const bool live = g < groups && e < experts;
    const u32 u0 = (u32)((u64)g * units / groups), u1 = (u32)((u64)(g + 1) * units / groups);
    int sum = 0;
    if (live) {
#pragma unroll 4
        for (u32 u = u0; u < u1; ++u) sum += counts[(u64)u * experts + e];
    }
    if (g < groups) part[tid] = sum;
    __syncthreads();
    // thread e (< width): the groups' exclusive prefix for expert e, and its total
    int total = 0;
    if (tid < width) {
        for (u32 q = 0; q < groups; ++q) {
            const int c = part[q * width + tid];
            part[q * width + tid] = total;
            total += c;
        }
    }
    // exclusive scan of the totals over the experts: within warps, then over the warps' sums
    int incl = total;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int o = __shfl_up_sync(FULL_MASK, incl, off);
        if ((int)lane >= off) incl += o;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int t = lane < (width >> 5) ? warp_total[lane] : 0;
        int ti = t;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const int o = __shfl_up_sync(FULL_MASK, ti, off);
            if ((int)lane >= off) ti += o;
        }
        warp_total[lane] = ti - t;
    }
    __syncthreads();
    if (tid < width) {
        const int off = warp_total[warp] + incl - total;
        start[tid] = off;
        if (tid < experts) offsets[tid] = off;
        if (tid == width - 1) offsets[experts] = off + total;
    }
    __syncthreads();
    if (live) {
        int run = start[e] + part[tid];
#pragma unroll 4
        for (u32 u = u0; u < u1; ++u) {
            const u64 at = (u64)u * experts + e;
            const int c = counts[at];
            counts[at] = run;
            run += c;
        }
    }
}

template <typename L>
__device__ __forceinline__ void route_scatter_impl(const L* ids, const int* base, int* order,
                                                   int* slots, u32 n, u32 experts, u32 chunk) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const u32 e = clamp_index(ids[i], experts);
        const int row = base[(i / chunk) * experts + e] + slots[i];
        slots[i] = row;
        order[row] = (int)i;
    }
}

// -- permutations ------------------------------------------------------------------------------
// out[r] = x[order[r] / k], row_bytes a row, in units of U bytes: one block per row.
template <typename U>
__device__ __forceinline__ void copy_rows(const char* x, const int* order, char* out, u32 rows,
                                          u32 k, u64 row_bytes) {
    const u64 units = row_bytes / sizeof(U);
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const u64 t = clamp_index(order[r], rows) / k;
        const U* src = reinterpret_cast<const U*>(x + t * row_bytes);
        U* dst = reinterpret_cast<U*>(out + r * row_bytes);
        for (u64 q = threadIdx.x; q < units; q += blockDim.x) dst[q] = src[q];
    }
}

// The widest unit that the addresses and the row length allow; any element type.
extern "C" __global__ void __launch_bounds__(256)
moe_permute(const char* x, const int* order, char* out, u32 rows, u32 k, u64 row_bytes) {
    const u64 a = (u64)x | (u64)out | row_bytes;
    if (a % 16 == 0) copy_rows<uint4>(x, order, out, rows, k, row_bytes);
    else if (a % 8 == 0) copy_rows<uint2>(x, order, out, rows, k, row_bytes);
    else if (a % 4 == 0) copy_rows<u32>(x, order, out, rows, k, row_bytes);
    else if (a % 2 == 0) copy_rows<unsigned short>(x, order, out, rows, k, row_bytes);
    else copy_rows<unsigned char>(x, order, out, rows, k, row_bytes);
}

// Eight consecutive elements widened to float, and rounded back; p 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float* v) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
template <typename H> __device__ __forceinline__ float widen16(u32 bits);
template <> __device__ __forceinline__ float widen16<__half>(u32 bits) {
    return __half2float(__ushort_as_half((unsigned short)bits));
}
template <> __device__ __forceinline__ float widen16<__nv_bfloat16>(u32 bits) {
    return __uint_as_float(bits << 16);
}
template <typename H>
__device__ __forceinline__ void load8(const H* p, float* v) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = widen16<H>(w[i] & 0xffffu);
        v[2 * i + 1] = widen16<H>(w[i] >> 16);
    }
}

__device__ __forceinline__ void store8(float* p, const float* v) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ u32 bits16(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ u32 bits16(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
template <typename H>
__device__ __forceinline__ void store8(H* p, const float* v) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        w[i] = bits16(from_acc<H>(v[2 * i])) | (bits16(from_acc<H>(v[2 * i + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// out[t] = sum over j of weights[t, j] * y[slots[t k + j]] (weights null: 1), one block per
// token, float32 fused multiply-adds in j order; eight elements a thread at a time when the rows
// allow (the same operations, so the same bits, as one at a time).
template <typename Y, typename O>
__device__ __forceinline__ void unpermute_impl(const Y* y, const int* slots, const float* weights,
                                               O* out, u32 tokens, u32 k, u32 cols) {
    __shared__ u32 sh_row[MOE_MAX_K];
    __shared__ float sh_w[MOE_MAX_K];
    const u32 rows = tokens * k;
    const bool vec = (cols & 7u) == 0 && aligned16(y) && aligned16(out);
    for (u64 t = blockIdx.x; t < tokens; t += gridDim.x) {
        if (threadIdx.x < k) {
            sh_row[threadIdx.x] = clamp_index(slots[t * k + threadIdx.x], rows);
            sh_w[threadIdx.x] = weights ? weights[t * k + threadIdx.x] : 1.0f;
        }
        __syncthreads();
        O* o = out + t * cols;
        if (vec) {
            for (u64 p = threadIdx.x * 8ull; p < cols; p += blockDim.x * 8ull) {
                float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                for (u32 j = 0; j < k; ++j) {
                    float v[8];
                    load8(y + (u64)sh_row[j] * cols + p, v);
                    const float w = sh_w[j];
#pragma unroll
                    for (int q = 0; q < 8; ++q) acc[q] = fmaf(w, v[q], acc[q]);
                }
                store8(o + p, acc);
            }
        } else {
            for (u64 d = threadIdx.x; d < cols; d += blockDim.x) {
                float acc = 0.0f;
                for (u32 j = 0; j < k; ++j)
                    acc = fmaf(sh_w[j], to_acc(y[(u64)sh_row[j] * cols + d]), acc);
                o[d] = from_acc<O>(acc);
            }
        }
        __syncthreads();   // sh_* are written again for the next token
    }
}

// dys[slots[t k + j]] = weights[t, j] * dy[t] and dw[t, j] = dot(dy[t], y[slots[t k + j]]), one
// block per token; each dot is summed per thread, then over each warp, then over the warps in
// order.
template <typename Y, typename G>
__device__ __forceinline__ void unpermute_backward_impl(const G* dy, const Y* y, const int* slots,
                                                        const float* weights, Y* dys, float* dw,
                                                        u32 tokens, u32 k, u32 cols) {
    __shared__ u32 sh_row[MOE_MAX_K];
    __shared__ float sh_w[MOE_MAX_K];
    __shared__ float sh_dot[MOE_MAX_K][33];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const u32 rows = tokens * k;
    const bool vec = (cols & 7u) == 0 && aligned16(dy) && aligned16(y) && aligned16(dys);
    for (u64 t = blockIdx.x; t < tokens; t += gridDim.x) {
        if (threadIdx.x < k) {
            sh_row[threadIdx.x] = clamp_index(slots[t * k + threadIdx.x], rows);
            sh_w[threadIdx.x] = weights[t * k + threadIdx.x];
        }
        __syncthreads();
        const G* g = dy + t * cols;
        for (u32 j = 0; j < k; ++j) {
            const Y* yr = y + (u64)sh_row[j] * cols;
            Y* dr = dys + (u64)sh_row[j] * cols;
            const float w = sh_w[j];
            float dot = 0.0f;
            if (vec) {
                for (u64 p = threadIdx.x * 8ull; p < cols; p += blockDim.x * 8ull) {
                    float gv[8], yv[8], o[8];
                    load8(g + p, gv);
                    load8(yr + p, yv);
#pragma unroll
                    for (int q = 0; q < 8; ++q) {
                        o[q] = w * gv[q];
                        dot = fmaf(gv[q], yv[q], dot);
                    }
                    store8(dr + p, o);
                }
            } else {
                for (u64 d = threadIdx.x; d < cols; d += blockDim.x) {
                    const float gv = to_acc(g[d]);
                    dr[d] = from_acc<Y>(w * gv);
                    dot = fmaf(gv, to_acc(yr[d]), dot);
                }
            }
            dot = warp_sum(dot);
            if (lane == 0) sh_dot[j][warp] = dot;
        }
        __syncthreads();
        if (threadIdx.x < k) {
            float s = 0.0f;
            for (u32 q = 0; q < nwarps; ++q) s += sh_dot[threadIdx.x][q];
            dw[t * k + threadIdx.x] = s;
        }
        __syncthreads();
    }
}

// -- entry points ------------------------------------------------------------------------------
#define BY_LOGITS(SUF, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(TOPK_WARPS * 32)                                \
    topk_softmax_##SUF(const T* x, float* weights, int* ids, u32 rows, u32 cols, u64 ld, u32 k, \
                       int renormalize) {                                                        \
        topk_softmax_impl<T>(x, weights, ids, rows, cols, ld, k, renormalize);                   \
    }                                                                                            \
    BY_LOGITS_IDS(SUF, T, i32, int)                                                              \
    BY_LOGITS_IDS(SUF, T, i64, long long)

#define BY_LOGITS_IDS(SUF, T, LS, L)                                                             \
    extern "C" __global__ void __launch_bounds__(TOPK_WARPS * 32)                                \
    topk_softmax_backward_##SUF##_##LS(const T* x, const L* ids, const float* dw, float* dx,    \
                                       u32 rows, u32 cols, u64 ld, u32 k, int renormalize) {     \
        topk_softmax_backward_impl<T, L>(x, ids, dw, dx, rows, cols, ld, k, renormalize);        \
    }

BY_LOGITS(f32, float)
BY_LOGITS(f16, __half)
BY_LOGITS(bf16, __nv_bfloat16)

#define BY_IDS(LS, L)                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                            \
    moe_route_count_##LS(const L* ids, int* counts, int* rank, u32 n, u32 experts, u32 chunk,   \
                         u32 units) {                                                            \
        route_count_impl<L>(ids, counts, rank, n, experts, chunk, units);                        \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                            \
    moe_route_scatter_##LS(const L* ids, const int* base, int* order, int* slots, u32 n,        \
                           u32 experts, u32 chunk) {                                             \
        route_scatter_impl<L>(ids, base, order, slots, n, experts, chunk);                       \
    }

BY_IDS(i32, int)
BY_IDS(i64, long long)

// Y: the sorted rows' type; O: the output's (Y or float32).
#define BY_ROWS(YS, Y, OS, O)                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                            \
    moe_unpermute_##YS##_##OS(const Y* y, const int* slots, const float* weights, O* out,       \
                              u32 tokens, u32 k, u32 cols) {                                     \
        unpermute_impl<Y, O>(y, slots, weights, out, tokens, k, cols);                           \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                            \
    moe_unpermute_backward_##YS##_##OS(const O* dy, const Y* y, const int* slots,               \
                                       const float* weights, Y* dys, float* dw, u32 tokens,      \
                                       u32 k, u32 cols) {                                        \
        unpermute_backward_impl<Y, O>(dy, y, slots, weights, dys, dw, tokens, k, cols);          \
    }

BY_ROWS(f32, float, f32, float)
BY_ROWS(f16, __half, f16, __half)
BY_ROWS(f16, __half, f32, float)
BY_ROWS(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
BY_ROWS(bf16, __nv_bfloat16, f32, float)
