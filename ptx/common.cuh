// Helpers shared by the cudalibs kernel library (cudalibs/ptx/*.cu).
//
// Every kernel is `extern "C"` (so its PTX name is its C name) and computes in float (double
// for f64): half and bfloat16 values are widened on load and rounded once on store, which is
// what the numpy references in cudalibs.testing.ref assume.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned long long u64;
typedef unsigned int u32;

// Widen to the accumulation type.
__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

// Round to the storage type (round to nearest even, as numpy's astype does).
template <typename T> __device__ __forceinline__ T from_acc(float x);
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
__device__ __forceinline__ double from_acc_d(double x) { return x; }

// The accumulation type of each storage type.
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

template <typename T> __device__ __forceinline__ T store_acc(typename Acc<T>::type x) {
    return from_acc<T>(x);
}
template <> __device__ __forceinline__ double store_acc<double>(double x) { return x; }

// -infinity without <math.h> (NVRTC has no INFINITY macro).
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Grid-stride loop bounds in 64-bit: arrays may exceed 2**31 elements.
__device__ __forceinline__ u64 global_thread() {
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }
