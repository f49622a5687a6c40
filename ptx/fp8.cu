// fp8 training helpers: the absolute maximum of a tensor (amax), scaled quantization to the two
// fp8 formats with saturation (optionally recording amax in the same pass), dequantization, and
// the delayed-scaling update of Transformer Engine (amax history, scale, scale_inv).
//
// Formats (the OCP fp8 formats, as ml_dtypes and PyTorch name them): e4m3 is float8_e4m3fn
// (bias 7, no infinities, NaN only S.1111.111, largest finite 448); e5m2 is float8_e5m2 (bias 15,
// IEEE-like: infinities and NaNs in the all-ones exponent, largest finite 57344).  Suffixes:
// the fp8 format, then the wide type (f32, f16, bf16).
//
// The conversions are integer operations on the float32 bits, not the cvt.*.e4m3x2 instructions
// of sm_89, so the file builds for compute_75 like the rest of the library and one PTX serves
// every GPU (fp8 storage is useful before fp8 tensor cores, and the tests run anywhere).  These
// kernels move 3 to 6 bytes per element: a dozen integer instructions do not show.
//
// Nothing here reads a device value on the host, and everything that changes from one training
// step to the next -- scale, scale_inv, amax, the history -- is passed by pointer, so a CUDA graph
// captured once quantizes with the scale the last update wrote, replay after replay.
#include "common.cuh"

typedef unsigned char u8;

// The bits of a value as another type of the same size (the float32 bits of a float, and back).
// A union, not __float_as_uint: the CPU tests compile these conversions for the host too and
// compare them with ml_dtypes on every input they can enumerate.
template <typename To, typename From>
__host__ __device__ __forceinline__ To bit_cast(From x) {
    union { From from; To to; } c;
    c.from = x;
    return c.to;
}

// -- the two formats ---------------------------------------------------------------------------
struct E4M3 {
    static constexpr int MAN = 3, BIAS = 7;
    static constexpr bool HAS_INF = false;
    static constexpr u32 MAX_BITS = 0x7eu;       // 448 = 1.75 * 2^8
    static constexpr u32 NAN_BITS = 0x7fu;       // the only NaN (with either sign)
    static constexpr u32 MAX_F32 = 0x43e00000u;  // 448.0f
};
struct E5M2 {
    static constexpr int MAN = 2, BIAS = 15;
    static constexpr bool HAS_INF = true;
    static constexpr u32 MAX_BITS = 0x7bu;       // 57344 = 1.75 * 2^15
    static constexpr u32 NAN_BITS = 0x7eu;       // the quiet NaN ml_dtypes writes
    static constexpr u32 MAX_F32 = 0x47600000u;  // 57344.0f
};

// float32 -> fp8, rounded to nearest even, saturating: |v| >= the largest finite value
// (infinity included) gives that value with v's sign; NaN gives the format's NaN with v's sign.
// Bit for bit what ml_dtypes gives for clip(v, -max, max).astype(fp8) (its NaNs included).
template <typename F>
__host__ __device__ __forceinline__ u8 f32_to_fp8(float v) {
    const u32 u = bit_cast<u32>(v);
    const u32 sign = (u >> 24) & 0x80u;
    const u32 a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (u8)(sign | F::NAN_BITS);
    if (a >= F::MAX_F32) return (u8)(sign | F::MAX_BITS);
    const int e = (int)(a >> 23) - 127;           // unbiased exponent (-127 for float32 subnormals)
    if (e >= 1 - F::BIAS) {
        // A normal result: round the float32 bits at the fp8 mantissa's last place (a carry
        // moves into the exponent, as it should), then rebias the exponent.  Below MAX_F32 the
        // rounding cannot pass the largest finite value.
        const int shift = 23 - F::MAN;
        const u32 r = (a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u)) >> shift;
        return (u8)(sign | (r - ((u32)(127 - F::BIAS) << F::MAN)));
    }
    // A subnormal result (or the smallest normal, when it rounds up): the significand with its
    // implicit bit, in units of the smallest subnormal 2^(1 - BIAS - MAN).
    const int shift = (23 - F::MAN) + (1 - F::BIAS - e);
    // Beyond 24 the value is below half the smallest subnormal (at 24 exactly half is a tie,
    // rounded to the even 0 below); float32 subnormals land here too.
    if (shift > 24) return (u8)sign;
    const u32 m = (a & 0x7fffffu) | 0x800000u;
    const u32 r = (m + ((1u << (shift - 1)) - 1u) + ((m >> shift) & 1u)) >> shift;
    return (u8)(sign | r);
}

