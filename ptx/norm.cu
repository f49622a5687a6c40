// Layer norm and RMS norm over the last dimension of a C-contiguous (rows, D) array, forward and
// backward, with a residual add fused in front:
//
//   s = round_T(x + residual)            (when residual is given: written to res_out)
//   layer:  mean = sum(s) / D,  rstd = 1 / sqrt(sum((s - mean)^2) / D + eps)
//           y = (s - mean) * rstd * w + b
//   rms:    rstd = 1 / sqrt(sum(s^2) / D + eps),  y = s * rstd * w
//
// Everything is computed in float32; x, residual, y, res_out, dy, dx and dres are of the data
// type T (f32, f16, bf16: the kernel-name suffix); the weight and the bias are float32 or T, each
// on its own (flags bit 0: weight float32, bit 1: bias float32), read as they are stored.  The
// sum is formed as torch forms x + residual in T (a float32 add rounded once to T), and it is
// the rounded sum that is normalised, so the backward of the fused op takes res_out as its x.
//
// Backward, with xhat = (s - mean) * rstd (rms: s * rstd) and g = dy * w per row:
//   layer: dx = rstd * (g - sum(g) / D - xhat * sum(g * xhat) / D) + dres
//   rms:   dx = rstd * (g - xhat * sum(g * xhat) / D) + dres
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy
// dres (may be null) is the gradient that flows along the residual stream, so dx is the
// gradient of both x and residual.  dw and db are reduced deterministically: every block keeps
// the sums of its rows in float32 in a fixed order and writes one partial row to part (dw
// partials in rows [0, P), db in [P, 2P), P = gridDim.x), and norm_param_grad_<W> adds the P
// partials of each column in a fixed order -- no floating-point atomics, the same bits on every
// run with the same grid.
//
// Two kinds of kernel per operation, direction and type:
//
// - _v4 (forward), _v2 and _v4 (backward) ("vector"): D a multiple of 16 / sizeof(T) and every
//   array 16-byte aligned.  A row is served by tpr threads (a power of two up to 32, or a
//   multiple of 32 up to 1024 forward, 512 backward; a block holds blockDim.x / tpr rows), each
//   of which loads up to NV 16-byte vectors of it (vectors lane, lane + tpr, ...) and keeps them
//   in registers as stored, so x (and residual) are read once and y (and res_out) written once:
//   the memory-bound optimum.  The row's sums are warp shuffles, then (tpr > 32) one value per
//   warp through shared memory.  The forward launches one block per group of rows; the
//   backward a grid of P resident blocks that loop over the rows, keeping the dw/db sums of
//   their columns in registers (the rows of one block are combined through dynamic shared
//   memory, slot by slot, before the partial is written).
// - _any: any D and alignment.  One row per block, the row walked once per sum and once more
//   for the output (the later passes read it again, from L1/L2); the backward walks it twice.
//   The backward's per-block sums of dw/db live in its partial row of global memory, each
//   element read and written by the one thread that owns its column.
//
// Aliasing the wrappers allow: y may be x or residual itself; res_out may be x or residual
// itself; dx may be dy, x or dres itself.  Every element is read by the thread that later
// writes it, before it writes it, so this is safe; streaming loads (ld.global.cs) are coherent,
// only the weights and statistics, which no kernel writes, go through the read-only path.
#include "common.cuh"

#define FULL_MASK 0xffffffffu
#define FWD_THREADS_MAX 1024
#define BWD_THREADS_MAX 512
#define ANY_THREADS 256

// -- 16 bytes of T as floats and back -----------------------------------------------------------
template <typename T> struct Lanes { static constexpr int VEC = 16 / (int)sizeof(T); };

