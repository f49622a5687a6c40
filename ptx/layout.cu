// Memory-layout kernels: a batch of row-major (rows, cols) matrices -> their transposes
// (cols, rows).  One kernel per element size (b16, b32, b64), since only bytes move: any
// 2-, 4- or 8-byte type (float16, bfloat16, float32, int32, float64, ...) uses it.
//
// A 32x32 tile is read with coalesced loads along a row, staged in shared memory and written
// with coalesced stores along a column.  The tile is padded (32x33 elements; 32x34 for 16-bit
// elements, whose pairs share a 4-byte bank) so that reading a column of the tile hits 32
// different banks.  Block (32, 8): each thread moves four elements of the tile.
//
// NCHW -> NHWC is this transpose with batch N, rows C, cols H*W; NHWC -> NCHW uses rows H*W,
// cols C.  The grid is (column tiles, row tiles, batch); row tiles and batch elements beyond
// the grid's y / z limits are covered by looping.
#include "common.cuh"

#define TDIM 32
#define TROWS 8

template <typename T>
__device__ __forceinline__ void transpose_impl(const T* __restrict__ in, T* __restrict__ out,
                                               u64 batch, u64 rows, u64 cols) {
    constexpr int PAD = sizeof(T) == 2 ? 2 : 1;
    __shared__ T tile[TDIM][TDIM + PAD];
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    const u64 c0 = (u64)blockIdx.x * TDIM;
    for (u64 z = blockIdx.z; z < batch; z += gridDim.z) {
        const T* src = in + z * rows * cols;
        T* dst = out + z * rows * cols;
        for (u64 r0 = (u64)blockIdx.y * TDIM; r0 < rows; r0 += (u64)gridDim.y * TDIM) {
#pragma unroll
            for (int j = ty; j < TDIM; j += TROWS) {
                const u64 r = r0 + j, c = c0 + tx;
                if (r < rows && c < cols) tile[j][tx] = src[r * cols + c];
            }
            __syncthreads();
#pragma unroll
            for (int j = ty; j < TDIM; j += TROWS) {
                const u64 c = c0 + j, r = r0 + tx;  // output row c, output column r
                if (c < cols && r < rows) dst[c * rows + r] = tile[tx][j];
            }
            __syncthreads();  // the tile is refilled by the next iteration
        }
    }
}

extern "C" __global__ void transpose_b16(const unsigned short* in, unsigned short* out,
                                         u64 batch, u64 rows, u64 cols) {
    transpose_impl(in, out, batch, rows, cols);
}
extern "C" __global__ void transpose_b32(const unsigned int* in, unsigned int* out, u64 batch,
                                         u64 rows, u64 cols) {
    transpose_impl(in, out, batch, rows, cols);
}
extern "C" __global__ void transpose_b64(const unsigned long long* in, unsigned long long* out,
                                         u64 batch, u64 rows, u64 cols) {
    transpose_impl(in, out, batch, rows, cols);
}
