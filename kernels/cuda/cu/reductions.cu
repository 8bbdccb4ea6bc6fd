// dnnplan fused GPU passes, sums over many elements: per channel (a convolution's bias gradient) and per
// column (layer norm, linear bias).
// Compiled once per storage format after a prelude defining T, LD and ST (kernels/cuda/source.py).
// Per-channel sums over (N, C, inner) of x and (mode 1) of x*x or (mode 2) of x*h: grid (C, parts),
// each block one channel's share, double accumulation, atomically added (outputs zeroed first).
extern "C" __global__ void chan_sums(const T* x, const T* h, double* s1, double* s2, int n_img, int c_all,
                                     int inner, int mode) {
    __shared__ double sh[32];
    int c = blockIdx.x;
    unsigned int total = (unsigned int)n_img * (unsigned int)inner;
    double a = 0.0, b = 0.0;
    for (unsigned int k = blockIdx.y * blockDim.x + threadIdx.x; k < total; k += blockDim.x * gridDim.y) {
        unsigned int img = k / (unsigned int)inner, p = k - img * (unsigned int)inner;
        long long at = ((long long)img * c_all + c) * inner + p;
        float v = LD(x, at);
        a += v;
        if (mode == 1) b += (double)v * v;
        else if (mode == 2) b += (double)v * LD(h, at);
    }
    a = block_sum(a, sh);
    b = block_sum(b, sh);
    if (threadIdx.x == 0) {
        atomicAdd(s1 + c, a);
        if (mode) atomicAdd(s2 + c, b);
    }
}
// Column sums of a (rows, d) matrix and (with_xhat) of a*xhat, xhat = (x - mean) rstd per row, in
// row chunks: block (32, 8), grid (ceil(d/32), chunks); partials (chunks, d) in float.
extern "C" __global__ void col_sums(const T* a, const T* x, const float* mean, const float* rstd,
                                    float* p1, float* p2, long long rows, int d, int chunk, int with_xhat) {
    __shared__ float s1[8][33];
    __shared__ float s2[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    long long r0 = (long long)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float u = 0.0f, w = 0.0f;
    if (col < d) {
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) {
            float g = LD(a, r * d + col);
            u += g;
            if (with_xhat) w += g * (LD(x, r * d + col) - mean[r]) * rstd[r];
        }
    }
    s1[threadIdx.y][threadIdx.x] = u;
    s2[threadIdx.y][threadIdx.x] = w;
    __syncthreads();
    if (threadIdx.y == 0 && col < d) {
        for (int k = 1; k < 8; ++k) { u += s1[k][threadIdx.x]; w += s2[k][threadIdx.x]; }
        p1[(long long)blockIdx.y * d + col] = u;
        if (with_xhat) p2[(long long)blockIdx.y * d + col] = w;
    }
}