template <typename T> __device__ __forceinline__ void unpack(const uint4& r, float* f);
template <> __device__ __forceinline__ void unpack<float>(const uint4& r, float* f) {
    f[0] = __uint_as_float(r.x); f[1] = __uint_as_float(r.y);
    f[2] = __uint_as_float(r.z); f[3] = __uint_as_float(r.w);
}
// bfloat16 is the top half of a float32: widening is a shift.
__device__ __forceinline__ void unpack_bf16x2(u32 w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(const uint4& r, float* f) {
    unpack_bf16x2(r.x, f); unpack_bf16x2(r.y, f + 2);
    unpack_bf16x2(r.z, f + 4); unpack_bf16x2(r.w, f + 6);
}
__device__ __forceinline__ void unpack_f16x2(u32 w, float* f) {
    f[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
    f[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
template <> __device__ __forceinline__ void unpack<__half>(const uint4& r, float* f) {
    unpack_f16x2(r.x, f); unpack_f16x2(r.y, f + 2);
    unpack_f16x2(r.z, f + 4); unpack_f16x2(r.w, f + 6);
}

// Round to T (to nearest even, as numpy's astype and torch do) and pack.  bfloat16 by integer
// rounding of the float32 bits: sm_75 has no conversion instruction, and the library's generic
// one (from_acc) is several times longer, which these unrolled kernels repeat hundreds of times.
// NaN stays a (quiet) NaN with its sign; finite values round exactly as from_acc does.
template <typename T> __device__ __forceinline__ u32 bits16(float v);
template <> __device__ __forceinline__ u32 bits16<__half>(float v) {
    return __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ u32 bits16<__nv_bfloat16>(float v) {
    const u32 u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

template <typename T> __device__ __forceinline__ uint4 pack(const float* f) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = bits16<T>(f[2 * i]) | (bits16<T>(f[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}
template <> __device__ __forceinline__ uint4 pack<float>(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
}

// Streaming loads and stores (each element of x, dy, y, dx is touched once: evict first).
__device__ __forceinline__ uint4 load_stream(const void* p) {
    return __ldcs(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ void store_stream(void* p, const uint4& v) {
    __stcs(reinterpret_cast<uint4*>(p), v);
}

// The VEC weights (or biases) of vector vi, float32 or T as stored, through the read-only
// cache: every row of the block, and every block of the SM, reads the same ones.
template <typename T>
__device__ __forceinline__ void load_param(const void* p, bool f32, u32 vi, float* f) {
    constexpr int VEC = Lanes<T>::VEC;
    if (sizeof(T) == 4 || f32) {
        const uint4* q = reinterpret_cast<const uint4*>(p) + (u64)vi * (VEC / 4);
#pragma unroll
        for (int i = 0; i < VEC / 4; ++i) unpack<float>(__ldg(q + i), f + 4 * i);
    } else {
        unpack<T>(__ldg(reinterpret_cast<const uint4*>(p) + vi), f);
    }
}

// One weight (or bias) of the _any kernels.
template <typename T>
__device__ __forceinline__ float param_at(const void* p, bool f32, u64 j) {
    return f32 ? __ldg(reinterpret_cast<const float*>(p) + j)
               : to_acc(reinterpret_cast<const T*>(p)[j]);
}

// -- sums over the threads of a row --------------------------------------------------------------
// tpr threads serve a row: a power of two up to 32 (xor shuffles stay inside the group), or a
// multiple of 32 (each warp sums its lanes, then every thread adds the row's warp sums from
// shared memory in warp order).  Every thread of the row gets the same bits: a butterfly's two
// partners add the same two values, and the warp sums are added in one order by all.  sh holds
// 32 floats per value; callers alternate two buffers, so that no thread can overwrite a buffer
// another is still reading (a barrier of the other buffer lies between).  Every thread of the
// block must call it (it holds a barrier when tpr > 32).
template <int N>
__device__ __forceinline__ void row_sums(float (&v)[N], u32 tpr, float (*sh)[32]) {
    const u32 width = tpr < 32 ? tpr : 32;
    for (u32 off = width >> 1; off; off >>= 1) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(FULL_MASK, v[i], off);
    }
    if (tpr <= 32) return;
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) sh[i][threadIdx.x >> 5] = v[i];
    }
    __syncthreads();
    const u32 wpr = tpr >> 5, w0 = (threadIdx.x / tpr) * wpr;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float t = sh[i][w0];
        for (u32 k = 1; k < wpr; ++k) t += sh[i][w0 + k];
        v[i] = t;
    }
}

__device__ __forceinline__ float inv_std(float sum_sq, u32 d, float eps) {
    return 1.0f / sqrtf(sum_sq / (float)d + eps);
}

// -- forward, rows in registers ------------------------------------------------------------------
template <typename T, bool RMS, int NV>
__device__ __forceinline__ void fwd_vec(const T* x, const T* res, T* y, T* res_out,
                                        const void* w, const void* b, float* mean_out,
                                        float* rstd_out, u64 rows, u32 d, u32 tpr, u32 flags,
                                        float eps) {
    constexpr int VEC = Lanes<T>::VEC;
    __shared__ float red[2][1][32];
    const u32 rpb = blockDim.x / tpr;
    const u32 slot = threadIdx.x / tpr, lane = threadIdx.x - slot * tpr;
    const u32 nvec = d / VEC;
    const bool wf32 = flags & 1u, bf32 = flags & 2u;
    int buf = 0;
    for (u64 first = (u64)blockIdx.x * rpb; first < rows; first += (u64)gridDim.x * rpb) {
        const u64 row = first + slot;
        const bool live = row < rows;
        const u64 off = row * d;
        // Every load of the row first, then the stores: a store the compiler cannot prove
        // apart from a later load would otherwise serialise them.
        uint4 v[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            v[k] = make_uint4(0u, 0u, 0u, 0u);       // +0.0 in every type: adds nothing
            if (live && vi < nvec) v[k] = load_stream(x + off + (u64)vi * VEC);
        }
        if (res) {
            uint4 r[NV];
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const u32 vi = lane + k * tpr;
                r[k] = make_uint4(0u, 0u, 0u, 0u);
                if (live && vi < nvec) r[k] = load_stream(res + off + (u64)vi * VEC);
            }
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const u32 vi = lane + k * tpr;
                if (live && vi < nvec) {
                    float a[VEC], c[VEC];
                    unpack<T>(v[k], a);
                    unpack<T>(r[k], c);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) a[e] += c[e];
                    v[k] = pack<T>(a);
                    store_stream(res_out + off + (u64)vi * VEC, v[k]);
                }
            }
        }
        float mean = 0.0f, rstd;
        float acc[1] = {0.0f};
        if (!RMS) {
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                float f[VEC];
                unpack<T>(v[k], f);
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[0] += f[e];
            }
            row_sums(acc, tpr, red[buf]);
            buf ^= 1;
            mean = acc[0] / (float)d;
            acc[0] = 0.0f;
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                if (lane + k * tpr < nvec) {
                    float f[VEC];
                    unpack<T>(v[k], f);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const float t = f[e] - mean;
                        acc[0] = fmaf(t, t, acc[0]);
                    }
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                float f[VEC];
                unpack<T>(v[k], f);
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[0] = fmaf(f[e], f[e], acc[0]);
            }
        }
        row_sums(acc, tpr, red[buf]);
        buf ^= 1;
        rstd = inv_std(acc[0], d, eps);
        if (live && lane == 0) {
            if (mean_out) mean_out[row] = mean;
            if (rstd_out) rstd_out[row] = rstd;
        }
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            if (live && vi < nvec) {
                float f[VEC], wv[VEC], bv[VEC];
                unpack<T>(v[k], f);
                load_param<T>(w, wf32, vi, wv);
                if (!RMS && b) {
                    load_param<T>(b, bf32, vi, bv);
                } else {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) bv[e] = 0.0f;
                }
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    f[e] = RMS ? f[e] * rstd * wv[e] : fmaf((f[e] - mean) * rstd, wv[e], bv[e]);
                store_stream(y + off + (u64)vi * VEC, pack<T>(f));
            }
        }
    }
}

