// moe_gemm.cu - the fused-MoE grouped GEMMs, compiled by NVRTC once per config.
//
// Compile-time constants (-D): BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES, WARPS_M.
// GROUP_SIZE_M and every shape size are run-time arguments, so one image serves the
// four GROUP values of a config and every shape.
//
// moe_gemm1: rows of x (gathered through the sorted token ids) x w1[e] (2N x K) with the
//            SiLU(gate) * up epilogue -> inter [M*topk][N] bf16.
// moe_gemm2: rows of inter x w2[e] (K x N), times the routing weight -> slots [M*topk][K] bf16.
//
// Tiles are BLOCK_M x BLOCK_N, reduced over BLOCK_K steps through a NUM_STAGES-deep
// cp.async pipeline in shared memory, with bf16 mma.sync m16n8k16 (fp32 accumulation)
// fed by ldmatrix. For GEMM1 the B tile interleaves gate and up rows (row 2j = gate j,
// row 2j+1 = up j), so each thread's accumulator pair (c0, c1) is (gate, up) of one
// intermediate column and the epilogue needs no data exchange.

#ifndef BLOCK_M
#error "BLOCK_M must be defined"
#endif

#define THREADS (NUM_WARPS * 32)
#define WARPS_N (NUM_WARPS / WARPS_M)
#define WM (BLOCK_M / WARPS_M)
#define WN (BLOCK_N / WARPS_N)
#define MT (WM / 16)
#define NT (WN / 8)
#define KCH (BLOCK_K / 8)                       // 16-byte chunks per tile row
#define SWZ_CH (KCH < 8 ? KCH : 8)              // chunks taking part in the XOR swizzle
#define SWZ_R (8 / SWZ_CH)                      // rows sharing one swizzle value
#define A_ELEMS (BLOCK_M * BLOCK_K)
#define B_ELEMS (BLOCK_N * BLOCK_K)
#define STAGE_ELEMS (A_ELEMS + B_ELEMS)

static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tile must hold whole 16x8 MMA tiles");
static_assert(NUM_WARPS % WARPS_M == 0, "WARPS_M must divide NUM_WARPS");
static_assert(BLOCK_K % 16 == 0, "BLOCK_K must be a multiple of 16");

typedef unsigned short bf16_t;
typedef unsigned int u32;

// Byte offset of 16-byte chunk c of row r in a tile with KCH chunks per row; the XOR
// keeps the 8 row addresses of one ldmatrix (and of one cp.async wave) in distinct banks.
__device__ __forceinline__ u32 swz(u32 r, u32 c) {
    return (r * KCH + (c ^ ((r / SWZ_R) % SWZ_CH))) * 16u;
}

