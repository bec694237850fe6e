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

// The reference layer, fp32 throughout, as three plain tiled GEMM steps over slots grouped
// by expert (the host lists each expert's slots, padded with -1 to a multiple of RT_ROWS, and
// each tile's expert): gemm1 h[s][c] = silu(x.w1[e][c]) * (x.w1[e][N+c]), gemm2
// y[s][c] = h[s].w2[e][c], and the routing-weighted top-k sum. A tile of RT_ROWS slots shares
// one expert's weight rows through shared memory; each thread of the 16 x 16 block sums a
// 2 x 2 patch of the tile. Summation order is fixed: the reference is the same every run.
#define RT_ROWS 32 // worker/backend_cuda.h WCU_REF_ROWS
#define RT_K 16

__device__ __forceinline__ float ref_ld(const bf16_t *p) { return bf2f(*p); }
__device__ __forceinline__ float ref_ld(const float *p) { return *p; }

// out[s][c] (c < n_out) = a[s / a_div] . w[e * w_rows + c] (and with GATED the up row
// w[e * w_rows + n_out + c]: silu(gate) * up), rows of kdim elements.
template <typename TA, bool GATED>
__device__ __forceinline__ void ref_tile(const TA *a, int a_div, const bf16_t *w, int w_rows, const int *rows,
                                         const int *tile_e, float *out, int n_out, int kdim) {
    __shared__ float sa[RT_ROWS][RT_K + 1], sg[RT_ROWS][RT_K + 1], su[GATED ? RT_ROWS : 1][RT_K + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tile = blockIdx.y, c0 = blockIdx.x * RT_ROWS;
    const int e = tile_e[tile];
    int slot[2];
    for (int i = 0; i < 2; i++) slot[i] = rows[tile * RT_ROWS + ty + 16 * i];
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}}, up[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (int k0 = 0; k0 < kdim; k0 += RT_K) {
        const int q = k0 + tx;
        for (int i = 0; i < 2; i++) {
            const int r = ty + 16 * i, c = c0 + r;
            sa[r][tx] = slot[i] >= 0 && q < kdim ? ref_ld(a + (size_t)(slot[i] / a_div) * kdim + q) : 0.f;
            const bool wok = c < n_out && q < kdim;
            sg[r][tx] = wok ? bf2f(w[((size_t)e * w_rows + c) * kdim + q]) : 0.f;
            if (GATED) su[r][tx] = wok ? bf2f(w[((size_t)e * w_rows + n_out + c) * kdim + q]) : 0.f;
        }
        __syncthreads();
        for (int j = 0; j < RT_K; j++)
            for (int i = 0; i < 2; i++) {
                const float av = sa[ty + 16 * i][j];
                for (int l = 0; l < 2; l++) {
                    acc[i][l] += av * sg[tx + 16 * l][j];
                    if (GATED) up[i][l] += av * su[tx + 16 * l][j];
                }
            }
        __syncthreads();
    }
    for (int i = 0; i < 2; i++)
        for (int l = 0; l < 2; l++) {
            const int c = c0 + tx + 16 * l;
            if (slot[i] < 0 || c >= n_out) continue;
            const float g = acc[i][l];
            out[(size_t)slot[i] * n_out + c] = GATED ? g / (1.f + expf(-g)) * up[i][l] : g;
        }
}

// Grid (ceil(N / RT_ROWS), tiles), block 16 x 16: h[s][c] for the tiles' slots.
extern "C" __global__ void ref_gemm1(const bf16_t *x, const bf16_t *w1, const int *rows, const int *tile_e, float *h,
                                     int topk, int n, int k) {
    ref_tile<bf16_t, true>(x, topk, w1, 2 * n, rows, tile_e, h, n, k);
}

// Grid (ceil(K / RT_ROWS), tiles), block 16 x 16: y[s][c] = h[s].w2[e][c].
extern "C" __global__ void ref_gemm2(const float *h, const bf16_t *w2, const int *rows, const int *tile_e, float *y,
                                     int n, int k) {
    ref_tile<float, false>(h, 1, w2, k, rows, tile_e, y, k, n);
}

// out[m][c] = sum over j < topk, in order, of route_w[m*topk+j] * y[m*topk+j][c].
extern "C" __global__ void ref_topk_sum(const float *y, const float *route_w, float *out, int m, int topk, int k) {
    const int row = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || c >= k) return;
    float acc = 0.f;
    for (int j = 0; j < topk; j++) acc += route_w[row * topk + j] * y[((size_t)row * topk + j) * k + c];
    out[(size_t)row * k + c] = acc;
}

// The check: per block, the sums of (o - ref)^2 and ref^2 over its share of n elements, into
// part[2 * block] and part[2 * block + 1] (the host adds the blocks' parts). A poisoned
// (unwritten) element is a NaN and makes the sum one. Block of REF_DIFF_THREADS threads.
#define REF_DIFF_THREADS 256
extern "C" __global__ void ref_diff(const bf16_t *o, const float *ref, unsigned long long n, double *part) {
    __shared__ double sn[REF_DIFF_THREADS], sd[REF_DIFF_THREADS];
    double num = 0, den = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const double r = ref[i], d = (double)bf2f(o[i]) - r;
        num += d * d;
        den += r * r;
    }
    sn[threadIdx.x] = num;
    sd[threadIdx.x] = den;
    __syncthreads();
    for (int h = REF_DIFF_THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) {
            sn[threadIdx.x] += sn[threadIdx.x + h];
            sd[threadIdx.x] += sd[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = sn[0];
        part[2 * blockIdx.x + 1] = sd[0];
    }
}