// fp8 -> float32, exact.  NaN gives the quiet float32 NaN with the code's sign.
template <typename F>
__host__ __device__ __forceinline__ float fp8_to_f32(u32 q) {
    const u32 sign = (q & 0x80u) << 24;
    const u32 a = q & 0x7fu;
    const u32 e = a >> F::MAN, m = a & ((1u << F::MAN) - 1u);
    u32 bits;
    if (F::HAS_INF ? e == (0x7fu >> F::MAN) : a == F::NAN_BITS) {
        bits = (F::HAS_INF && m == 0) ? 0x7f800000u : 0x7fc00000u;
    } else if (e == 0) {
        // m * 2^(1 - BIAS - MAN): a small integer times a power of two, exact in float32.
        bits = bit_cast<u32>((float)m * bit_cast<float>((u32)(128 - F::BIAS - F::MAN) << 23));
    } else {
        bits = ((e + 127u - (u32)F::BIAS) << 23) | (m << (23 - F::MAN));
    }
    return bit_cast<float>(sign | bits);
}

// -- amax --------------------------------------------------------------------------------------
// The bits of |v|.  For values without a sign bit, the order of the bits as unsigned integers is
// the order of the values, and every NaN is above +inf: an integer maximum of these bits is
// the maximum of |x| that propagates NaN (as torch.amax does), and atomicMax can combine blocks.
__device__ __forceinline__ u32 abs_bits(float v) { return bit_cast<u32>(v) & 0x7fffffffu; }

// *amax = max(*amax, m over the block), one atomic per block (none when the block saw only
// zeros, which cannot raise a non-negative maximum).  blockDim.x is a multiple of 32.
__device__ __forceinline__ void block_max_into(u32 m, u32* amax) {
    __shared__ u32 sh[32];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) sh[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sh[lane] : 0u;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0 && m) atomicMax(amax, m);
    }
}

template <typename T>
__device__ __forceinline__ void amax_impl(const T* x, u32* amax, u64 n) {
    u32 m = 0;
    for (u64 i = global_thread(); i < n; i += grid_threads()) m = max(m, abs_bits(to_acc(x[i])));
    block_max_into(m, amax);
}

// -- quantize / dequantize ---------------------------------------------------------------------
// out = fp8(x * scale[0]), the product in float32; a NaN x keeps its sign (the GPU's product of
// a NaN is the positive canonical NaN, whatever went in).  amax (may be null): max(*amax, |x|).
// The sign bit of x as stored: widening a 16-bit NaN gives the canonical (positive) NaN on the
// GPU, so the sign a NaN x keeps is read from its own bits.
__device__ __forceinline__ u32 sign_of(float x) { return __float_as_uint(x) >> 31; }
__device__ __forceinline__ u32 sign_of(__half x) { return __half_as_ushort(x) >> 15; }
__device__ __forceinline__ u32 sign_of(__nv_bfloat16 x) { return __bfloat16_as_ushort(x) >> 15; }

template <typename F, typename T>
__device__ __forceinline__ void quantize_impl(const T* x, const float* scale, u8* out, u32* amax,
                                              u64 n) {
    const float s = scale[0];
    u32 m = 0;
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const float v = to_acc(x[i]);
        m = max(m, abs_bits(v));
        out[i] = v != v ? (u8)((sign_of(x[i]) << 7) | F::NAN_BITS) : f32_to_fp8<F>(v * s);
    }
    if (amax) block_max_into(m, amax);   // amax is the same for the whole grid
}

// out = fp8_to_f32(q) * scale_inv[0] in float32, rounded once to T.
template <typename F, typename T>
__device__ __forceinline__ void dequantize_impl(const u8* q, const float* scale_inv, T* out,
                                                u64 n) {
    const float s = scale_inv[0];
    for (u64 i = global_thread(); i < n; i += grid_threads())
        out[i] = from_acc<T>(fp8_to_f32<F>(q[i]) * s);
}

