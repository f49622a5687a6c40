"""Kernel sources shared by the module, launch and graph tests of the GPU tier."""

# Stores each scalar parameter, widened to 64 bits, into out[0..13] and the two 64-bit words of
# a 16-byte struct into out[14..15]: every parameter kind PTX has, launched and read back.
# Checked with ptxas (sm_90); ISA 8.0, so drivers from CUDA 12.0 on load it.
STORE_ALL_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .entry store_all(
	.param .u64 store_all_out,
	.param .u8 store_all_u8,
	.param .u16 store_all_u16,
	.param .u32 store_all_u32,
	.param .u64 store_all_u64,
	.param .s8 store_all_s8,
	.param .s16 store_all_s16,
	.param .s32 store_all_s32,
	.param .s64 store_all_s64,
	.param .b8 store_all_b8,
	.param .b16 store_all_b16,
	.param .b32 store_all_b32,
	.param .b64 store_all_b64,
	.param .f32 store_all_f32,
	.param .f64 store_all_f64,
	.param .align 8 .b8 store_all_s[16]
)
{
	.reg .b16 %h<64>;
	.reg .b32 %r<64>;
	.reg .b64 %rd<64>;
	.reg .f32 %f<64>;
	.reg .f64 %fd<64>;

	ld.param.u64 %rd1, [store_all_out];
	cvta.to.global.u64 %rd2, %rd1;
	ld.param.u8 %h10, [store_all_u8];
	cvt.u64.u16 %rd10, %h10;
	st.global.u64 [%rd2+0], %rd10;
	ld.param.u16 %h11, [store_all_u16];
	cvt.u64.u16 %rd11, %h11;
	st.global.u64 [%rd2+8], %rd11;
	ld.param.u32 %r12, [store_all_u32];
	cvt.u64.u32 %rd12, %r12;
	st.global.u64 [%rd2+16], %rd12;
	ld.param.u64 %rd13, [store_all_u64];
	st.global.u64 [%rd2+24], %rd13;
	ld.param.s8 %h14, [store_all_s8];
	cvt.s64.s16 %rd14, %h14;
	st.global.u64 [%rd2+32], %rd14;
	ld.param.s16 %h15, [store_all_s16];
	cvt.s64.s16 %rd15, %h15;
	st.global.u64 [%rd2+40], %rd15;
	ld.param.s32 %r16, [store_all_s32];
	cvt.s64.s32 %rd16, %r16;
	st.global.u64 [%rd2+48], %rd16;
	ld.param.s64 %rd17, [store_all_s64];
	st.global.u64 [%rd2+56], %rd17;
	ld.param.b8 %h18, [store_all_b8];
	cvt.u64.u16 %rd18, %h18;
	st.global.u64 [%rd2+64], %rd18;
	ld.param.b16 %h19, [store_all_b16];
	cvt.u64.u16 %rd19, %h19;
	st.global.u64 [%rd2+72], %rd19;
	ld.param.b32 %r20, [store_all_b32];
	cvt.u64.u32 %rd20, %r20;
	st.global.u64 [%rd2+80], %rd20;
	ld.param.b64 %rd21, [store_all_b64];
	st.global.u64 [%rd2+88], %rd21;
	ld.param.f32 %f22, [store_all_f32];
	mov.b32 %r22, %f22;
	cvt.u64.u32 %rd22, %r22;
	st.global.u64 [%rd2+96], %rd22;
	ld.param.f64 %fd23, [store_all_f64];
	mov.b64 %rd23, %fd23;
	st.global.u64 [%rd2+104], %rd23;
	ld.param.u64 %rd24, [store_all_s];
	st.global.u64 [%rd2+112], %rd24;
	ld.param.u64 %rd25, [store_all_s+8];
	st.global.u64 [%rd2+120], %rd25;
	ret;
}
"""

# In STORE_ALL_PTX order: (PTX type, numpy dtype the 64-bit word is read back as).
STORE_ALL_KINDS = [
    ("u8", "uint64"), ("u16", "uint64"), ("u32", "uint64"), ("u64", "uint64"),
    ("s8", "int64"), ("s16", "int64"), ("s32", "int64"), ("s64", "int64"),
    ("b8", "uint64"), ("b16", "uint64"), ("b32", "uint64"), ("b64", "uint64"),
    ("f32", "uint64"), ("f64", "uint64"),
]

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

# Kernels for launch-path, attribute and graph tests.
MISC = r"""
extern "C" __global__ void add_scalar(float* x, float v, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += v;
}

extern "C" __global__ void copy_f32(float* dst, const float* src, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

extern "C" __global__ void empty_kernel() {}

extern "C" __global__ void tiled(float* out) {
    __shared__ float tile[256];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[255 - threadIdx.x];
}

extern "C" __global__ void dynamic_smem(float* out, unsigned int n) {
    extern __shared__ float buf[];
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}

struct Pair { double scale; long long offset; };

extern "C" __global__ void affine(const Pair p, double* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = p.scale * x[i] + (double)p.offset;
}

extern "C" __global__ void signed_offset(int* out, int delta) {
    out[threadIdx.x] += delta;
}
"""

# Compute capability 9.0 and newer only (cluster special registers).
CLUSTER = r"""
extern "C" __global__ void cluster_size(unsigned int* out) {
    unsigned int rank, size;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    if (threadIdx.x == 0) out[blockIdx.x] = size * 100 + rank;
}
"""

TEMPLATE = r"""
template <typename T>
__global__ void fill(T* out, T value, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""

HALF = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_axpy(__half* y, const __half* x, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(a * __half2float(x[i]) + __half2float(y[i]));
}
extern "C" __global__ void bf16_scale(__nv_bfloat16* y, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(a * __bfloat162float(y[i]));
}
// Half and bfloat16 *scalar* parameters (2-byte structs in the PTX), widened exactly to float;
// __fmul_rn keeps the multiply and add apart (no FMA), so numpy's float32 result is exact.
extern "C" __global__ void half_scalars(float* y, const float* x, __half a, __nv_bfloat16 b,
                                        unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fmul_rn(__half2float(a), x[i]) + __bfloat162float(b);
}
"""
