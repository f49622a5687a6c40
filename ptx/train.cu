// Training kernels: softmax cross-entropy (per-row loss, its mean reduced on the device, the
// fused gradient (softmax - onehot) * scale / count), the argmax-equals-label count, SGD with
// momentum, AdamW with the step count and learning rate readable from device memory, the
// embedding gather and its scatter-add backward, global average pooling and its backward.
//
// Conventions (see README.md): extern "C", 64-bit sizes, float accumulation (double in the
// single-block reduction of the loss), 16-bit values widened on load and rounded once on store.
// Row kernels take one block per row, looping when there are more rows than blocks, with
// blockDim.x a multiple of 32; optimizer and elementwise kernels are grid-stride loops.
// Labels and ids are int32 or int64 (suffix i32 / i64); an ignore index travels as 64 bits
// beside a flag, so any value (the usual -100 included) can be ignored.
//
// Nothing here reads device values back to the host and no kernel depends on a host value that
// changes between steps unless it is passed by pointer (learning rate, step count): a CUDA
// graph captured once replays a whole training step.
#include "common.cuh"

typedef long long i64;

// A quiet NaN: what a row with an out-of-range label or id gets, so that a bad index shows in
// the loss instead of reading out of bounds (the kernels cannot raise).
__device__ __forceinline__ float qnan() { return __int_as_float(0x7fc00000); }

// -- block reductions --------------------------------------------------------------------------
struct SumOp {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename V, typename Op>
__device__ __forceinline__ V warp_all(V v, Op op) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// The reduction of v over the block, returned to every thread.  sh holds 33 values: one partial
// per warp, then the result.  One buffer serves consecutive reductions: warp 0 writes the next
// result only after the next reduction's first barrier, which every thread reaches after
// reading this one.
template <typename V, typename Op>
__device__ __forceinline__ V block_all(V v, V* sh, Op op, V identity) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_all(v, op);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? sh[lane] : identity;
        v = warp_all(v, op);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

// The row's maximum and sum(exp(x - max)) over the block.
template <typename T>
__device__ __forceinline__ void row_max_sum(const T* xr, u64 cols, float* sh, float& m,
                                            float& s) {
    m = neg_inf();
    for (u64 j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, to_acc(xr[j]));
    m = block_all(m, sh, MaxOp(), neg_inf());
    s = 0.0f;
    for (u64 j = threadIdx.x; j < cols; j += blockDim.x) s += expf(to_acc(xr[j]) - m);
    s = block_all(s, sh, SumOp(), 0.0f);
}

__device__ __forceinline__ bool ignored(i64 label, i64 ignore, int has_ignore) {
    return has_ignore && label == ignore;
}

// -- softmax cross-entropy ---------------------------------------------------------------------
// row_loss[r] = log(sum_j exp(x[r, j])) - x[r, label[r]]; 0 for an ignored row; NaN when the
// label is outside [0, cols).
template <typename T, typename L>
__device__ __forceinline__ void ce_forward_impl(const T* logits, const L* labels,
                                                float* row_loss, u64 rows, u64 cols,
                                                i64 ignore, int has_ignore) {
    __shared__ float sh[33];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 label = (i64)labels[row];
        if (ignored(label, ignore, has_ignore)) {   // the same branch for the whole block
            if (threadIdx.x == 0) row_loss[row] = 0.0f;
            continue;
        }
        const T* xr = logits + row * cols;
        float m, s;
        row_max_sum(xr, cols, sh, m, s);
        if (threadIdx.x == 0)
            row_loss[row] = (label < 0 || label >= (i64)cols)
                                ? qnan() : logf(s) + m - to_acc(xr[label]);
    }
}

// One block: loss[0] = sum(row_loss) / count (mean) or sum(row_loss) (sum), count[0] = the
// number of rows not ignored.  Summed in double in a fixed order, so the result does not
// depend on timing and the count is exact.  A mean over no rows is 0/0 = NaN (as in PyTorch).
template <typename L>
__device__ __forceinline__ void ce_reduce_impl(const float* row_loss, const L* labels,
                                               float* loss, float* count, u64 rows, i64 ignore,
                                               int has_ignore, int mean) {
    __shared__ double sh[33];
    double s = 0.0, c = 0.0;
    for (u64 r = threadIdx.x; r < rows; r += blockDim.x) {
        s += (double)row_loss[r];
        c += ignored((i64)labels[r], ignore, has_ignore) ? 0.0 : 1.0;
    }
    s = block_all(s, sh, SumOp(), 0.0);
    c = block_all(c, sh, SumOp(), 0.0);
    if (threadIdx.x == 0) {
        loss[0] = (float)(mean ? s / c : s);
        count[0] = (float)c;
    }
}