__device__ __forceinline__ void cp_async16(u32 dst, const void *src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(u32 addr, u32 &r0, u32 &r1, u32 &r2, u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32 &r0, u32 &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}

__device__ __forceinline__ void mma16816(float *c, const u32 *a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ bf16_t f2bf(float f) {
    bf16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ u32 pack_bf2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Fault, hang and wrong-result injection for the worker's tests: inject 1 writes through a
// null pointer, 2 spins until the process is killed, 3 scales GEMM2's routing weights by 1.05
// (a layer 5 % off, which the check must reject). The whole of block 0 spins: a warp left
// partly spinning would reach the barrier and the .aligned instructions diverged.
__device__ __forceinline__ void maybe_inject(int inject) {
    if (blockIdx.x != 0) return;
    if (inject == 1) {
        if (threadIdx.x == 0) *(volatile int *)(size_t)16 = 1;
    } else if (inject == 2) {
        // The sleep is a side effect the compiler must keep: a loop over a local flag
        // may be assumed to terminate and be folded away.
        for (;;) asm volatile("nanosleep.u32 1000;\n");
    }
}

// MODE 1: GEMM1 with SiLU-and-mul epilogue; MODE 2: GEMM2 with routing-weight epilogue.
template <int MODE>
__device__ __forceinline__ void moe_gemm(const bf16_t *__restrict__ a, const bf16_t *__restrict__ w,
                                         bf16_t *__restrict__ c, const float *__restrict__ route_w,
                                         const int *__restrict__ sorted_ids, const int *__restrict__ expert_ids,
                                         const int *__restrict__ n_post_pad, int em, int num_valid, int a_div,
                                         int n_out, int k_dim, int ld_c, int group_m, int inject) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int s_rows[BLOCK_M];

    maybe_inject(inject);
    const int num_pid_m = (em + BLOCK_M - 1) / BLOCK_M;
    const int num_pid_n = n_out / BLOCK_N;
    const int pid = blockIdx.x;
    const int in_group = group_m * num_pid_n;
    const int group_id = pid / in_group;
    const int first_m = group_id * group_m;
    const int gsz = min(num_pid_m - first_m, group_m);
    const int pid_m = first_m + (pid % in_group) % gsz;
    const int pid_n = (pid % in_group) / gsz;
    if (pid_m * BLOCK_M >= *n_post_pad) return;

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int expert = expert_ids[pid_m];
    for (int i = tid; i < BLOCK_M; i += THREADS) s_rows[i] = sorted_ids[pid_m * BLOCK_M + i];
    __syncthreads();

    const bf16_t *wexp = w + (size_t)expert * n_out * k_dim;
    const u32 smem_base = (u32)__cvta_generic_to_shared(smem);
    const int k_tiles = k_dim / BLOCK_K;

    // Issues the cp.async copies of k-tile kt into stage s.
    auto load_tile = [&](int kt, int s) {
        const u32 a_s = smem_base + (u32)s * STAGE_ELEMS * 2u;
        const u32 b_s = a_s + A_ELEMS * 2u;
        const int k0 = kt * BLOCK_K;
#pragma unroll
        for (int i = tid; i < BLOCK_M * KCH; i += THREADS) {
            const int r = i / KCH, ch = i % KCH;
            const int id = s_rows[r];
            const bool ok = id < num_valid;
            const bf16_t *src = ok ? a + (size_t)(id / a_div) * k_dim + k0 + ch * 8 : a;
            cp_async16(a_s + swz(r, ch), src, ok ? 16u : 0u);
        }
#pragma unroll
        for (int i = tid; i < BLOCK_N * KCH; i += THREADS) {
            const int r = i / KCH, ch = i % KCH;
            int row;
            if (MODE == 1)
                row = (r & 1) ? (n_out >> 1) + pid_n * (BLOCK_N / 2) + (r >> 1) : pid_n * (BLOCK_N / 2) + (r >> 1);
            else
                row = pid_n * BLOCK_N + r;
            cp_async16(b_s + swz(r, ch), wexp + (size_t)row * k_dim + k0 + ch * 8, 16u);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.f;

#pragma unroll
    for (int s = 0; s < NUM_STAGES - 1; s++) {
        if (s < k_tiles) load_tile(s, s);
        cp_commit();
    }

    for (int kt = 0; kt < k_tiles; kt++) {
        cp_wait<NUM_STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + NUM_STAGES - 1;
            if (nk < k_tiles) load_tile(nk, nk % NUM_STAGES);
            cp_commit();
        }
        const int s = kt % NUM_STAGES;
        const u32 a_s = smem_base + (u32)s * STAGE_ELEMS * 2u;
        const u32 b_s = a_s + A_ELEMS * 2u;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / 16; kk++) {
            u32 af[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = warp_m * WM + i * 16 + (lane & 15);
                ldsm_x4(a_s + swz(r, kk * 2 + (lane >> 4)), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
            u32 bfr[NT][2];
#if (WN % 16) == 0
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                const int r = warp_n * WN + j * 8 + ((lane >> 4) << 3) + (lane & 7);
                ldsm_x4(b_s + swz(r, kk * 2 + ((lane >> 3) & 1)), bfr[j][0], bfr[j][1], bfr[j + 1][0], bfr[j + 1][1]);
            }
#else
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int r = warp_n * WN + j * 8 + (lane & 7);
                ldsm_x2(b_s + swz(r, kk * 2 + ((lane >> 3) & 1)), bfr[j][0], bfr[j][1]);
            }
#endif
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) mma16816(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
        }
    }
    cp_wait<0>();

    // Epilogue: accumulator (i, j, q) is row warp_m*WM + i*16 + lane/4 (+8 for q >= 2) and
    // tile column warp_n*WN + j*8 + (lane%4)*2 (+1 for odd q).
#pragma unroll
    for (int i = 0; i < MT; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = warp_m * WM + i * 16 + (lane >> 2) + h * 8;
            const int id = s_rows[r];
            if (id >= num_valid) continue;
            if (MODE == 1) {
                bf16_t *dst = c + (size_t)id * ld_c + pid_n * (BLOCK_N / 2);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const float g = acc[i][j][h * 2], u = acc[i][j][h * 2 + 1];
                    const float v = g / (1.f + __expf(-g)) * u;
                    dst[(warp_n * WN + j * 8 + (lane & 3) * 2) >> 1] = f2bf(v);
                }
            } else {
                const float rw = route_w[id] * (inject == 3 ? 1.05f : 1.f);
                u32 *dst = (u32 *)(c + (size_t)id * ld_c + pid_n * BLOCK_N);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const int col = warp_n * WN + j * 8 + (lane & 3) * 2;
                    dst[col >> 1] = pack_bf2(acc[i][j][h * 2] * rw, acc[i][j][h * 2 + 1] * rw);
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    moe_gemm1(const bf16_t *x, const bf16_t *w1, bf16_t *inter, const int *sorted_ids, const int *expert_ids,
              const int *n_post_pad, int em, int num_valid, int topk, int n, int k, int group_m, int inject) {
    moe_gemm<1>(x, w1, inter, nullptr, sorted_ids, expert_ids, n_post_pad, em, num_valid, topk, 2 * n, k, n, group_m,
                inject);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    moe_gemm2(const bf16_t *inter, const bf16_t *w2, bf16_t *slots, const float *route_w, const int *sorted_ids,
              const int *expert_ids, const int *n_post_pad, int em, int num_valid, int n, int k, int group_m,
              int inject) {
    moe_gemm<2>(inter, w2, slots, route_w, sorted_ids, expert_ids, n_post_pad, em, num_valid, 1, k, n, k, group_m,
                inject);
}
