// dnnplan fused GPU passes, batch norm in two launches each way: the sums, then the apply.
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
// Every kernel runs on a grid (C, parts): block (c, p) walks its share of channel c of (N, C, inner).
// The sums need no zeroed output: each block writes its partials to `part` (C x parts x 2 doubles), and
// the last block of a channel to finish (a counter per channel, zero between launches: that block resets
// it) adds the channel's partials in a fixed order and writes the result; the same input always gives
// the same sums, and a CUDA graph can replay the launch.
#define BN_WALK(k, total) \
    for (unsigned int k = blockIdx.y * blockDim.x + threadIdx.x; k < (total); k += blockDim.x * gridDim.y)
#define BN_AT(k) (((long long)((k) / (unsigned int)inner) * c_all + c) * inner + ((k) % (unsigned int)inner))

// Whether this block is the last of its channel to finish (its partials written first); block-uniform.
__device__ bool bn_last_block(double a, double b, double* part, unsigned int* done, int c) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        long long at = 2LL * ((long long)c * gridDim.y + blockIdx.y);
        part[at] = a;
        part[at + 1] = b;
        __threadfence();
        last = atomicAdd(done + c, 1u) == gridDim.y - 1;
    }
    __syncthreads();
    return last;
}
// The channel's partials summed in order (read past the L1 cache: other blocks wrote them); done[c] reset.
__device__ void bn_total(const double* part, unsigned int* done, int c, double* sh, double* a, double* b) {
    double s = 0.0, q = 0.0;
    for (int p = threadIdx.x; p < (int)gridDim.y; p += blockDim.x) {
        long long at = 2LL * ((long long)c * gridDim.y + p);
        s += __ldcg(part + at);
        q += __ldcg(part + at + 1);
    }
    *a = block_sum(s, sh);
    *b = block_sum(q, sh);
    if (threadIdx.x == 0) done[c] = 0u;
}
// (mean, 1/sqrt(var + eps)) of channel c from stats = [sum (C) | sum of squares (C) | count], biased
// variance, in double as kernels.norm forms them, rounded to float once.
__device__ void bn_moments(const double* stats, int c, int c_all, float eps, float* mean, float* invstd) {
    double cnt = stats[2 * c_all];
    double m = stats[c] / cnt;
    double v = stats[c_all + c] / cnt - m * m;
    *mean = (float)m;
    *invstd = (float)(1.0 / sqrt((v > 0.0 ? v : 0.0) + (double)eps));
}
// Forward sums: stats = [sum x | sum x*x | count of this shard].
extern "C" __global__ void bn_stats(const T* x, double* stats, double* part, unsigned int* done, int n_img,
                                    int c_all, int inner) {
    __shared__ double sh[32];
    int c = blockIdx.x;
    unsigned int total = (unsigned int)n_img * (unsigned int)inner;
    double a = 0.0, b = 0.0;
    BN_WALK(k, total) {
        float v = LD(x, BN_AT(k));
        a += v;
        b += (double)v * v;
    }
    a = block_sum(a, sh);
    b = block_sum(b, sh);
    if (!bn_last_block(a, b, part, done, c)) return;
    bn_total(part, done, c, sh, &a, &b);
    if (threadIdx.x == 0) {
        stats[c] = a;
        stats[c_all + c] = b;
        if (c == 0) stats[2 * c_all] = (double)total;
    }
}
// Forward apply from the (all-reduced) stats: y = (x - mean) invstd gamma + beta.
extern "C" __global__ void bn_fwd(const T* x, const double* stats, const T* gamma, const T* beta, T* y, int n_img,
                                  int c_all, int inner, float eps) {
    int c = blockIdx.x;
    float m, r;
    bn_moments(stats, c, c_all, eps, &m, &r);
    float g = LD(gamma, c), b = LD(beta, c);
    unsigned int total = (unsigned int)n_img * (unsigned int)inner;
    BN_WALK(k, total) {
        long long at = BN_AT(k);
        ST(y, at, (LD(x, at) - m) * r * g + b);
    }
}
// Backward sums: sums = [sum dy | sum dy*xhat] (xhat made again from x and the forward's stats), and
// this shard's parameter gradients in the parameters' format: dgamma = sum dy*xhat, dbeta = sum dy.
extern "C" __global__ void bn_bwd_sums(const T* dy, const T* x, const double* stats, double* sums, T* dgamma,
                                       T* dbeta, double* part, unsigned int* done, int n_img, int c_all, int inner,
                                       float eps) {
    __shared__ double sh[32];
    int c = blockIdx.x;
    float m, r;
    bn_moments(stats, c, c_all, eps, &m, &r);
    unsigned int total = (unsigned int)n_img * (unsigned int)inner;
    double a = 0.0, b = 0.0;
    BN_WALK(k, total) {
        long long at = BN_AT(k);
        float g = LD(dy, at);
        a += g;
        b += (double)g * ((LD(x, at) - m) * r);
    }
    a = block_sum(a, sh);
    b = block_sum(b, sh);
    if (!bn_last_block(a, b, part, done, c)) return;
    bn_total(part, done, c, sh, &a, &b);
    if (threadIdx.x == 0) {
        sums[c] = a;
        sums[c_all + c] = b;
        ST(dgamma, c, (float)b);
        ST(dbeta, c, (float)a);
    }
}
// Backward apply from the (all-reduced) sums: dx = gamma invstd (dy - mean dy - xhat mean(dy xhat)).
extern "C" __global__ void bn_bwd(const T* dy, const T* x, const double* stats, const double* sums, const T* gamma,
                                  T* dx, int n_img, int c_all, int inner, float eps) {
    int c = blockIdx.x;
    float m, r;
    bn_moments(stats, c, c_all, eps, &m, &r);
    double cnt = stats[2 * c_all];
    float mdy = (float)(sums[c] / cnt), mdyx = (float)(sums[c_all + c] / cnt);
    float scale = LD(gamma, c) * r;
    unsigned int total = (unsigned int)n_img * (unsigned int)inner;
    BN_WALK(k, total) {
        long long at = BN_AT(k);
        ST(dx, at, scale * (LD(dy, at) - mdy - (LD(x, at) - m) * r * mdyx));
    }
}
