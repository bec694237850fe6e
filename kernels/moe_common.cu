// moe_common.cu - the config-independent kernels of the fused-MoE layer, compiled once
// per device by NVRTC: token alignment, the top-k sum, input generation and the plain
// reference layer used to verify every config.

typedef unsigned short bf16_t;
typedef unsigned int u32;

__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ bf16_t f2bf(float f) {
    bf16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    return h;
}

// Aligns tokens to experts in block_m blocks, in one thread block (dynamic shared memory
// of 2*(E+1) ints). topk_ids[numel] -> sorted_ids (slot indices grouped by expert, each
// expert padded to a multiple of block_m with the sentinel numel), expert_ids per block,
// *n_post_pad = padded total. Grid-independent: the GEMMs are launched for the worst case
// and their blocks past *n_post_pad exit.
extern "C" __global__ void moe_align(const int *topk_ids, int numel, int num_experts, int block_m,
                                     int *sorted_ids, int *expert_ids, int *n_post_pad) {
    extern __shared__ int sh[];
    int *cnt = sh;                       // [E], later the scatter cursor
    int *off = sh + num_experts;         // [E+1]
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int e = tid; e < num_experts; e += nt) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < numel; i += nt) {
        int e = topk_ids[i];
        if (e >= 0 && e < num_experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int acc = 0;
        off[0] = 0;
        for (int e = 0; e < num_experts; e++) {
            acc += (cnt[e] + block_m - 1) / block_m * block_m;
            off[e + 1] = acc;
        }
        *n_post_pad = acc;
    }
    __syncthreads();
    const int total = off[num_experts];
    for (int i = tid; i < total; i += nt) sorted_ids[i] = numel;
    for (int e = tid; e < num_experts; e += nt) {
        for (int b = off[e] / block_m; b < off[e + 1] / block_m; b++) expert_ids[b] = e;
        cnt[e] = off[e];
    }
    __syncthreads();
    for (int i = tid; i < numel; i += nt) {
        int e = topk_ids[i];
        if (e < 0 || e >= num_experts) continue;
        int pos = atomicAdd(&cnt[e], 1);
        sorted_ids[pos] = i;
    }
}

// out[m][k] = sum over the topk slots of slots[m*topk + j][k], 8 columns per thread.
extern "C" __global__ void moe_topk_sum(const bf16_t *slots, bf16_t *out, int m, int k, int topk) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int kv = k / 8;
    if (idx >= (long long)m * kv) return;
    const int row = (int)(idx / kv), c8 = (int)(idx % kv);
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < topk; j++) {
        uint4 v = *(const uint4 *)(slots + ((size_t)row * topk + j) * k + c8 * 8);
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            s[2 * q] += __uint_as_float(w[q] << 16);
            s[2 * q + 1] += __uint_as_float(w[q] & 0xffff0000u);
        }
    }
    u32 o[4];
#pragma unroll
    for (int q = 0; q < 4; q++) o[q] = (u32)f2bf(s[2 * q]) | ((u32)f2bf(s[2 * q + 1]) << 16);
    *(uint4 *)(out + (size_t)row * k + c8 * 8) = make_uint4(o[0], o[1], o[2], o[3]);
}

__device__ __forceinline__ u32 mix32(unsigned long long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (u32)x;
}

// Fills p[0..n) with bf16 uniform values in [-scale, scale), a pure function of (seed, i).
extern "C" __global__ void moe_fill_bf16(bf16_t *p, unsigned long long n, unsigned long long seed, float scale) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float u = (mix32(seed * 0x9e3779b97f4a7c15ULL + i) >> 8) * (1.0f / 16777216.0f);
        p[i] = f2bf((2.f * u - 1.f) * scale);
    }
}

// Fills p[0..n) with 0xffff (a bf16 NaN), so an unwritten output cannot pass the check.
extern "C" __global__ void moe_poison(bf16_t *p, unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = 0xffff;
}

// Holds the stream until the host has queued the launches behind it (it writes want to *go, a
// word of host memory the GPU reads), or for ns nanoseconds at most: a timed single layer then
// measures the GPU's work, not the host's launch gaps, and the GPU waits no longer than the
// host's launching takes. At most 2^20 reads of the timer, should it not advance.
extern "C" __global__ void moe_spin(unsigned long long ns, const volatile unsigned *go, unsigned want) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned i = 0; i < (1u << 20); i++) {
        if (*go == want) break;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= ns) break;
    }
}

#define RT 16

// Reference GEMM1: for slot s (token s/topk, expert topk_ids[s]) and column c < N:
// h[s][c] = silu(x.w1[e][c]) * (x.w1[e][N+c]), fp32 throughout. Block RT x RT: the
// activation rows are shared through shared memory, each thread streams its own
// expert's gate and up rows.
extern "C" __global__ void ref_gemm1(const bf16_t *x, const bf16_t *w1, const int *topk_ids, float *h, int numel,
                                     int topk, int n, int k) {
    __shared__ float sa[RT][RT + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int s = blockIdx.y * RT + ty, c = blockIdx.x * RT + tx;
    const bool ok = s < numel && c < n;
    const int e = ok ? topk_ids[s] : 0;
    const bf16_t *xr = x + (size_t)((s < numel ? s : 0) / topk) * k;
    const bf16_t *wg = w1 + ((size_t)e * 2 * n + (c < n ? c : 0)) * k;
    const bf16_t *wu = wg + (size_t)n * k;
    float g = 0.f, u = 0.f;
    for (int k0 = 0; k0 < k; k0 += RT) {
        sa[ty][tx] = k0 + tx < k ? bf2f(xr[k0 + tx]) : 0.f;
        __syncthreads();
        for (int q = 0; q < RT && k0 + q < k; q++) {
            float xv = sa[ty][q];
            g += xv * bf2f(wg[k0 + q]);
            u += xv * bf2f(wu[k0 + q]);
        }
        __syncthreads();
    }
    if (ok) h[(size_t)s * n + c] = g / (1.f + expf(-g)) * u;
}

// Reference GEMM2 + weight + top-k sum: out[m][c] = sum_j w[m*topk+j] * h[m*topk+j].w2[e][c].
extern "C" __global__ void ref_gemm2(const float *h, const bf16_t *w2, const int *topk_ids, const float *route_w,
                                     float *out, int m, int topk, int n, int k) {
    const int row = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || c >= k) return;
    float acc = 0.f;
    for (int j = 0; j < topk; j++) {
        const int s = row * topk + j;
        const int e = topk_ids[s];
        const float *hr = h + (size_t)s * n;
        const bf16_t *wr = w2 + ((size_t)e * k + c) * n;
        float d = 0.f;
        for (int q = 0; q < n; q++) d += hr[q] * bf2f(wr[q]);
        acc += route_w[s] * d;
    }
    out[(size_t)row * k + c] = acc;
}
