// Row-wise softmax and log-softmax of a C-contiguous (rows, cols) array, numerically stable:
// exp(x - max(row)) / sum(exp(x - max(row))).  One block per row (looping over rows when there
// are more rows than blocks); the threads stride along the row, so a row of any length works,
// and the max and the sum are block reductions (warp shuffles, then one warp over the per-warp
// partials).  16-bit inputs are accumulated in float32.  blockDim.x must be a multiple of 32.
// out may be x itself: each thread rewrites only the elements it alone reads last.
#include "common.cuh"

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The reduction of v over the block, returned to every thread.  sh holds 33 floats: one
// partial per warp and the result.  Callers alternate two buffers, so a thread still reading
// one reduction's result never races with the next reduction's writes.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* sh) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? sh[lane] : (MAX ? neg_inf() : 0.0f);
        v = MAX ? warp_max(v) : warp_sum(v);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

template <typename T, bool LOG>
__device__ __forceinline__ void softmax_impl(const T* x, T* out,
                                             u64 rows, u64 cols) {
    __shared__ float sh_max[33];
    __shared__ float sh_sum[33];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * cols;
        T* yr = out + row * cols;
        float m = neg_inf();
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, to_acc(xr[j]));
        m = block_reduce<true>(m, sh_max);
        float s = 0.0f;
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) s += expf(to_acc(xr[j]) - m);
        s = block_reduce<false>(s, sh_sum);
        if (LOG) {
            const float shift = m + logf(s);
            for (u64 j = threadIdx.x; j < cols; j += blockDim.x)
                yr[j] = from_acc<T>(to_acc(xr[j]) - shift);
        } else {
            const float inv = 1.0f / s;
            for (u64 j = threadIdx.x; j < cols; j += blockDim.x)
                yr[j] = from_acc<T>(expf(to_acc(xr[j]) - m) * inv);
        }
    }
}

#define SOFTMAX(SUF, T)                                                                       \
    extern "C" __global__ void softmax_##SUF(const T* x, T* out, u64 rows, u64 cols) {       \
        softmax_impl<T, false>(x, out, rows, cols);                                           \
    }                                                                                         \
    extern "C" __global__ void log_softmax_##SUF(const T* x, T* out, u64 rows, u64 cols) {   \
        softmax_impl<T, true>(x, out, rows, cols);                                            \
    }

SOFTMAX(f32, float)
SOFTMAX(f16, __half)
SOFTMAX(bf16, __nv_bfloat16)
