// dnnplan fused GPU passes, max pooling forward and backward, global average pooling.
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
#define POOL_ARGS long long total, int h, int w, int ho, int wo, int kh, int kw, int sh, int sw, \
    int pt, int pl, int dh, int dw
extern "C" __global__ void maxpool_fwd(const T* x, T* y, int* arg, POOL_ARGS) {
    GRID_LOOP(i, total) {
        int ow = (int)(i % wo);
        long long t = i / wo;
        int oh = (int)(t % ho);
        long long nc = t / ho;
        const T* xp = x + nc * h * w;
        float best = NEG_INF;
        int at = 0;
        for (int a = 0; a < kh; ++a) {
            int r = oh * sh - pt + a * dh;
            for (int b = 0; b < kw; ++b) {
                int c = ow * sw - pl + b * dw;
                float v = (r >= 0 && r < h && c >= 0 && c < w) ? LD(xp, (long long)r * w + c) : NEG_INF;
                if ((a == 0 && b == 0) || v > best) { best = v; at = a * kw + b; }
            }
        }
        ST(y, i, best);
        arg[i] = at;
    }
}
// Each output's gradient added to its window's winner (dxf zeroed first, float32).
extern "C" __global__ void maxpool_bwd(const T* dy, const int* arg, float* dxf, POOL_ARGS) {
    GRID_LOOP(i, total) {
        int ow = (int)(i % wo);
        long long t = i / wo;
        int oh = (int)(t % ho);
        long long nc = t / ho;
        int a = arg[i] / kw, b = arg[i] % kw;
        int r = oh * sh - pt + a * dh, c = ow * sw - pl + b * dw;
        if (r >= 0 && r < h && c >= 0 && c < w) atomicAdd(dxf + nc * h * w + (long long)r * w + c, LD(dy, i));
    }
}
// Mean of each row of len elements, one warp per row.
extern "C" __global__ void row_mean(const T* x, T* y, long long rows, int len, float inv) {
    long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    float s = 0.0f;
    for (int j = lane; j < len; j += 32) s += LD(x, row * len + j);
    s = warp_sum(s);
    if (lane == 0) ST(y, row, s * inv);
}
extern "C" __global__ void row_spread(const T* dy, T* dx, long long n, int len, float inv) {
    GRID_LOOP(i, n) { ST(dx, i, LD(dy, i / len) * inv); }
}