// dx[r, j] = (softmax(x[r])_j - (j == label[r])) * factor, factor = scale / count[0] (scale
// alone when count is null); zeros for an ignored row, NaN for an out-of-range label.  dx may
// be logits itself: a row is read entirely (two reductions) before any thread writes it, and
// each thread then rewrites only the elements it reads.
template <typename T, typename L>
__device__ __forceinline__ void ce_backward_impl(const T* logits, const L* labels,
                                                 const float* count, float scale, T* dx,
                                                 u64 rows, u64 cols, i64 ignore,
                                                 int has_ignore) {
    __shared__ float sh[33];
    const float factor = count ? scale / count[0] : scale;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 label = (i64)labels[row];
        const T* xr = logits + row * cols;
        T* dr = dx + row * cols;
        if (ignored(label, ignore, has_ignore)) {
            for (u64 j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = from_acc<T>(0.0f);
            continue;
        }
        float m, s;
        row_max_sum(xr, cols, sh, m, s);
        const bool bad = label < 0 || label >= (i64)cols;
        const float inv = 1.0f / s;
        for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
            const float p = expf(to_acc(xr[j]) - m) * inv;
            const float g = ((i64)j == label ? p - 1.0f : p) * factor;
            dr[j] = from_acc<T>(bad ? qnan() : g);
        }
    }
}

// -- argmax == label ---------------------------------------------------------------------------
// Whether (a, ia) comes before (b, ib) in an argmax: NaN beats any number (numpy and PyTorch
// return a NaN's index), then the larger value, then the lower index.
__device__ __forceinline__ bool wins(float a, u64 ia, float b, u64 ib) {
    const bool an = a != a, bn = b != b;
    if (an != bn) return an;
    if (!an && a != b) return a > b;
    return ia < ib;
}

__device__ __forceinline__ void warp_argmax(float& v, u64& i) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, off);
        const u64 oi = __shfl_xor_sync(0xffffffffu, i, off);
        if (wins(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

// The index of the first maximum of the row (cols when the row is empty).
template <typename T>
__device__ __forceinline__ u64 block_argmax(const T* xr, u64 cols, float* shv, u64* shi) {
    float v = neg_inf();
    u64 i = ~0ull;
    for (u64 j = threadIdx.x; j < cols; j += blockDim.x) {
        const float x = to_acc(xr[j]);
        if (wins(x, j, v, i)) { v = x; i = j; }
    }
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    warp_argmax(v, i);
    if (lane == 0) { shv[warp] = v; shi[warp] = i; }
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? shv[lane] : neg_inf();
        i = lane < nwarps ? shi[lane] : ~0ull;
        warp_argmax(v, i);
        if (lane == 0) shi[32] = i;
    }
    __syncthreads();
    return shi[32];
}

// correct[0] += the number of rows, not ignored, whose first argmax is their label.
template <typename T, typename L>
__device__ __forceinline__ void accuracy_impl(const T* logits, const L* labels,
                                              unsigned long long* correct, u64 rows, u64 cols,
                                              i64 ignore, int has_ignore) {
    __shared__ float shv[33];
    __shared__ u64 shi[33];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const i64 label = (i64)labels[row];
        if (ignored(label, ignore, has_ignore)) continue;
        const u64 best = block_argmax(logits + row * cols, cols, shv, shi);
        if (threadIdx.x == 0 && label >= 0 && (u64)label == best) atomicAdd(correct, 1ull);
    }
}

// -- optimizers --------------------------------------------------------------------------------
// SGD with momentum and L2 weight decay, PyTorch's rule with dampening 0 and nesterov off:
//   d = grad + wd * p;  buf = momentum * buf + d;  p -= lr * buf
// (buf null: p -= lr * d).  A zero-filled buffer makes the first step buf = d, as PyTorch's
// lazily created one does.  lr is read from lr_ptr when it is not null.
template <typename G>
__device__ __forceinline__ void sgd_impl(float* p, const G* grad, float* buf, u64 n, float lr,
                                         const float* lr_ptr, float momentum, float wd) {
    const float rate = lr_ptr ? *lr_ptr : lr;
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const float w = p[i];
        float d = to_acc(grad[i]) + wd * w;
        if (buf) {
            d = momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] = w - rate * d;
    }
}