// -- delayed scaling ---------------------------------------------------------------------------
// For each tensor j of the float32 history [len, n] (row 0 the newest):
//   hist[i, j] = hist[i - 1, j] for i = len-1 .. 1;  hist[0, j] = amax[j]
//   ref = max over the new hist[:, j] (most_recent: amax[j]), NaN-propagating
//   scale[j] = scaled_max / ref if 0 < ref < inf (FLT_MAX if that overflows), else unchanged
//   scale_inv[j] = 1 / scale[j]
// scaled_max = fp8_max * 2^-margin, rounded to float32 on the host.
//
// A block takes 32 tensors (threadIdx.x) and walks their history from the oldest row down in
// chunks of DSU_ROWS * DSU_UNROLL rows: every thread loads its rows of a chunk, the block
// synchronizes, then every thread stores them one row older.  A chunk's loads and the next
// chunk's stores share one row, and the barrier between them orders the two; a short history of
// one tensor thus costs a few chunks, not one dependent load per row.
#define DSU_COLS 32
#define DSU_ROWS 16
#define DSU_UNROLL 8
// The largest finite float32 (NVRTC has no <cfloat>).
#define FLT_MAX_F 3.402823466e38f

__device__ __forceinline__ float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

extern "C" __global__ void __launch_bounds__(DSU_COLS * DSU_ROWS)
delayed_scale_update_f32(float* hist, const float* amax, float* scale, float* scale_inv, u64 len,
                         u64 n, float scaled_max, int most_recent) {
    __shared__ float part[DSU_ROWS][DSU_COLS + 1];
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    const u64 chunk = DSU_ROWS * DSU_UNROLL;
    for (u64 j0 = (u64)blockIdx.x * DSU_COLS; j0 < n; j0 += (u64)gridDim.x * DSU_COLS) {
        const u64 j = j0 + tx;
        const bool live = j < n;
        float m = neg_inf();
        // dest rows top, top - 1, ..., down to 1; each thread's rows are top - (k*ROWS + ty)
        for (u64 top = len - 1; top >= 1; top -= chunk) {
            float v[DSU_UNROLL];
#pragma unroll
            for (int k = 0; k < DSU_UNROLL; ++k) {
                const u64 d = (u64)k * DSU_ROWS + ty;
                v[k] = (live && d < top) ? hist[(top - d - 1) * n + j] : neg_inf();
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < DSU_UNROLL; ++k) {
                const u64 d = (u64)k * DSU_ROWS + ty;
                if (live && d < top) {
                    hist[(top - d) * n + j] = v[k];
                    m = nan_max(m, v[k]);
                }
            }
            if (top <= chunk) break;   // row 1 was the last (and top - chunk would wrap)
        }
        part[ty][tx] = m;
        __syncthreads();
        if (ty == 0 && live) {
            const float a = amax[j];
            hist[j] = a;
            float ref = a;
            if (!most_recent)
                for (int r = 0; r < DSU_ROWS; ++r) ref = nan_max(ref, part[r][tx]);
            float s = scale[j];
            if (ref > 0.0f && ref <= FLT_MAX_F) {
                s = scaled_max / ref;
                if (s > FLT_MAX_F) s = FLT_MAX_F;   // ref so small that the quotient overflows
            }
            scale[j] = s;
            scale_inv[j] = 1.0f / s;
        }
        __syncthreads();   // part is written again by the next group of tensors
    }
}

// -- entry points ------------------------------------------------------------------------------
#define BY_WIDE(SUF, T)                                                                          \
    extern "C" __global__ void amax_##SUF(const T* x, u32* amax, u64 n) {                        \
        amax_impl<T>(x, amax, n);                                                                \
    }                                                                                            \
    BY_FORMAT(e4m3, E4M3, SUF, T)                                                                \
    BY_FORMAT(e5m2, E5M2, SUF, T)

#define BY_FORMAT(FS, F, SUF, T)                                                                 \
    extern "C" __global__ void quantize_##FS##_##SUF(const T* x, const float* scale, u8* out,   \
                                                     u32* amax, u64 n) {                         \
        quantize_impl<F, T>(x, scale, out, amax, n);                                             \
    }                                                                                            \
    extern "C" __global__ void dequantize_##FS##_##SUF(const u8* q, const float* scale_inv,     \
                                                       T* out, u64 n) {                          \
        dequantize_impl<F, T>(q, scale_inv, out, n);                                             \
    }

BY_WIDE(f32, float)
BY_WIDE(f16, __half)
BY_WIDE(bf16, __nv_bfloat16)
