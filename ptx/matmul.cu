// Row-major float32 matrix products C = A @ B, A (M, K), B (K, N), C (M, N), all C-contiguous.
//
// matmul_naive_f32: one thread per element of C, reading A and B straight from global memory
// (the textbook baseline).  matmul_tiled_f32 / bmm_f32: 32x32 tiles of A and B staged in
// shared memory; a block of 32x8 threads computes a 32x32 tile of C, four rows per thread, so
// each value loaded from shared memory feeds four multiply-adds.  bmm_f32 takes one batch
// element per grid z (looping when the batch exceeds the grid); a batch stride of 0 reuses
// one matrix for every element (broadcasting).
#include "common.cuh"

#define TILE 32
#define ROWS 8  // blockDim.y of the tiled kernels; each thread computes TILE / ROWS rows

extern "C" __global__ void matmul_naive_f32(const float* __restrict__ A,
                                            const float* __restrict__ B, float* __restrict__ C,
                                            u32 M, u32 N, u32 K) {
    u64 col = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (u64 row = (u64)blockIdx.y * blockDim.y + threadIdx.y; row < M;
         row += (u64)gridDim.y * blockDim.y) {
        if (col >= N) return;
        const float* a = A + row * K;
        float acc = 0.0f;
        for (u32 k = 0; k < K; ++k) acc += a[k] * B[(u64)k * N + col];
        C[row * N + col] = acc;
    }
}

// One TILE x TILE tile of C per (tile row, blockIdx.x); block (TILE, ROWS).
__device__ __forceinline__ void tiled_tile(const float* __restrict__ A,
                                           const float* __restrict__ B, float* __restrict__ C,
                                           u32 M, u32 N, u32 K, u64 row0) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    const u64 col = (u64)blockIdx.x * TILE + tx;
    float acc[TILE / ROWS];
#pragma unroll
    for (int r = 0; r < TILE / ROWS; ++r) acc[r] = 0.0f;

    for (u32 k0 = 0; k0 < K; k0 += TILE) {
        // Guarded loads: zeros outside the matrices add nothing to the sums.
#pragma unroll
        for (int r = 0; r < TILE / ROWS; ++r) {
            const u32 tr = ty + r * ROWS;
            const u64 arow = row0 + tr;
            const u32 acol = k0 + tx;
            As[tr][tx] = (arow < M && acol < K) ? A[arow * K + acol] : 0.0f;
            const u32 brow = k0 + tr;
            Bs[tr][tx] = (brow < K && col < N) ? B[(u64)brow * N + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < TILE; ++kk) {
            const float b = Bs[kk][tx];  // consecutive threads, consecutive banks
#pragma unroll
            for (int r = 0; r < TILE / ROWS; ++r)
                acc[r] += As[ty + r * ROWS][kk] * b;  // one address per warp: a broadcast
        }
        __syncthreads();
    }
    if (col < N) {
#pragma unroll
        for (int r = 0; r < TILE / ROWS; ++r) {
            const u64 row = row0 + ty + r * ROWS;
            if (row < M) C[row * N + col] = acc[r];
        }
    }
}

extern "C" __global__ void matmul_tiled_f32(const float* A, const float* B, float* C, u32 M,
                                            u32 N, u32 K) {
    // Tile rows beyond the grid's y limit are covered by looping (uniform per block, so the
    // barriers inside stay legal).
    for (u64 by = blockIdx.y; by * TILE < M; by += gridDim.y)
        tiled_tile(A, B, C, M, N, K, by * TILE);
}

extern "C" __global__ void bmm_f32(const float* A, const float* B, float* C, u32 batch, u32 M,
                                   u32 N, u32 K, u64 stride_a, u64 stride_b, u64 stride_c) {
    for (u64 z = blockIdx.z; z < batch; z += gridDim.z)
        for (u64 by = blockIdx.y; by * TILE < M; by += gridDim.y)
            tiled_tile(A + z * stride_a, B + z * stride_b, C + z * stride_c, M, N, K, by * TILE);
}