// -- backward, rows in registers -----------------------------------------------------------------
template <typename T, bool RMS, int NV>
__device__ __forceinline__ void bwd_vec(const T* dy, const T* x, const void* w,
                                        const float* mean, const float* rstd, const T* dres,
                                        T* dx, float* part, u64 rows, u32 d, u32 tpr,
                                        u32 flags) {
    constexpr int VEC = Lanes<T>::VEC;
    __shared__ float red[2][2][32];
    extern __shared__ float4 comb4[];        // rows per block > 1: (RMS ? 1 : 2) * d floats
    const u32 rpb = blockDim.x / tpr;
    const u32 slot = threadIdx.x / tpr, lane = threadIdx.x - slot * tpr;
    const u32 nvec = d / VEC;
    const bool wf32 = flags & 1u;
    float aw[NV][VEC], ab[NV][VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) { aw[k][e] = 0.0f; ab[k][e] = 0.0f; }
    }
    int buf = 0;
    for (u64 first = (u64)blockIdx.x * rpb; first < rows; first += (u64)gridDim.x * rpb) {
        const u64 row = first + slot;
        const bool live = row < rows;
        const u64 off = row * d;
        uint4 xv[NV], gv[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            xv[k] = gv[k] = make_uint4(0u, 0u, 0u, 0u);
            if (live && vi < nvec) {
                xv[k] = load_stream(x + off + (u64)vi * VEC);
                gv[k] = load_stream(dy + off + (u64)vi * VEC);
            }
        }
        const float m = (!RMS && live) ? __ldg(mean + row) : 0.0f;
        const float r = live ? __ldg(rstd + row) : 0.0f;
        float sums[2] = {0.0f, 0.0f};            // sum(g), sum(g * xhat)
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            if (live && vi < nvec) {
                float f[VEC], g[VEC], wv[VEC];
                unpack<T>(xv[k], f);
                unpack<T>(gv[k], g);
                load_param<T>(w, wf32, vi, wv);
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float xh = (RMS ? f[e] : f[e] - m) * r;
                    aw[k][e] = fmaf(g[e], xh, aw[k][e]);
                    if (!RMS) ab[k][e] += g[e];
                    const float gw = g[e] * wv[e];
                    sums[0] += gw;
                    sums[1] = fmaf(gw, xh, sums[1]);
                }
            }
        }
        // dres is loaded only now, when the registers of the sums are free again (its latency
        // is hidden by the other rows of the SM).
        uint4 rv[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            rv[k] = make_uint4(0u, 0u, 0u, 0u);
            if (dres && live && vi < nvec) rv[k] = load_stream(dres + off + (u64)vi * VEC);
        }
        row_sums(sums, tpr, red[buf]);
        buf ^= 1;
        const float c1 = sums[0] / (float)d, c2 = sums[1] / (float)d;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            if (live && vi < nvec) {
                float f[VEC], g[VEC], wv[VEC], rr[VEC];
                unpack<T>(xv[k], f);
                unpack<T>(gv[k], g);
                unpack<T>(rv[k], rr);                // zeros without dres
                load_param<T>(w, wf32, vi, wv);
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float xh = (RMS ? f[e] : f[e] - m) * r;
                    const float gw = g[e] * wv[e];
                    const float t = RMS ? gw - xh * c2 : gw - c1 - xh * c2;
                    f[e] = fmaf(r, t, rr[e]);
                }
                store_stream(dx + off + (u64)vi * VEC, pack<T>(f));
            }
        }
    }
    // This block's partial row of each parameter gradient.  part + p * d: dw of block p;
    // part + (P + p) * d: db of block p.
    const u64 nb = gridDim.x;
    float* pw = part + (u64)blockIdx.x * d;
    float* pb = part + (nb + blockIdx.x) * d;
    if (rpb == 1) {
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const u32 vi = lane + k * tpr;
            if (vi < nvec) {
#pragma unroll
                for (int i = 0; i < VEC / 4; ++i) {
                    reinterpret_cast<float4*>(pw + (u64)vi * VEC)[i] =
                        make_float4(aw[k][4 * i], aw[k][4 * i + 1], aw[k][4 * i + 2],
                                    aw[k][4 * i + 3]);
                    if (!RMS)
                        reinterpret_cast<float4*>(pb + (u64)vi * VEC)[i] =
                            make_float4(ab[k][4 * i], ab[k][4 * i + 1], ab[k][4 * i + 2],
                                        ab[k][4 * i + 3]);
                }
            }
        }
        return;
    }
    // Several rows per block: their sums are added slot by slot (slot 0 first) in shared
    // memory, then the block writes its partial rows.
    float* comb = reinterpret_cast<float*>(comb4);
    for (u32 s = 0; s < rpb; ++s) {
        if (slot == s) {
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const u32 vi = lane + k * tpr;
                if (vi < nvec) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const u32 j = vi * VEC + e;
                        comb[j] = s ? comb[j] + aw[k][e] : aw[k][e];
                        if (!RMS) comb[d + j] = s ? comb[d + j] + ab[k][e] : ab[k][e];
                    }
                }
            }
        }
        __syncthreads();
    }
    for (u32 j = threadIdx.x; j < d; j += blockDim.x) {
        pw[j] = comb[j];
        if (!RMS) pb[j] = comb[d + j];
    }
}

