// dnnplan fused GPU passes, one block per row: layer norm, softmax cross-entropy, attention's softmax and its backward.
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
// One block per row of d elements.
extern "C" __global__ void ln_fwd(const T* x, const T* gamma, const T* beta, T* y, float* mean_out,
                                  float* rstd_out, int d, float eps) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const T* xr = x + row * d;
    T* yr = y + row * d;
    float s = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) s += LD(xr, j);
    float mean = block_sum(s, sh) / d;
    float q = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) { float t = LD(xr, j) - mean; q += t * t; }
    float rstd = rsqrtf(block_sum(q, sh) / d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x)
        ST(yr, j, (LD(xr, j) - mean) * rstd * LD(gamma, j) + LD(beta, j));
    if (threadIdx.x == 0) { mean_out[row] = mean; rstd_out[row] = rstd; }
}
extern "C" __global__ void ln_bwd(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd,
                                  T* dx, int d) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const T* gr = dy + row * d;
    const T* xr = x + row * d;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = LD(gr, j) * LD(gamma, j);
        a += g;
        b += g * (LD(xr, j) - m) * r;
    }
    float mg = block_sum(a, sh) / d;
    float mgh = block_sum(b, sh) / d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = LD(gr, j) * LD(gamma, j);
        ST(dx + row * d, j, r * (g - mg - (LD(xr, j) - m) * r * mgh));
    }
}
// Softmax cross-entropy, one block per row of k logits; labels minus vocab_lo index the row.
extern "C" __global__ void xent_fwd(const T* z, const long long* labels, float* row_loss, float* row_lse,
                                    float* picked, int k, long long vocab_lo) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const T* zr = z + row * k;
    float m = NEG_INF;
    for (int j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, LD(zr, j));
    m = block_max(m, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < k; j += blockDim.x) s += expf(LD(zr, j) - m);
    float lse = m + logf(block_sum(s, sh));
    if (threadIdx.x == 0) {
        long long lab = labels[row] - vocab_lo;
        bool inside = lab >= 0 && lab < k;
        float pk = LD(zr, inside ? lab : 0);
        row_lse[row] = lse;
        picked[row] = inside ? pk : 0.0f;
        row_loss[row] = lse - pk;
    }
}
extern "C" __global__ void xent_bwd(const T* z, const long long* labels, const float* row_lse,
                                    const float* row_scale, T* dz, long long n, int k, long long vocab_lo,
                                    float coef, int scaled) {
    GRID_LOOP(i, n) {
        long long row = i / k;
        int j = (int)(i - row * k);
        float p = expf(LD(z, i) - row_lse[row]);
        if (scaled) p *= row_scale[row];
        float hot = (labels[row] - vocab_lo == j) ? 1.0f : 0.0f;
        ST(dz, i, (p - hot) * coef);
    }
}
// Attention scores -> probabilities in place: scale, causal mask (key j > query i + sk - sq),
// softmax per row of sk.
extern "C" __global__ void softmax_rows(T* s, long long rows, int sq, int sk, float scale, int causal) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    T* sr = s + row * sk;
    int qi = (int)(row % sq);
    int last = causal ? qi + sk - sq : sk - 1;
    float m = NEG_INF;
    for (int j = threadIdx.x; j < sk; j += blockDim.x) if (j <= last) m = fmaxf(m, LD(sr, j) * scale);
    m = block_max(m, sh);
    float t = 0.0f;
    for (int j = threadIdx.x; j < sk; j += blockDim.x) if (j <= last) t += expf(LD(sr, j) * scale - m);
    float inv = 1.0f / block_sum(t, sh);
    for (int j = threadIdx.x; j < sk; j += blockDim.x)
        ST(sr, j, j <= last ? expf(LD(sr, j) * scale - m) * inv : 0.0f);
}
// The softmax's backward in place on dp: ds = p (dp - sum_j dp p), one block per row.
extern "C" __global__ void softmax_bwd_rows(const T* p, T* dp, int sk) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const T* pr = p + row * sk;
    T* dr = dp + row * sk;
    float a = 0.0f;
    for (int j = threadIdx.x; j < sk; j += blockDim.x) a += LD(dr, j) * LD(pr, j);
    float tot = block_sum(a, sh);
    for (int j = threadIdx.x; j < sk; j += blockDim.x) ST(dr, j, LD(pr, j) * (LD(dr, j) - tot));
}
