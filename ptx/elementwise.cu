// Elementwise kernels: add, axpy, scale, fill, bias + ReLU / GELU, inference batch-norm + ReLU,
// ReLU backward, a convolution's per-channel bias (+ residual) + activation epilogue.  Flat,
// C-contiguous data; grid-stride loops with 64-bit indices, so any grid covers any size.  Suffixes: f32, f64, f16 (IEEE half), bf16 (bfloat16).
#include "common.cuh"

// No __restrict__ in this file: in-place calls (out is x, axpy of y onto itself) are legal, and
// these loops are bound by memory traffic, not by what aliasing analysis would buy.
template <typename T>
__device__ __forceinline__ void add_impl(const T* x, const T* y, T* out, u64 n) {
    for (u64 i = global_thread(); i < n; i += grid_threads())
        out[i] = store_acc<T>(to_acc(x[i]) + to_acc(y[i]));
}

// y += alpha * x, rounded once.
template <typename T, typename A>
__device__ __forceinline__ void axpy_impl(A alpha, const T* x, T* y, u64 n) {
    for (u64 i = global_thread(); i < n; i += grid_threads())
        y[i] = store_acc<T>(alpha * to_acc(x[i]) + to_acc(y[i]));
}

// out = alpha * x.
template <typename T, typename A>
__device__ __forceinline__ void scale_impl(const T* x, A alpha, T* out, u64 n) {
    for (u64 i = global_thread(); i < n; i += grid_threads())
        out[i] = store_acc<T>(alpha * to_acc(x[i]));
}

template <typename T>
__device__ __forceinline__ void fill_impl(T* x, T value, u64 n) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) x[i] = value;
}

// grad * (act > 0): the gradient of ReLU given its output (or input: same sign).
template <typename T>
__device__ __forceinline__ void relu_backward_impl(const T* grad, const T* act, T* out, u64 n) {
    typedef typename Acc<T>::type A;
    for (u64 i = global_thread(); i < n; i += grid_threads())
        out[i] = to_acc(act[i]) > A(0) ? grad[i] : store_acc<T>(A(0));
}

__device__ __forceinline__ float relu_f(float v) { return v > 0.0f ? v : 0.0f; }

// GELU, tanh approximation: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
__device__ __forceinline__ float gelu_tanh_f(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

// x is row-major (rows, features); bias has `features` elements.
template <typename T, int ACT>
__device__ __forceinline__ void bias_act_impl(const T* x, const T* bias, T* out,
                                              u64 n, u64 features) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        float v = to_acc(x[i]) + to_acc(bias[i % features]);
        out[i] = from_acc<T>(ACT == 0 ? relu_f(v) : gelu_tanh_f(v));
    }
}

// Inference batch norm + ReLU on NCHW: channel of flat index i is (i / inner) % channels,
// inner = H * W.  Per-channel parameters are float32 whatever the data type (as in cuDNN).
template <typename T>
__device__ __forceinline__ void bn_relu_impl(const T* x, const float* scale, const float* shift,
                                             const float* mean, const float* var, float eps, T* out,
                                             u64 n, u64 channels, u64 inner) {
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        u64 c = (i / inner) % channels;
        float inv = 1.0f / sqrtf(var[c] + eps);
        float v = (to_acc(x[i]) - mean[c]) * (inv * scale[c]) + shift[c];
        out[i] = from_acc<T>(relu_f(v));
    }
}

// The epilogue of a convolution, in place on its output y (N, C, ...) in either packed layout:
// y = act(y + alpha2 * z + bias[c]), channel c = (i / inner) % channels (inner = the spatial
// size for channels-first data, 1 for channels-last).  z may be null.  act: 0 identity, 1 ReLU.
// One pass over y, where bias-add and ReLU as separate kernels make two.  The channel index
// is computed in 32-bit arithmetic when the size allows: 64-bit division is emulated, and
// made this memory-bound pass compute-bound.
// One element of the epilogue: y[i] = act(y[i] + b + alpha2 * z[i]).
template <typename T, typename I>
__device__ __forceinline__ void channel_bias_act_at(T* y, const T* z, I i, float b,
                                                    float alpha2, int act) {
    float v = to_acc(y[i]) + b;
    if (z) v += alpha2 * to_acc(z[i]);
    y[i] = from_acc<T>(act ? relu_f(v) : v);
}

template <typename T, typename I>
__device__ __forceinline__ void channel_bias_act_loop(T* y, const T* z, float alpha2,
                                                      const T* bias, I n, I channels, I inner,
                                                      int act) {
    const I step = (I)grid_threads();
    for (I i = (I)global_thread(); i < n; i += step) {
        I c = (inner == 1 ? i : i / inner) % channels;
        channel_bias_act_at<T, I>(y, z, i, to_acc(bias[c]), alpha2, act);
    }
}