// -- any D, any alignment ------------------------------------------------------------------------
template <typename T, bool RMS>
__device__ __forceinline__ void fwd_any(const T* x, const T* res, T* y, T* res_out,
                                        const void* w, const void* b, float* mean_out,
                                        float* rstd_out, u64 rows, u32 d, u32 flags,
                                        float eps) {
    __shared__ float red[2][1][32];
    const u32 tpr = blockDim.x;
    const bool wf32 = flags & 1u, bf32 = flags & 2u;
    int buf = 0;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 off = row * d;
        // With a residual, the rounded sum is written to res_out and read back from there by
        // the thread that wrote it.
        const T* src = res ? res_out + off : x + off;
        float acc[1] = {0.0f};
        for (u32 j = threadIdx.x; j < d; j += tpr) {
            float v = to_acc(x[off + j]);
            if (res) {
                const T t = from_acc<T>(v + to_acc(res[off + j]));
                res_out[off + j] = t;
                v = to_acc(t);
            }
            acc[0] = RMS ? fmaf(v, v, acc[0]) : acc[0] + v;
        }
        row_sums(acc, tpr, red[buf]);
        buf ^= 1;
        float mean = 0.0f;
        if (!RMS) {
            mean = acc[0] / (float)d;
            acc[0] = 0.0f;
            for (u32 j = threadIdx.x; j < d; j += tpr) {
                const float t = to_acc(src[j]) - mean;
                acc[0] = fmaf(t, t, acc[0]);
            }
            row_sums(acc, tpr, red[buf]);
            buf ^= 1;
        }
        const float rstd = inv_std(acc[0], d, eps);
        if (threadIdx.x == 0) {
            if (mean_out) mean_out[row] = mean;
            if (rstd_out) rstd_out[row] = rstd;
        }
        for (u32 j = threadIdx.x; j < d; j += tpr) {
            const float v = to_acc(src[j]);
            const float wv = param_at<T>(w, wf32, j);
            float o;
            if (RMS) {
                o = v * rstd * wv;
            } else {
                o = fmaf((v - mean) * rstd, wv, b ? param_at<T>(b, bf32, j) : 0.0f);
            }
            y[off + j] = from_acc<T>(o);
        }
    }
}

