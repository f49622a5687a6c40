// Tensor-core GEMM through WMMA: C = A @ B with A (M, K) and B (K, N) float16, row-major and
// C-contiguous, products accumulated in float32; C (M, N) is float32 (wmma_gemm_f16_f32) or
// rounded once to float16 (wmma_gemm_f16_f16).
//
// Block: 4 warps (128 threads) computing a 64x64 tile of C, each warp a 32x32 quarter as 2x2
// fragments of 16x16.  K advances 32 at a time through shared-memory tiles of A (64x32) and
// B (32x64).  Loads are guarded, filling zeros past the matrix edges, so M, N and K need not be
// multiples of 16; they move 16 bytes at a time where a whole 8-element run is inside the matrix
// and aligned (K, resp. N, a multiple of 8 and the base address 16-byte aligned), one element at
// a time otherwise.  The accumulators go through shared memory to guarded, coalesced stores.
// Shared rows are padded (by 8 halves / 4 floats) against bank conflicts while keeping every
// fragment address 32-byte aligned, as wmma::load_matrix_sync requires.
#include "common.cuh"
#include <mma.h>

using namespace nvcuda;

#define BM 64
#define BN 64
#define BK 32
#define LDA (BK + 8)
#define LDB (BN + 8)
#define LDC (BN + 4)
#define THREADS 128

template <typename TC>
__device__ __forceinline__ void wmma_impl(const __half* __restrict__ A,
                                          const __half* __restrict__ B, TC* __restrict__ C,
                                          u32 M, u32 N, u32 K) {
    __shared__ __align__(32) __half As[BM * LDA];
    __shared__ __align__(32) __half Bs[BK * LDB];
    __shared__ __align__(32) float Cs[BM * LDC];
    const u32 tid = threadIdx.x;
    const u32 warp = tid >> 5;
    const u32 wm = warp >> 1, wn = warp & 1;  // this warp's 32x32 quarter of the tile
    const bool a_vec = (K % 8 == 0) && (((unsigned long long)A & 15) == 0);
    const bool b_vec = (N % 8 == 0) && (((unsigned long long)B & 15) == 0);
    const __half zero = __float2half(0.0f);
    const u64 n0 = (u64)blockIdx.x * BN;

    for (u64 m0 = (u64)blockIdx.y * BM; m0 < M; m0 += (u64)gridDim.y * BM) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

        for (u32 k0 = 0; k0 < K; k0 += BK) {
            // A tile, 64 rows x 4 runs of 8: two runs per thread.
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const u32 run = tid + i * THREADS;
                const u32 r = run >> 2, kc = (run & 3) * 8;
                const u64 gr = m0 + r;
                const u32 gk = k0 + kc;
                __half* dst = As + r * LDA + kc;
                if (a_vec && gr < M && gk + 8 <= K) {
                    *reinterpret_cast<uint4*>(dst) =
                        *reinterpret_cast<const uint4*>(A + gr * K + gk);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        dst[e] = (gr < M && gk + e < K) ? A[gr * K + gk + e] : zero;
                }
            }
            // B tile, 32 rows x 8 runs of 8: two runs per thread.
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const u32 run = tid + i * THREADS;
                const u32 r = run >> 3, nc = (run & 7) * 8;
                const u32 gk = k0 + r;
                const u64 gn = n0 + nc;
                __half* dst = Bs + r * LDB + nc;
                if (b_vec && gk < K && gn + 8 <= N) {
                    *reinterpret_cast<uint4*>(dst) =
                        *reinterpret_cast<const uint4*>(B + (u64)gk * N + gn);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        dst[e] = (gk < K && gn + e < N) ? B[(u64)gk * N + gn + e] : zero;
                }
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * LDA + kk, LDA);
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    wmma::load_matrix_sync(b[j], Bs + kk * LDB + wn * 32 + j * 16, LDB);
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
            }
            __syncthreads();  // the tiles are refilled by the next step
        }

#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16,
                                        acc[i][j], LDC, wmma::mem_row_major);
        __syncthreads();
        for (u32 t = tid; t < BM * BN; t += THREADS) {
            const u32 r = t / BN, c = t % BN;
            const u64 gr = m0 + r, gn = n0 + c;
            if (gr < M && gn < N) C[gr * N + gn] = from_acc<TC>(Cs[r * LDC + c]);
        }
        __syncthreads();  // Cs is rewritten by the next row of tiles
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
wmma_gemm_f16_f32(const __half* A, const __half* B, float* C, u32 M, u32 N, u32 K) {
    wmma_impl<float>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(THREADS)
wmma_gemm_f16_f16(const __half* A, const __half* B, __half* C, u32 M, u32 N, u32 K) {
    wmma_impl<__half>(A, B, C, M, N, K);
}