// Channels-first data with planes of at least a block's width: blocks take whole planes (one
// channel each, so the bias is read once and no index is divided), threads walk a plane.
template <typename T>
__device__ __forceinline__ void channel_bias_act_planes(T* y, const T* z, float alpha2,
                                                        const T* bias, u64 planes, u64 channels,
                                                        u32 inner, int act) {
    for (u64 p = blockIdx.x; p < planes; p += gridDim.x) {
        const float b = to_acc(bias[p % channels]);
        T* yp = y + p * inner;
        const T* zp = z ? z + p * inner : nullptr;
        for (u32 j = threadIdx.x; j < inner; j += blockDim.x)
            channel_bias_act_at<T, u32>(yp, zp, j, b, alpha2, act);
    }
}

template <typename T>
__device__ __forceinline__ void channel_bias_act_impl(T* y, const T* z, float alpha2,
                                                      const T* bias, u64 n, u64 channels,
                                                      u64 inner, int act) {
    if (inner >= blockDim.x && inner < (1ull << 31))
        channel_bias_act_planes<T>(y, z, alpha2, bias, n / inner, channels, (u32)inner, act);
    // i + step stays below 2^32 when n and the grid are both below 2^31
    else if (n < (1ull << 31) && grid_threads() < (1ull << 31))
        channel_bias_act_loop<T, u32>(y, z, alpha2, bias, (u32)n, (u32)channels, (u32)inner,
                                      act);
    else
        channel_bias_act_loop<T, u64>(y, z, alpha2, bias, n, channels, inner, act);
}

#define ELEMENTWISE(SUF, T, A)                                                                   \
    extern "C" __global__ void add_##SUF(const T* x, const T* y, T* out, u64 n) {               \
        add_impl<T>(x, y, out, n);                                                               \
    }                                                                                            \
    extern "C" __global__ void axpy_##SUF(A alpha, const T* x, T* y, u64 n) {                   \
        axpy_impl<T, A>(alpha, x, y, n);                                                         \
    }                                                                                            \
    extern "C" __global__ void scale_##SUF(const T* x, A alpha, T* out, u64 n) {                \
        scale_impl<T, A>(x, alpha, out, n);                                                      \
    }                                                                                            \
    extern "C" __global__ void relu_backward_##SUF(const T* grad, const T* act, T* out, u64 n) { \
        relu_backward_impl<T>(grad, act, out, n);                                                \
    }

ELEMENTWISE(f32, float, float)
ELEMENTWISE(f64, double, double)
ELEMENTWISE(f16, __half, float)
ELEMENTWISE(bf16, __nv_bfloat16, float)

extern "C" __global__ void fill_f32(float* x, float value, u64 n) { fill_impl<float>(x, value, n); }
extern "C" __global__ void fill_f64(double* x, double value, u64 n) { fill_impl<double>(x, value, n); }
// 16-bit types take the value's bit pattern, so the host decides the rounding exactly.
extern "C" __global__ void fill_f16(__half* x, u32 bits, u64 n) {
    fill_impl<__half>(x, __ushort_as_half((unsigned short)bits), n);
}
extern "C" __global__ void fill_bf16(__nv_bfloat16* x, u32 bits, u64 n) {
    fill_impl<__nv_bfloat16>(x, __ushort_as_bfloat16((unsigned short)bits), n);
}

#define BIAS_BN(SUF, T)                                                                          \
    extern "C" __global__ void bias_relu_##SUF(const T* x, const T* bias, T* out, u64 n,        \
                                                u64 features) {                                  \
        bias_act_impl<T, 0>(x, bias, out, n, features);                                          \
    }                                                                                            \
    extern "C" __global__ void bias_gelu_##SUF(const T* x, const T* bias, T* out, u64 n,        \
                                                u64 features) {                                  \
        bias_act_impl<T, 1>(x, bias, out, n, features);                                          \
    }                                                                                            \
    extern "C" __global__ void batch_norm_relu_##SUF(                                            \
        const T* x, const float* scale, const float* shift, const float* mean,                  \
        const float* var, float eps, T* out, u64 n, u64 channels, u64 inner) {                  \
        bn_relu_impl<T>(x, scale, shift, mean, var, eps, out, n, channels, inner);               \
    }                                                                                            \
    extern "C" __global__ void channel_bias_act_##SUF(T* y, const T* z, float alpha2,           \
                                                       const T* bias, u64 n, u64 channels,       \
                                                       u64 inner, int act) {                     \
        channel_bias_act_impl<T>(y, z, alpha2, bias, n, channels, inner, act);                   \
    }

BIAS_BN(f32, float)
BIAS_BN(f16, __half)
BIAS_BN(bf16, __nv_bfloat16)