template <typename T, bool RMS>
__device__ __forceinline__ void bwd_any(const T* dy, const T* x, const void* w,
                                        const float* mean, const float* rstd, const T* dres,
                                        T* dx, float* part, u64 rows, u32 d, u32 flags) {
    __shared__ float red[2][2][32];
    const u32 tpr = blockDim.x;
    const bool wf32 = flags & 1u;
    float* pw = part + (u64)blockIdx.x * d;
    float* pb = part + ((u64)gridDim.x + blockIdx.x) * d;
    for (u32 j = threadIdx.x; j < d; j += tpr) {
        pw[j] = 0.0f;
        if (!RMS) pb[j] = 0.0f;
    }
    int buf = 0;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const u64 off = row * d;
        const float m = RMS ? 0.0f : __ldg(mean + row);
        const float r = __ldg(rstd + row);
        float sums[2] = {0.0f, 0.0f};
        for (u32 j = threadIdx.x; j < d; j += tpr) {
            const float xh = (to_acc(x[off + j]) - m) * r;
            const float g = to_acc(dy[off + j]);
            pw[j] = fmaf(g, xh, pw[j]);
            if (!RMS) pb[j] += g;
            const float gw = g * param_at<T>(w, wf32, j);
            sums[0] += gw;
            sums[1] = fmaf(gw, xh, sums[1]);
        }
        row_sums(sums, tpr, red[buf]);
        buf ^= 1;
        const float c1 = sums[0] / (float)d, c2 = sums[1] / (float)d;
        for (u32 j = threadIdx.x; j < d; j += tpr) {
            const float xh = (to_acc(x[off + j]) - m) * r;
            const float gw = to_acc(dy[off + j]) * param_at<T>(w, wf32, j);
            const float t = RMS ? gw - xh * c2 : gw - c1 - xh * c2;
            dx[off + j] = from_acc<T>(fmaf(r, t, dres ? to_acc(dres[off + j]) : 0.0f));
        }
    }
}