// AdamW (decoupled weight decay), PyTorch's rule for step t >= 1:
//   p *= 1 - lr * wd;  m += (1 - b1) (g - m);  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// t is read from step_ptr when it is not null and lr from lr_ptr likewise, so a captured graph
// that increments the counter (step_increment_i32) before the update replays step after step.
// The bias corrections are computed once per thread in double.  copy (16-bit, may be null)
// receives the updated weights rounded, for a low-precision forward.
template <typename G, typename C>
__device__ __forceinline__ void adamw_impl(float* p, const G* grad, float* m, float* v, C* copy,
                                           u64 n, float lr, const float* lr_ptr, float beta1,
                                           float beta2, float eps, float wd, int step,
                                           const int* step_ptr) {
    const float rate = lr_ptr ? *lr_ptr : lr;
    const double t = (double)(step_ptr ? *step_ptr : step);
    const double bc1 = 1.0 - pow((double)beta1, t);
    const double bc2 = 1.0 - pow((double)beta2, t);
    const float step_size = (float)((double)rate / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay = 1.0f - rate * wd;
    const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
    for (u64 i = global_thread(); i < n; i += grid_threads()) {
        const float g = to_acc(grad[i]);
        const float mi = m[i] + one_b1 * (g - m[i]);
        const float vi = beta2 * v[i] + one_b2 * (g * g);
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        const float w = p[i] * decay - step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        p[i] = w;
        if (copy) copy[i] = from_acc<C>(w);
    }
}

// -- embedding ---------------------------------------------------------------------------------
// out[r, :] = weight[ids[r], :]; a row of NaN for an id outside [0, vocab).
template <typename T, typename L>
__device__ __forceinline__ void embedding_impl(const T* weight, const L* ids, T* out, u64 n,
                                               u64 dim, u64 vocab) {
    for (u64 r = blockIdx.x; r < n; r += gridDim.x) {
        const i64 id = (i64)ids[r];
        T* o = out + r * dim;
        if (id < 0 || (u64)id >= vocab) {
            for (u64 j = threadIdx.x; j < dim; j += blockDim.x) o[j] = from_acc<T>(qnan());
            continue;
        }
        const T* src = weight + (u64)id * dim;
        for (u64 j = threadIdx.x; j < dim; j += blockDim.x) o[j] = src[j];
    }
}

// dweight[ids[r], :] += dy[r, :] in float32 (atomicAdd: rows sharing an id add up; the order,
// hence the last bits, may vary from run to run).  Out-of-range ids are skipped.
template <typename T, typename L>
__device__ __forceinline__ void embedding_backward_impl(const T* dy, const L* ids, float* dw,
                                                        u64 n, u64 dim, u64 vocab) {
    for (u64 r = blockIdx.x; r < n; r += gridDim.x) {
        const i64 id = (i64)ids[r];
        if (id < 0 || (u64)id >= vocab) continue;
        const T* src = dy + r * dim;
        float* dst = dw + (u64)id * dim;
        for (u64 j = threadIdx.x; j < dim; j += blockDim.x) atomicAdd(dst + j, to_acc(src[j]));
    }
}

// -- global average pooling --------------------------------------------------------------------
// y[r] = mean(x[r, 0:inner]) for the rows = N * C planes of channels-first data: one warp per
// plane (planes are short in the networks that pool globally), looping over planes.
template <typename T>
__device__ __forceinline__ void gap_impl(const T* x, T* y, u64 rows, u64 inner) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = blockDim.x >> 5;
    const u64 first = (u64)blockIdx.x * warps + (threadIdx.x >> 5);
    for (u64 r = first; r < rows; r += (u64)gridDim.x * warps) {
        const T* xr = x + r * inner;
        float s = 0.0f;
        for (u64 j = lane; j < inner; j += 32) s += to_acc(xr[j]);
        s = warp_all(s, SumOp());
        if (lane == 0) y[r] = from_acc<T>(s / (float)inner);
    }
}

// dx[i] = dy[i / inner] / inner: the gradient of the mean, spread over its plane.
template <typename T>
__device__ __forceinline__ void gap_backward_impl(const T* dy, T* dx, u64 n, u64 inner) {
    const float scale = (float)inner;
    for (u64 i = global_thread(); i < n; i += grid_threads())
        dx[i] = from_acc<T>(to_acc(dy[i / inner]) / scale);
}