// -- the parameter gradients: P partial rows of float32, added in a fixed order ------------------
// Block 256 = 32 columns x 8 strands: strand t adds partials t, t + 8, ... of its column, then
// strand 0 adds the 8 strands in order and rounds once to the parameter's type.
template <typename W>
__device__ __forceinline__ void param_grad(const float* part, W* out, u32 parts, u32 d) {
    __shared__ float sh[8][33];
    const u32 tx = threadIdx.x & 31u, ty = threadIdx.x >> 5;
    const u64 j = (u64)blockIdx.x * 32 + tx;
    float s = 0.0f;
    if (j < d) {
#pragma unroll 4
        for (u32 p = ty; p < parts; p += 8) s += part[(u64)p * d + j];
    }
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < d) {
        float t = sh[0][tx];
#pragma unroll
        for (int i = 1; i < 8; ++i) t += sh[i][tx];
        out[j] = from_acc<W>(t);
    }
}

// -- entry points --------------------------------------------------------------------------------
#define FWD_ARGS(T)                                                                               \
    const T *x, const T *res, T *y, T *res_out, const void *w, const void *b, float *mean_out,    \
        float *rstd_out, u64 rows, u32 d, u32 tpr, u32 flags, float eps
#define BWD_ARGS(T)                                                                               \
    const T *dy, const T *x, const void *w, const float *mean, const float *rstd, const T *dres, \
        T *dx, float *part, u64 rows, u32 d, u32 tpr, u32 flags

#define NORM_FWD_VEC(OP, RMS, SUF, T, NV)                                                         \
    extern "C" __global__ void __launch_bounds__(FWD_THREADS_MAX)                                 \
        OP##_fwd_##SUF##_v##NV(FWD_ARGS(T)) {                                                     \
        fwd_vec<T, RMS, NV>(x, res, y, res_out, w, b, mean_out, rstd_out, rows, d, tpr, flags,    \
                            eps);                                                                 \
    }
#define NORM_BWD_VEC(OP, RMS, SUF, T, NV)                                                         \
    extern "C" __global__ void __launch_bounds__(BWD_THREADS_MAX)                                 \
        OP##_bwd_##SUF##_v##NV(BWD_ARGS(T)) {                                                     \
        bwd_vec<T, RMS, NV>(dy, x, w, mean, rstd, dres, dx, part, rows, d, tpr, flags);           \
    }
// The _any kernels take tpr too (unused: their rows are whole blocks), so every kernel of a
// direction has one signature.
#define NORM_ANY(OP, RMS, SUF, T)                                                                 \
    extern "C" __global__ void __launch_bounds__(ANY_THREADS) OP##_fwd_##SUF##_any(FWD_ARGS(T)) { \
        fwd_any<T, RMS>(x, res, y, res_out, w, b, mean_out, rstd_out, rows, d, flags, eps);       \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(ANY_THREADS) OP##_bwd_##SUF##_any(BWD_ARGS(T)) { \
        bwd_any<T, RMS>(dy, x, w, mean, rstd, dres, dx, part, rows, d, flags);                    \
    }
#define NORM_OP(OP, RMS, SUF, T)                                                                  \
    NORM_FWD_VEC(OP, RMS, SUF, T, 4)                                                              \
    NORM_BWD_VEC(OP, RMS, SUF, T, 2)                                                              \
    NORM_BWD_VEC(OP, RMS, SUF, T, 4)                                                              \
    NORM_ANY(OP, RMS, SUF, T)
#define NORM_TYPE(SUF, T)                                                                         \
    NORM_OP(layer_norm, false, SUF, T)                                                            \
    NORM_OP(rms_norm, true, SUF, T)                                                               \
    extern "C" __global__ void __launch_bounds__(256)                                             \
        norm_param_grad_##SUF(const float* part, T* out, u32 parts, u32 d) {                      \
        param_grad<T>(part, out, parts, d);                                                       \
    }

NORM_TYPE(f32, float)
NORM_TYPE(f16, __half)
NORM_TYPE(bf16, __nv_bfloat16)