// -- entry points ------------------------------------------------------------------------------
#define BY_LABEL(SUF, T, LS, L)                                                                  \
    extern "C" __global__ void cross_entropy_forward_##SUF##_##LS(                               \
        const T* logits, const L* labels, float* row_loss, u64 rows, u64 cols, i64 ignore,       \
        int has_ignore) {                                                                        \
        ce_forward_impl<T, L>(logits, labels, row_loss, rows, cols, ignore, has_ignore);         \
    }                                                                                            \
    extern "C" __global__ void cross_entropy_backward_##SUF##_##LS(                              \
        const T* logits, const L* labels, const float* count, float scale, T* dx, u64 rows,     \
        u64 cols, i64 ignore, int has_ignore) {                                                  \
        ce_backward_impl<T, L>(logits, labels, count, scale, dx, rows, cols, ignore,             \
                               has_ignore);                                                      \
    }                                                                                            \
    extern "C" __global__ void accuracy_count_##SUF##_##LS(                                      \
        const T* logits, const L* labels, unsigned long long* correct, u64 rows, u64 cols,       \
        i64 ignore, int has_ignore) {                                                            \
        accuracy_impl<T, L>(logits, labels, correct, rows, cols, ignore, has_ignore);            \
    }                                                                                            \
    extern "C" __global__ void embedding_##SUF##_##LS(const T* weight, const L* ids, T* out,    \
                                                      u64 n, u64 dim, u64 vocab) {               \
        embedding_impl<T, L>(weight, ids, out, n, dim, vocab);                                   \
    }                                                                                            \
    extern "C" __global__ void embedding_backward_##SUF##_##LS(                                  \
        const T* dy, const L* ids, float* dweight, u64 n, u64 dim, u64 vocab) {                  \
        embedding_backward_impl<T, L>(dy, ids, dweight, n, dim, vocab);                          \
    }

#define BY_TYPE(SUF, T)                                                                          \
    BY_LABEL(SUF, T, i32, int)                                                                   \
    BY_LABEL(SUF, T, i64, i64)                                                                   \
    extern "C" __global__ void sgd_##SUF(float* param, const T* grad, float* buf, u64 n,         \
                                         float lr, const float* lr_ptr, float momentum,          \
                                         float weight_decay) {                                   \
        sgd_impl<T>(param, grad, buf, n, lr, lr_ptr, momentum, weight_decay);                    \
    }                                                                                            \
    extern "C" __global__ void adamw_##SUF##_f16(                                                \
        float* param, const T* grad, float* m, float* v, __half* copy, u64 n, float lr,         \
        const float* lr_ptr, float beta1, float beta2, float eps, float weight_decay, int step,  \
        const int* step_ptr) {                                                                   \
        adamw_impl<T, __half>(param, grad, m, v, copy, n, lr, lr_ptr, beta1, beta2, eps,         \
                              weight_decay, step, step_ptr);                                     \
    }                                                                                            \
    extern "C" __global__ void adamw_##SUF##_bf16(                                               \
        float* param, const T* grad, float* m, float* v, __nv_bfloat16* copy, u64 n, float lr,  \
        const float* lr_ptr, float beta1, float beta2, float eps, float weight_decay, int step,  \
        const int* step_ptr) {                                                                   \
        adamw_impl<T, __nv_bfloat16>(param, grad, m, v, copy, n, lr, lr_ptr, beta1, beta2, eps,  \
                                     weight_decay, step, step_ptr);                              \
    }                                                                                            \
    extern "C" __global__ void global_avg_pool_##SUF(const T* x, T* y, u64 rows, u64 inner) {   \
        gap_impl<T>(x, y, rows, inner);                                                          \
    }                                                                                            \
    extern "C" __global__ void global_avg_pool_backward_##SUF(const T* dy, T* dx, u64 n,        \
                                                              u64 inner) {                       \
        gap_backward_impl<T>(dy, dx, n, inner);                                                  \
    }

BY_TYPE(f32, float)
BY_TYPE(f16, __half)
BY_TYPE(bf16, __nv_bfloat16)

#define CE_REDUCE(LS, L)                                                                         \
    extern "C" __global__ void cross_entropy_reduce_##LS(                                        \
        const float* row_loss, const L* labels, float* loss, float* count, u64 rows, i64 ignore, \
        int has_ignore, int mean) {                                                              \
        ce_reduce_impl<L>(row_loss, labels, loss, count, rows, ignore, has_ignore, mean);        \
    }

CE_REDUCE(i32, int)
CE_REDUCE(i64, i64)

// counter[0] += by: the step count of AdamW, advanced on the device once per training step.
extern "C" __global__ void step_increment_i32(int* counter, int by) {
    if (blockIdx.x == 0 && threadIdx.x == 0) counter[0] += by;
}
